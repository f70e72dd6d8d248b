"""`escalation ladder plan` names the deadline and action rules a migration changes, even
when no due time moves: a Reg E v2 escalation migrated to v3 is assessed by v3's obligations
from then on (its investigation period needs a timely provisional credit, 12 CFR
1005.11(c)(2)(i))."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from escalation.adapters.ladder_files import LadderCatalog
from escalation.entrypoints.cli_ladder import _plan_json, _rule_changes

CATALOG = LadderCatalog.from_dir(Path(__file__).resolve().parents[2] / "ladders")


def _plan(*from_versions: int) -> SimpleNamespace:
    return SimpleNamespace(
        ladder="reg_e_error_resolution", target_version=3, checksum="c", plan_hash="h",
        items=[], blocked=[], groups=lambda: [], changed=lambda: [],
        from_versions=lambda: list(from_versions))


def test_v2_to_v3_lists_the_new_obligations() -> None:
    [r] = _rule_changes(CATALOG, "reg_e_error_resolution", _plan(2))
    assert r["from"] == 2
    items = {(c["change"], c["item"]) for c in r["changes"]}
    assert ("changed", "investigation") in items  # met_by and requires
    assert ("added", "provisional_credit_notice") in items
    assert ("added", "provisional_credit") in items  # an action
    inv = next(c for c in r["changes"] if c["item"] == "investigation")
    assert any("requires" in line for line in inv["lines"])
    assert _plan_json(_plan(2), 10, [r])["rule_changes"] == [r]


def test_a_plan_within_one_version_has_no_rule_changes() -> None:
    assert _rule_changes(CATALOG, "reg_e_error_resolution", _plan(3)) == []
