"""Regression tests: deadlines a compliance officer checked by hand (cases 1-4 of the
deadline review: Reg Z billing cycles, CFPB date-only import, west-coast Reg E, DST gap)."""

from __future__ import annotations

import io
import uuid
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from escalation.adapters.ladder_files import LadderCatalog
from escalation.domain.calendars import (
    US_FEDERAL_RESERVE,
    builtin_calendars,
    parse_wall_time,
    resolve_wall,
    with_institution,
)
from escalation.domain.errors import InvalidInput
from escalation.service_layer.enqueue import EnqueueRequest, build_with_provenance
from escalation.service_layer.importer import ColumnMapping, plan_import

ROOT = Path(__file__).resolve().parents[2]
CATALOG = LadderCatalog.from_dir(ROOT / "ladders")
CALS = builtin_calendars()  # institution = Federal Reserve calendar in America/New_York
NY, LA = ZoneInfo("America/New_York"), ZoneInfo("America/Los_Angeles")
NOW = datetime(2031, 1, 6, 15, 0, tzinfo=UTC)  # builds happen after every opened_at below
HASH = "ab" * 32


def _req(**kw: Any) -> EnqueueRequest:
    return EnqueueRequest(dispute_id=uuid.uuid4(), materiality="100.00", source_hash=HASH, **kw)


# --------------------------------------------------------------------- case 1: Reg Z cycles
def test_reg_z_two_complete_billing_cycles_end_on_the_closing_day_not_after_90_days() -> None:
    # Notice received Mon 2026-01-05; the account's cycle closes on the 6th. The cycle
    # 12-07..01-06 was under way at receipt; the complete cycles after it are 01-07..02-06
    # and 02-07..03-06, so the resolution deadline is the end of 2026-03-06 in New York
    # (EST, UTC-5): 2026-03-07T05:00Z. The 90-day cap would be the end of 2026-04-05.
    ladder = CATALOG.latest("reg_z_billing_error")
    esc, details = build_with_provenance(
        _req(ladder=ladder.name, opened_at=date(2026, 1, 5),
             attributes={"cycle_closing_day": "6"}),
        ladder, CALS, NOW)
    deadlines = dict(esc.deadlines)
    assert deadlines["resolution"] == datetime(2026, 3, 7, 5, 0, tzinfo=UTC)
    # 30-day written acknowledgment (1026.13(c)(1)): 01-05 + 30 days = end of 2026-02-04.
    assert deadlines["acknowledgment"] == datetime(2026, 2, 5, 5, 0, tzinfo=UTC)
    rules = details["deadline_rules"]
    assert isinstance(rules, dict)
    assert rules["resolution"]["citation"] == "12 CFR 1026.13(c)(2)"
    assert "2 complete billing cycles (closing day 6)" in rules["resolution"]["rule"]
    # The first tier's due time is bounded by the acknowledgment, named with its citation.
    prov = details["deadline"]
    assert isinstance(prov, dict)
    assert (prov["name"], prov["citation"]) == ("acknowledgment", "12 CFR 1026.13(c)(1)")


def test_reg_z_tier_windows_end_before_the_billing_cycle_deadline() -> None:
    ladder = CATALOG.latest("reg_z_billing_error")
    esc, _ = build_with_provenance(
        _req(ladder=ladder.name, opened_at=date(2026, 1, 5),
             attributes={"cycle_closing_day": 6}), ladder, CALS, NOW)
    total_days = sum(t.window.amount for t in ladder.tiers)
    assert total_days + 5 <= (date(2026, 3, 6) - date(2026, 1, 5)).days + 1


def test_reg_z_without_a_closing_day_is_refused_in_one_line() -> None:
    ladder = CATALOG.latest("reg_z_billing_error")
    with pytest.raises(InvalidInput) as exc:
        build_with_provenance(_req(ladder=ladder.name, opened_at=date(2026, 1, 5)),
                              ladder, CALS, NOW)
    assert "cycle_closing_day" in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("bad", ["0", "32", "sixth", True])
def test_reg_z_malformed_closing_day_is_refused(bad: object) -> None:
    ladder = CATALOG.latest("reg_z_billing_error")
    with pytest.raises(InvalidInput, match="cycle_closing_day"):
        build_with_provenance(_req(ladder=ladder.name, opened_at=date(2026, 1, 5),
                                   attributes={"cycle_closing_day": bad}), ladder, CALS, NOW)


# --------------------------------------------------------------------- case 2: CFPB dates
def test_cfpb_date_only_import_is_due_at_the_end_of_the_local_day() -> None:
    # "Date sent to company" 2023-08-25 is a date in the company's local time (New York);
    # 15 calendar days -> the end of 2023-09-09 EDT (UTC-4) = 2023-09-10T04:00Z, not
    # 2023-09-09T00:00Z (midnight UTC, 28 h early).
    mapping = ColumnMapping.from_file(ROOT / "docs" / "examples" / "cfpb_ladder_mapping.toml")
    csv_text = ("Complaint ID,Date sent to company,Company response to consumer,"
                "Timely response?\n7453262,2023-08-25,,\n")  # no answer yet
    plan = plan_import(io.StringIO(csv_text), mapping, "America/New_York")
    assert not plan.errors
    (_, req), = plan.requests
    ladder = CATALOG.latest("cfpb_complaint_response")
    esc, _ = build_with_provenance(req, ladder, CALS, NOW)
    deadlines = dict(esc.deadlines)
    assert deadlines["company_response"] == datetime(2023, 9, 10, 4, 0, tzinfo=UTC)
    assert deadlines["final_response"] == datetime(2023, 10, 25, 4, 0, tzinfo=UTC)  # 08-25+60
    assert esc.entered_tier_at == datetime(2023, 8, 25, 4, 0, tzinfo=UTC)  # 00:00 EDT
    assert esc.institution_tz == "America/New_York"


def test_cfpb_v2_fed_calendar_day_deadline_also_ends_at_the_local_day_end() -> None:
    ladder = CATALOG.get("cfpb_complaint_response", 2)
    esc, _ = build_with_provenance(_req(ladder=ladder.name, opened_at=date(2023, 8, 25)),
                                   ladder, CALS, NOW)
    assert dict(esc.deadlines)["company_response"] == datetime(2023, 9, 10, 4, 0, tzinfo=UTC)


# --------------------------------------------------------------------- case 3: west coast
def test_west_coast_reg_e_notice_at_2330_counts_from_its_own_local_day() -> None:
    # Thu 2026-03-05 23:30 PST is still Thursday in Los Angeles (02:30 Friday in New York).
    # 10 business days after Thursday (the receipt day is not counted): Fri 6, Mon 9 ..
    # Fri 13, Mon 16 .. Thu 19 -> close of business Thu 2026-03-19 17:00 PDT = 03-20 00:00Z
    # (DST began 03-08). Read in New York it would be Fri 03-20 17:00 EDT.
    ladder = CATALOG.latest("reg_e_error_resolution")
    attrs = {"new_account": "false", "point_of_sale": "false", "foreign_initiated": "false"}
    esc, _ = build_with_provenance(
        _req(ladder=ladder.name, opened_at=datetime(2026, 3, 5, 23, 30, tzinfo=LA),
             timezone="America/Los_Angeles", attributes=attrs), ladder, CALS, NOW)
    assert dict(esc.deadlines)["determine_or_provisionally_credit"] == datetime(
        2026, 3, 20, 0, 0, tzinfo=UTC)
    assert esc.institution_tz == "America/Los_Angeles"
    assert esc.institution_calendar == "us_federal_reserve"
    # The deployment setting does the same for every escalation (no per-escalation flag).
    west = with_institution(CALS, "us_federal_reserve", "America/Los_Angeles")
    esc2, _ = build_with_provenance(
        _req(ladder=ladder.name, opened_at=datetime(2026, 3, 5, 23, 30, tzinfo=LA),
             attributes=attrs), ladder, west, NOW)
    assert esc2.deadlines == esc.deadlines and esc2.institution_tz == "America/Los_Angeles"


def test_import_reads_naive_notice_in_the_rows_zone_column() -> None:
    mapping = ColumnMapping(dispute_id="id", opened_at="received", timezone_column="zone",
                            ladder="reg_e_error_resolution",
                            default_attributes={"new_account": "false",
                                                "point_of_sale": "false",
                                                "foreign_initiated": "false"})
    csv_text = "id,received,zone\nA1,2026-03-05T23:30,America/Los_Angeles\n"
    (_, req), = plan_import(io.StringIO(csv_text), mapping, "America/New_York").requests
    ladder = CATALOG.latest("reg_e_error_resolution")
    esc, _ = build_with_provenance(req, ladder, CALS, NOW)
    assert esc.entered_tier_at == datetime(2026, 3, 6, 7, 30, tzinfo=UTC)
    assert dict(esc.deadlines)["determine_or_provisionally_credit"] == datetime(
        2026, 3, 20, 0, 0, tzinfo=UTC)


def test_ladder_version_institution_override(tmp_path: Path) -> None:
    src = (ROOT / "ladders" / "reg_e_error_resolution.v2.toml").read_text()
    (tmp_path / "reg_e_error_resolution.v1.toml").write_text(
        src.replace("version = 2\nprevious_version = 1\n", "version = 1\n")
        + '\n[institution]\ntimezone = "America/Los_Angeles"\n')
    ladder = LadderCatalog.from_dir(tmp_path).latest("reg_e_error_resolution")
    attrs = {"new_account": False, "point_of_sale": False, "foreign_initiated": False}
    esc, _ = build_with_provenance(
        _req(ladder=ladder.name, opened_at=datetime(2026, 3, 5, 23, 30, tzinfo=LA),
             attributes=attrs), ladder, CALS, NOW)
    assert esc.institution_tz == "America/Los_Angeles"
    assert dict(esc.deadlines)["determine_or_provisionally_credit"] == datetime(
        2026, 3, 20, 0, 0, tzinfo=UTC)


def test_reg_e_missing_attribute_is_refused() -> None:
    ladder = CATALOG.latest("reg_e_error_resolution")
    with pytest.raises(InvalidInput, match="point_of_sale"):
        build_with_provenance(
            _req(ladder=ladder.name, opened_at=datetime(2026, 3, 5, 12, tzinfo=UTC),
                 attributes={"new_account": "false", "foreign_initiated": "no"}),
            ladder, CALS, NOW)


def test_unknown_zone_is_refused() -> None:
    ladder = CATALOG.latest("dispute_review")
    with pytest.raises(InvalidInput, match="unknown time zone"):
        build_with_provenance(_req(opened_at=NOW, timezone="Mars/Olympus"), ladder, CALS, NOW)


# --------------------------------------------------------------------- case 4: DST gap
def test_nonexistent_naive_time_resolves_to_the_earlier_instant_everywhere() -> None:
    # 2026-03-08T02:30 does not exist in New York (02:00 EST -> 03:00 EDT). The rule: the
    # earlier instant, never later than the wall clock: read with the post-transition
    # offset (-04:00) = 06:30Z. The old import path gave 07:30Z.
    wall = datetime(2026, 3, 8, 2, 30)
    expected = datetime(2026, 3, 8, 6, 30, tzinfo=UTC)
    assert resolve_wall(wall, NY) == expected
    assert US_FEDERAL_RESERVE.resolve_wall(wall) == expected
    assert parse_wall_time("2026-03-08T02:30", NY, "x") == (expected, False)
    mapping = ColumnMapping(dispute_id="id", opened_at="at", ladder="dispute_review")
    (_, req), = plan_import(io.StringIO("id,at\nX,2026-03-08T02:30\n"), mapping,
                            "America/New_York").requests
    assert req.opened_at == expected


def test_ambiguous_naive_time_takes_the_first_occurrence() -> None:
    # 2026-11-01T01:30 happens twice in New York (EDT then EST): the first is 05:30Z.
    assert resolve_wall(datetime(2026, 11, 1, 1, 30), NY) == datetime(
        2026, 11, 1, 5, 30, tzinfo=UTC)
    assert parse_wall_time("2026-11-01T01:30", NY, "x")[0] == datetime(
        2026, 11, 1, 5, 30, tzinfo=UTC)


def test_date_only_is_the_start_of_the_local_day() -> None:
    assert parse_wall_time("2026-03-08", NY, "x") == (datetime(2026, 3, 8, 5, 0, tzinfo=UTC),
                                                      True)
    assert parse_wall_time("2026-03-08", LA, "x")[0] == datetime(2026, 3, 8, 8, 0, tzinfo=UTC)


# ------------------------------------------------------------ newcomer: inputs that moved deadlines
_REG_E_ATTRS = {"new_account": "false", "point_of_sale": "false", "foreign_initiated": "false"}


def test_a_future_notice_is_refused_like_a_future_opening() -> None:
    # A notice dated after the moment it is recorded (a year typo) would move every
    # regulatory deadline out with it; up to 5 minutes of clock skew is tolerated.
    from datetime import timedelta

    ladder = CATALOG.latest("reg_e_error_resolution")
    with pytest.raises(InvalidInput, match=r"^notice_at .* is in the future"):
        build_with_provenance(
            _req(ladder=ladder.name, due_at=NOW + timedelta(days=1),
                 anchor_at=NOW + timedelta(days=365), attributes=_REG_E_ATTRS),
            ladder, CALS, NOW)
    esc, _ = build_with_provenance(
        _req(ladder=ladder.name, due_at=NOW + timedelta(days=1),
             anchor_at=NOW + timedelta(minutes=4), attributes=_REG_E_ATTRS), ladder, CALS, NOW)
    assert esc.deadlines  # within the skew: counted from the notice


def test_an_attribute_the_ladder_does_not_use_is_refused_naming_the_ones_it_does() -> None:
    ladder = CATALOG.latest("reg_e_error_resolution")
    with pytest.raises(InvalidInput, match=r"unknown dispute attribute\(s\) 'bogus'.*"
                                           r"foreign_initiated, new_account, point_of_sale"):
        build_with_provenance(
            _req(ladder=ladder.name, opened_at=datetime(2026, 3, 5, 12, tzinfo=UTC),
                 attributes={**_REG_E_ATTRS, "bogus": "1"}), ladder, CALS, NOW)
    cfpb = CATALOG.latest("cfpb_complaint_response")
    with pytest.raises(InvalidInput, match="this ladder's deadlines use none"):
        build_with_provenance(
            _req(ladder=cfpb.name, opened_at=datetime(2026, 3, 5, 12, tzinfo=UTC),
                 attributes={"new_account": "false"}), cfpb, CALS, NOW)


def test_every_missing_attribute_is_named_at_once() -> None:
    ladder = CATALOG.latest("reg_e_error_resolution")
    with pytest.raises(InvalidInput) as err:
        build_with_provenance(
            _req(ladder=ladder.name, opened_at=datetime(2026, 3, 5, 12, tzinfo=UTC)),
            ladder, CALS, NOW)
    assert str(err.value) == ("missing dispute attributes 'foreign_initiated', "
                              "'new_account', 'point_of_sale'")


def test_an_attribute_given_twice_on_the_command_line_is_refused() -> None:
    from escalation.entrypoints.cli_common import parse_attributes

    assert parse_attributes(["a=1", " b = x "]) == {"a": "1", "b": "x"}
    with pytest.raises(InvalidInput, match="--attribute foreign_initiated given twice"):
        parse_attributes(["foreign_initiated=false", "foreign_initiated=true"])
