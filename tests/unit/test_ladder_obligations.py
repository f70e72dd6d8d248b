"""Ladder files with obligations (docs/ladders.md "Obligations"): every action a deadline
names must be declared, `requires.within` must name another anchor-based deadline, and the
`requires` references must not form a cycle. Each refusal names the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from escalation.adapters.ladder_files import load_ladder_file
from escalation.domain.errors import LadderError
from escalation.domain.ladder import RESOLUTION

BASE = '''
ladder = "obl"
version = 1
terminal_tier = "b"

[[actions]]
id = "credit"
name = "Credit"
money = true

[[actions]]
id = "notice"
name = "Notice"

[[tiers]]
id = "a"
name = "A"
rank = 10
window = { amount = 2, unit = "calendar_days" }

[[tiers]]
id = "b"
name = "B"
rank = 20
window = { amount = 2, unit = "calendar_days" }

[[regulatory]]
name = "first"
anchor = "notice_received"
amount = 10
unit = "calendar_days"
met_by = ["credit", "resolution"]
caps = ["a"]

[[regulatory]]
name = "second"
anchor = "notice_received"
amount = 45
unit = "calendar_days"
requires = { action = "credit", within = "first" }
caps = ["b"]

[[regulatory]]
name = "told"
anchor = "credit"
started_by = "credit"
amount = 2
unit = "calendar_days"
met_by = ["notice"]
caps = ["a"]
'''


def _load(tmp_path: Path, text: str) -> object:
    p = tmp_path / "obl.v1.toml"
    p.write_text(text)
    return load_ladder_file(p)


def test_the_valid_file_loads_with_its_obligations(tmp_path: Path) -> None:
    lad = _load(tmp_path, BASE)
    deadlines = {d.name: d for d in lad.deadlines}  # type: ignore[attr-defined]
    assert deadlines["first"].met_by == ("credit", RESOLUTION)
    assert deadlines["second"].met_by == (RESOLUTION,)  # the default: the resolution only
    assert deadlines["second"].requires.within == "first"
    assert deadlines["told"].started_by == ("credit",)
    assert [a.id for a in lad.actions] == ["credit", "notice"]  # type: ignore[attr-defined]
    assert lad.action("credit").money  # type: ignore[attr-defined]


@pytest.mark.parametrize(("old", "new", "expected"), [
    ('met_by = ["credit", "resolution"]', 'met_by = ["credit", "refund"]',
     "regulatory.first.met_by: unknown action(s) refund"),
    ('started_by = "credit"', 'started_by = "debit"',
     "regulatory.told.started_by: unknown action(s) debit"),
    ('requires = { action = "credit", within = "first" }',
     'requires = { action = "debit", within = "first" }',
     "regulatory.second.requires.action: unknown action 'debit'"),
    ('requires = { action = "credit", within = "first" }',
     'requires = { action = "credit", within = "told" }',
     "regulatory.second.requires.within: 'told' is not another anchor-based deadline"),
    ('requires = { action = "credit", within = "first" }',
     'requires = { action = "credit", within = "second" }',
     "regulatory.second.requires.within: 'second' is not another"),
    ('id = "notice"', 'id = "resolution"', "actions: 'resolution' is reserved"),
    ('id = "notice"', 'id = "credit"', "actions: duplicate action id"),
    ('met_by = ["credit", "resolution"]', "met_by = []", "met_by"),
])
def test_a_bad_obligation_is_refused_naming_the_field(
    tmp_path: Path, old: str, new: str, expected: str,
) -> None:
    assert old in BASE
    with pytest.raises(LadderError) as exc:
        _load(tmp_path, BASE.replace(old, new, 1))
    assert str(exc.value).startswith(str(tmp_path / "obl.v1.toml"))
    assert expected in str(exc.value)


def test_a_cycle_among_requires_is_refused(tmp_path: Path) -> None:
    cyclic = BASE.replace('met_by = ["credit", "resolution"]\ncaps = ["a"]',
                          'met_by = ["credit", "resolution"]\ncaps = ["a"]\n'
                          'requires = { action = "credit", within = "second" }', 1)
    with pytest.raises(LadderError, match=r"cycle (first -> second -> first|second -> first"
                                          r" -> second)"):
        _load(tmp_path, cyclic)


def test_every_shipped_obligation_version_names_a_citation_per_deadline_and_action() -> None:
    root = Path(__file__).resolve().parents[2] / "ladders"
    for name in ("reg_e_error_resolution.v3", "reg_z_billing_error.v3",
                 "cfpb_complaint_response.v4", "mastercard_chargeback.v1"):
        lad = load_ladder_file(root / f"{name}.toml")
        assert all(d.source for d in lad.deadlines), name
        assert all(a.source for a in lad.actions), name


def test_a_full_amount_action_compares_in_usd_unless_the_file_names_a_currency(
    tmp_path: Path,
) -> None:
    """A ``full_amount`` credit is compared with the disputed amount, which carries no
    currency: the action says which (``currency``, default USD, the shipped rule being Reg
    E's 12 CFR 1005.11(c)(2)(i) for US consumer accounts)."""
    full = BASE.replace('money = true\n', 'money = true\nfull_amount = true\n', 1)
    ladder = _load(tmp_path, full)
    assert ladder.actions[0].currency == "USD"  # type: ignore[attr-defined]
    eur = _load(tmp_path, full.replace('full_amount = true\n',
                                       'full_amount = true\ncurrency = "EUR"\n', 1))
    assert eur.actions[0].currency == "EUR"  # type: ignore[attr-defined]
    from escalation.domain.ladder_diff import action_lines
    # a diff between two versions shows the change of comparison currency
    assert "full amount: yes, in EUR" in action_lines(eur.actions[0])  # type: ignore[attr-defined]


@pytest.mark.parametrize(("extra", "why"), [
    ('currency = "EUR"\n', "only meaningful with full_amount"),
    ('full_amount = true\ncurrency = "XXQ"\n', "not an active ISO 4217 currency code"),
    ('full_amount = true\ncurrency = "usd"\n', "currency"),
])
def test_a_comparison_currency_is_refused_without_full_amount_or_unknown(
    tmp_path: Path, extra: str, why: str,
) -> None:
    text = BASE.replace('money = true\n', 'money = true\n' + extra, 1)
    with pytest.raises(LadderError, match=why):
        _load(tmp_path, text)
