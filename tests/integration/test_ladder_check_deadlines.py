"""``ladder check`` tests tier windows against attribute-dependent deadlines over anchors
across 2026-2030 and every attribute variant.

A five-year sweep per variant over the shipped files takes seconds, so these tests sit with
the integration tier, not the unit tier (which stays a few seconds long)."""

from __future__ import annotations

from pathlib import Path

from escalation.adapters.ladder_files import check_ladder_dir, load_ladder_file
from escalation.domain.ladder_check import ANCHOR_FROM, ANCHOR_SPAN, attribute_variants

ROOT = Path(__file__).resolve().parents[2]


def _copy(tmp_path: Path, name: str, text: str) -> Path:
    (tmp_path / name).write_text(text)
    return tmp_path


def _as_v1(name: str) -> str:
    text = (ROOT / "ladders" / name).read_text()
    return text.replace("version = 2\nprevious_version = 1\n", "version = 1\n")


def test_shipped_ladders_pass_over_2026_to_2030_and_every_variant() -> None:
    assert ANCHOR_FROM.year == 2026 and (ANCHOR_FROM + ANCHOR_SPAN).year == 2031
    assert check_ladder_dir(ROOT / "ladders") == []


def test_every_closing_day_and_boolean_outcome_is_a_variant() -> None:
    reg_z = load_ladder_file(ROOT / "ladders" / "reg_z_billing_error.v2.toml")
    resolution = next(d for d in reg_z.deadlines if d.name == "resolution")
    days = sorted(int(str(v["cycle_closing_day"])) for v in attribute_variants(resolution))
    assert days == list(range(1, 32))
    reg_e = load_ladder_file(ROOT / "ladders" / "reg_e_error_resolution.v2.toml")
    investigation = next(d for d in reg_e.deadlines if d.name == "investigation")
    outcomes = attribute_variants(investigation)
    assert len(outcomes) == 2  # 45 days (all false) or 90 days (any true)
    assert {any(bool(v) for v in o.values()) for o in outcomes} == {True, False}


def test_tier_windows_longer_than_two_billing_cycles_are_refused(tmp_path: Path) -> None:
    # 20 + 20 + 20 days + 5 buffer = 65 > the shortest two complete cycles (58 days):
    # the 90-day cap alone would have let it pass.
    text = _as_v1("reg_z_billing_error.v2.toml").replace(
        'window = { amount = 20, unit = "calendar_days", calendar = "institution" }',
        'window = { amount = 30, unit = "calendar_days", calendar = "institution" }')
    errors = check_ladder_dir(_copy(tmp_path, "reg_z_billing_error.v1.toml", text))
    assert len(errors) == 1
    assert "do not fit inside resolution" in errors[0]
    assert "cycle_closing_day" in errors[0]


def test_reg_e_windows_checked_against_the_standard_not_the_new_account_variant(
    tmp_path: Path,
) -> None:
    # 4 + 3 business days fit in 10 (buffer 1); 6 + 4 = 10 + 1 > 10 only for accounts that
    # are not new (20 business days): the failing variant is named.
    text = _as_v1("reg_e_error_resolution.v2.toml").replace(
        'window = { amount = 4, unit = "business_days"',
        'window = { amount = 6, unit = "business_days"').replace(
        'window = { amount = 3, unit = "business_days"',
        'window = { amount = 4, unit = "business_days"')
    errors = check_ladder_dir(_copy(tmp_path, "reg_e_error_resolution.v1.toml", text))
    first = [e for e in errors if "inside determine_or_provisionally_credit" in e]
    assert len(first) == 1 and "'new_account': False" in first[0]
