"""domain.ladder_diff on the shipped Reg E versions: what the console's ladders page says
changed (tiers, deadlines with caps, met_by, started_by, requires; actions)."""

from __future__ import annotations

from pathlib import Path

import pytest

from escalation.adapters.ladder_files import load_ladder_file
from escalation.domain.ladder import Ladder
from escalation.domain.ladder_diff import Change, diff

LADDERS = Path(__file__).resolve().parents[2] / "ladders"


def _reg_e(version: int) -> Ladder:
    return load_ladder_file(LADDERS / f"reg_e_error_resolution.v{version}.toml")


def test_v1_to_v2_names_tier_windows_caps_and_the_added_deadline() -> None:
    d = diff(_reg_e(1), _reg_e(2))
    tiers = {e.key: e for e in d.tiers}
    assert tiers["compliance"].change is Change.CHANGED
    assert ("window: 2 business days (us_federal_reserve) -> 25 calendar days (institution)"
            in tiers["compliance"].lines)
    deadlines = {e.key: e for e in d.deadlines}
    assert deadlines["investigation"].change is Change.ADDED
    assert "caps: compliance" in deadlines["investigation"].lines
    assert "caps: every tier -> standard, senior" in \
        deadlines["determine_or_provisionally_credit"].lines
    assert d.actions == ()


def test_v2_to_v3_lists_actions_and_requires_and_reversed_it_removes_them() -> None:
    d = diff(_reg_e(2), _reg_e(3))
    assert d.tiers == () and d.ladder_fields == ()
    assert {e.key for e in d.actions if e.change is Change.ADDED} == {
        "provisional_credit", "provisional_credit_notice", "determination", "results_notice",
        "correction", "provisional_credit_reversal", "reversal_notice"}
    inv = next(e for e in d.deadlines if e.key == "investigation")
    assert inv.lines == ("met by: resolution -> determination, resolution",
                         "requires: none -> provisional_credit before "
                         "determine_or_provisionally_credit")
    back = diff(_reg_e(3), _reg_e(2))
    assert {e.change for e in back.actions} == {Change.REMOVED}
    assert {e.key for e in back.deadlines if e.change is Change.REMOVED} == {
        "provisional_credit_notice", "results_notice", "reversal_notice"}
    assert diff(_reg_e(3), _reg_e(3)).empty


def test_two_ladders_are_not_compared() -> None:
    other = load_ladder_file(LADDERS / "reg_z_billing_error.v3.toml")
    with pytest.raises(ValueError, match="cannot compare"):
        diff(_reg_e(3), other)
