"""Hand-computed deadlines, one row each with the reasoning (docs/sla.md conventions).

Calendar facts used (Federal Reserve holidays; a Sunday holiday closes the Monday after, a
Saturday holiday leaves the Friday before open):
2026: Jan 1 Thu, MLK Jan 19, Presidents Feb 16, Juneteenth Fri Jun 19, Jul 4 Sat (Fri Jul 3
open), Thanksgiving Nov 26, Christmas Fri Dec 25. 2027: Juneteenth Sat (Fri Jun 18 open),
Jul 4 Sun (Mon Jul 5 closed), Christmas Sat (Fri Dec 24 open). 2028: Jan 1 Sat (Fri
2027-12-31 open), Presidents Feb 21, Veterans Day Sat Nov 11 (Fri Nov 10 open). 2022:
Juneteenth Sun (Mon Jun 20 closed). DST (US): 2026 Mar 8 / Nov 1; 2027 Mar 14 / Nov 7;
2028 Mar 12 / Nov 5. Business hours 09:00-17:00 local; business-day deadlines end at the
close of the Nth business day after the start's local day (receipt day never counted);
calendar-day deadlines end at the end of the local day (the next 00:00 local).
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from escalation.domain.calendars import SlaWindow, WindowUnit, builtin_calendars, with_institution
from escalation.domain.ladder import DeadlineVariant, RegulatoryDeadline
from escalation.domain.sla_timing import remaining_ms, resume_due

NY, LA = ZoneInfo("America/New_York"), ZoneInfo("America/Los_Angeles")
CALS = builtin_calendars()
REG = {"NY": with_institution(CALS, "us_federal_reserve", "America/New_York"),
       "LA": with_institution(CALS, "us_federal_reserve", "America/Los_Angeles"),
       "UTC": with_institution(CALS, "utc", "UTC")}
BD, CD = WindowUnit.BUSINESS_DAYS, WindowUnit.CALENDAR_DAYS


def Z(y: int, mo: int, d: int, h: int = 0, mi: int = 0) -> datetime:
    """An instant written in UTC."""
    return datetime(y, mo, d, h, mi, tzinfo=UTC)


def L(tz: ZoneInfo, y: int, mo: int, d: int, h: int = 0, mi: int = 0) -> datetime:
    """An instant written as local wall time (no gap/overlap times are used here)."""
    return datetime(y, mo, d, h, mi, tzinfo=tz)


def rule(amount: int, unit: WindowUnit, cycles: int = 0) -> RegulatoryDeadline:
    return RegulatoryDeadline("d", "notice", SlaWindow(amount, unit, "institution"),
                              billing_cycles=cycles, source="test")


REG_E_10 = RegulatoryDeadline(
    "determine", "notice", SlaWindow(10, BD, "institution"), source="12 CFR 1005.11(c)(1)",
    variants=(DeadlineVariant(("new_account",), SlaWindow(20, BD, "institution")),))
REG_E_45 = RegulatoryDeadline(
    "investigation", "notice", SlaWindow(45, CD, "institution"),
    variants=(DeadlineVariant(("new_account", "point_of_sale", "foreign_initiated"),
                              SlaWindow(90, CD, "institution")),))
NO = {"new_account": False, "point_of_sale": False, "foreign_initiated": False}

# (zone, rule, anchor, attributes, expected deadline)
CASES: list[tuple[str, RegulatoryDeadline, datetime, dict[str, object], datetime]] = [
    # 1. Mon 2026-01-05, 10 business days: Jan 6,7,8,9,12,13,14,15,16 (9), Mon 19 is MLK
    #    Day, Tue 20 is the 10th -> Tue 2026-01-20 17:00 EST.
    ("NY", REG_E_10, L(NY, 2026, 1, 5, 10), NO, L(NY, 2026, 1, 20, 17)),
    # 2. Wed 2025-12-31, 1 business day: Jan 1 closed -> Fri 2026-01-02 17:00.
    ("NY", rule(1, BD), L(NY, 2025, 12, 31, 9), {}, L(NY, 2026, 1, 2, 17)),
    # 3. Juneteenth on a Friday: Fri 2026-06-12, 5 business days: 15,16,17,18 (4), Fri 19
    #    closed, Mon 22 is the 5th -> 2026-06-22 17:00 EDT.
    ("NY", rule(5, BD), L(NY, 2026, 6, 12, 11), {}, L(NY, 2026, 6, 22, 17)),
    # 4. Juneteenth on a Saturday (2027): Reserve Banks stay open Fri Jun 18 -> Thu 17 + 1.
    ("NY", rule(1, BD), L(NY, 2027, 6, 17, 12), {}, L(NY, 2027, 6, 18, 17)),
    # 5. Juneteenth on a Sunday (2022): Mon Jun 20 closed -> Fri 17 + 1 = Tue 2022-06-21.
    ("NY", rule(1, BD), L(NY, 2022, 6, 17, 12), {}, L(NY, 2022, 6, 21, 17)),
    # 6. July 4 on a Sunday (2027): Mon Jul 5 closed -> Fri Jul 2 + 1 = Tue 2027-07-06.
    ("NY", rule(1, BD), L(NY, 2027, 7, 2, 12), {}, L(NY, 2027, 7, 6, 17)),
    # 7. July 4 on a Saturday (2026): Fri Jul 3 open -> Thu Jul 2 + 1 = Fri 2026-07-03.
    ("NY", rule(1, BD), L(NY, 2026, 7, 2, 12), {}, L(NY, 2026, 7, 3, 17)),
    # 8. Christmas on a Saturday (2027): Fri Dec 24 open -> Thu 23 + 1 = Fri 2027-12-24.
    ("NY", rule(1, BD), L(NY, 2027, 12, 23, 12), {}, L(NY, 2027, 12, 24, 17)),
    # 9. New Year 2028 on a Saturday: Fri 2027-12-31 open -> Thu 30 + 1 = Fri 31.
    ("NY", rule(1, BD), L(NY, 2027, 12, 30, 12), {}, L(NY, 2027, 12, 31, 17)),
    # 10. A 23:30 notice counts from its own local day: Thu 2026-03-05 23:30 EST + 10: Fri 6,
    #     Mon 9 .. Fri 13, Mon 16 .. Thu 19 -> Thu 2026-03-19 17:00 EDT (21:00Z; DST Mar 8).
    ("NY", REG_E_10, L(NY, 2026, 3, 5, 23, 30), NO, Z(2026, 3, 19, 21)),
    # 11. The same wall time in Los Angeles: Thu 03-19 17:00 PDT = 2026-03-20 00:00Z.
    ("LA", REG_E_10, L(LA, 2026, 3, 5, 23, 30), NO, Z(2026, 3, 20, 0)),
    # 12. That LA instant read by a New York institution is Fri 02:30: 10 business days
    #     after Friday -> Fri 03-20 17:00 EDT = 21:00Z (one business day later).
    ("NY", REG_E_10, L(LA, 2026, 3, 5, 23, 30), NO, Z(2026, 3, 20, 21)),
    # 13. Across spring-forward: Fri 2026-03-06 + 1 -> Mon 03-09 17:00 EDT = 21:00Z.
    ("NY", rule(1, BD), L(NY, 2026, 3, 6, 10), {}, Z(2026, 3, 9, 21)),
    # 14. Across fall-back: Fri 2026-10-30 + 1 -> Mon 11-02 17:00 EST = 22:00Z.
    ("NY", rule(1, BD), L(NY, 2026, 10, 30, 10), {}, Z(2026, 11, 2, 22)),
    # 15. A Saturday notice: the next business day after Sat 2026-01-10 is Mon 01-12.
    ("NY", rule(1, BD), L(NY, 2026, 1, 10, 10), {}, L(NY, 2026, 1, 12, 17)),
    # 16. A notice on a holiday (MLK Mon 2026-01-19) + 1 -> Tue 01-20.
    ("NY", rule(1, BD), L(NY, 2026, 1, 19, 8), {}, L(NY, 2026, 1, 20, 17)),
    # 17. Thanksgiving: Wed 2026-11-25 + 2: Thu 26 closed, Fri 27 (1), Mon 30 (2).
    ("NY", rule(2, BD), L(NY, 2026, 11, 25, 12), {}, L(NY, 2026, 11, 30, 17)),
    # 18. Veterans Day 2028 on a Saturday: Fri Nov 10 open -> Thu 9 + 1 = Fri 10.
    ("NY", rule(1, BD), L(NY, 2028, 11, 9, 12), {}, L(NY, 2028, 11, 10, 17)),
    # 19. Reg E new account, 20 business days from Mon 2026-01-05: the 10th is Tue 01-20
    #     (row 1); 21,22,23,26,27,28,29,30, Feb 2 (19), Feb 3 (20) -> 2026-02-03 17:00 EST.
    ("NY", REG_E_10, L(NY, 2026, 1, 5, 10), {**NO, "new_account": True},
     L(NY, 2026, 2, 3, 17)),
    # 20. Leap day is a business day: Mon 2028-02-28 + 1 -> Tue 2028-02-29 17:00 EST.
    ("NY", rule(1, BD), L(NY, 2028, 2, 28, 12), {}, L(NY, 2028, 2, 29, 17)),
    # 21. Presidents Day 2028 (Mon Feb 21): Fri 02-18 + 1 -> Tue 02-22.
    ("NY", rule(1, BD), L(NY, 2028, 2, 18, 12), {}, L(NY, 2028, 2, 22, 17)),
    # 22. CFPB 15 calendar days from the date 2023-08-25 (00:00 EDT): end of 2023-09-09 EDT
    #     = 2023-09-10T04:00Z.
    ("NY", rule(15, CD), L(NY, 2023, 8, 25), {}, Z(2023, 9, 10, 4)),
    # 23. 15 calendar days from Thu 2026-03-05 23:30 PST in LA: end of 03-20 PDT = 03-21 07:00Z.
    ("LA", rule(15, CD), L(LA, 2026, 3, 5, 23, 30), {}, Z(2026, 3, 21, 7)),
    # 24. The same instant in New York is Fri 03-06 02:30: end of 03-21 EDT = 03-22 04:00Z.
    ("NY", rule(15, CD), L(LA, 2026, 3, 5, 23, 30), {}, Z(2026, 3, 22, 4)),
    # 25. 60 days across fall-back: 2026-09-15 -> end of 11-14 EST = 11-15 05:00Z.
    ("NY", rule(60, CD), L(NY, 2026, 9, 15, 10), {}, Z(2026, 11, 15, 5)),
    # 26. 30 days across spring-forward: 2026-02-20 -> end of 03-22 EDT = 03-23 04:00Z.
    ("NY", rule(30, CD), L(NY, 2026, 2, 20, 10), {}, Z(2026, 3, 23, 4)),
    # 27. Leap year: 2028-02-01 + 28 days = Feb 29 -> end = 2028-03-01 05:00Z.
    ("NY", rule(28, CD), L(NY, 2028, 2, 1, 10), {}, Z(2028, 3, 1, 5)),
    # 28. 2028-01-30 + 30 days: Jan 31 is +1, Feb 29 is +30 -> end = 2028-03-01 05:00Z.
    ("NY", rule(30, CD), L(NY, 2028, 1, 30, 10), {}, Z(2028, 3, 1, 5)),
    # 29. Not a leap year: 2027-01-30 + 30 days = Mar 1 -> end = 2027-03-02 05:00Z.
    ("NY", rule(30, CD), L(NY, 2027, 1, 30, 10), {}, Z(2027, 3, 2, 5)),
    # 30. Holidays count as calendar days: 2026-12-20 + 15 = 2027-01-04 -> 01-05 05:00Z.
    ("NY", rule(15, CD), L(NY, 2026, 12, 20, 10), {}, Z(2027, 1, 5, 5)),
    # 31. An always-open UTC institution: 2026-03-05T23:30Z + 30 days = 04-04 -> 04-05 00:00Z.
    ("UTC", rule(30, CD), Z(2026, 3, 5, 23, 30), {}, Z(2026, 4, 5, 0)),
    # 32. Reg E point-of-sale: 90 days from 2026-01-05 = 04-05 -> end 04-06 04:00Z (EDT).
    ("NY", REG_E_45, L(NY, 2026, 1, 5, 10), {**NO, "point_of_sale": True}, Z(2026, 4, 6, 4)),
    # 33. Reg E standard 45 days from 2026-01-05 = 02-19 -> end 02-20 05:00Z (EST).
    ("NY", REG_E_45, L(NY, 2026, 1, 5, 10), NO, Z(2026, 2, 20, 5)),
    # 34. Reg Z, received 2026-01-05, cycle closes on the 6th: complete cycles 01-07..02-06,
    #     02-07..03-06 -> end of 03-06 EST = 03-07 05:00Z (90 days would be end of 04-05).
    ("NY", rule(90, CD, 2), L(NY, 2026, 1, 5, 10), {"cycle_closing_day": 6}, Z(2026, 3, 7, 5)),
    # 35. Received on the closing day itself (01-06): that cycle was under way; the next two
    #     end 02-06 and 03-06 -> same deadline.
    ("NY", rule(90, CD, 2), L(NY, 2026, 1, 6, 10), {"cycle_closing_day": 6}, Z(2026, 3, 7, 5)),
    # 36. Received on the first day of a cycle (01-07): that cycle counts (the earlier of the
    #     two readings) -> 02-06, 03-06.
    ("NY", rule(90, CD, 2), L(NY, 2026, 1, 7, 10), {"cycle_closing_day": 6}, Z(2026, 3, 7, 5)),
    # 37. Received 01-08 (cycle 01-07..02-06 began before receipt): 02-07..03-06 and
    #     03-07..04-06 -> end of 04-06 EDT = 04-07 04:00Z (90 days: end of 04-08).
    ("NY", rule(90, CD, 2), L(NY, 2026, 1, 8, 10), {"cycle_closing_day": 6}, Z(2026, 4, 7, 4)),
    # 38. Month-end cycles (closing day 31), received 2026-01-15: cycles Feb 1..Feb 28 and
    #     Mar 1..Mar 31 -> end of 03-31 EDT = 04-01 04:00Z.
    ("NY", rule(90, CD, 2), L(NY, 2026, 1, 15, 10), {"cycle_closing_day": 31},
     Z(2026, 4, 1, 4)),
    # 39. Closing day 31 in a leap February: received 2027-12-20, close 12-31; cycles Jan and
    #     Feb 1..Feb 29 2028 -> end of 2028-02-29 = 03-01 05:00Z.
    ("NY", rule(90, CD, 2), L(NY, 2027, 12, 20, 10), {"cycle_closing_day": 31},
     Z(2028, 3, 1, 5)),
    # 40. Closing day 30, received 2026-01-31: close 01-30 is the day before; cycles
    #     01-31..02-28 (February closes on its last day) and 03-01..03-30 -> 03-31 04:00Z.
    ("NY", rule(90, CD, 2), L(NY, 2026, 1, 31, 10), {"cycle_closing_day": 30},
     Z(2026, 3, 31, 4)),
    # 41. Closing day 29, non-leap 2027, received 02-01: Feb closes on the 28th (>= 01-31);
    #     cycles 03-01..03-29, 03-30..04-29 -> end of 04-29 EDT = 04-30 04:00Z.
    ("NY", rule(90, CD, 2), L(NY, 2027, 2, 1, 10), {"cycle_closing_day": 29},
     Z(2027, 4, 30, 4)),
    # 42. Cycles reaching exactly 90 days: closing day 1, received 2026-11-03: cycles
    #     12-02..2027-01-01, 01-02..02-01; 11-03 + 90 days is also 2027-02-01 -> end 02-02 05:00Z.
    ("NY", rule(90, CD, 2), L(NY, 2026, 11, 3, 10), {"cycle_closing_day": 1},
     Z(2027, 2, 2, 5)),
    # 43. The 90-day cap binds (3 cycles): received 2026-01-05, close 6 -> cycles end 04-06,
    #     but 90 days end on 04-05 -> end of 04-05 EDT = 04-06 04:00Z.
    ("NY", rule(90, CD, 3), L(NY, 2026, 1, 5, 10), {"cycle_closing_day": 6}, Z(2026, 4, 6, 4)),
]


@pytest.mark.parametrize(("zone", "deadline_rule", "anchor", "attrs", "expected"), CASES,
                         ids=[f"row{i + 1}" for i in range(len(CASES))])
def test_hand_computed_deadline(
    zone: str, deadline_rule: RegulatoryDeadline, anchor: datetime, attrs: dict[str, object],
    expected: datetime,
) -> None:
    got = deadline_rule.deadline(anchor, REG[zone], attrs)
    assert got == expected, f"{got.isoformat()} != {expected.astimezone(UTC).isoformat()}"


# Pauses: (window, entered, due, paused at, resumed at, expected due after resume)
PAUSES = [
    # 44. 2 business days from Mon 2026-01-05 10:00 -> due Wed 01-07 17:00. Paused Tue 01-06
    #     12:00: 5 open hours left Tuesday + 8 Wednesday = 13 h. Resumed Mon 01-12 09:00 (the
    #     weekend costs nothing): 8 h Monday, 5 h Tuesday -> Tue 2026-01-13 14:00 EST.
    (SlaWindow(2, BD, "institution"), L(NY, 2026, 1, 7, 17), L(NY, 2026, 1, 6, 12),
     L(NY, 2026, 1, 12, 9), L(NY, 2026, 1, 13, 14)),
    # 45. Due Tue 2026-01-20 17:00 (Mon 19 is MLK Day). Paused Fri 01-16 16:00: 1 h Friday +
    #     8 h Tuesday = 9 h left. Resumed Sat 01-17 10:00: counting starts at Tue 09:00 (Mon
    #     is a holiday): 8 h Tuesday, 1 h Wednesday -> Wed 2026-01-21 10:00 EST.
    (SlaWindow(2, BD, "institution"), L(NY, 2026, 1, 20, 17), L(NY, 2026, 1, 16, 16),
     L(NY, 2026, 1, 17, 10), L(NY, 2026, 1, 21, 10)),
    # 46. Calendar days keep elapsed time: due 2026-12-06 10:00Z, paused 12-02 10:00Z (4 days
    #     left), resumed 12-21 10:00Z -> 12-25 10:00Z (Christmas counts).
    (SlaWindow(5, CD, "institution"), Z(2026, 12, 6, 10), Z(2026, 12, 2, 10),
     Z(2026, 12, 21, 10), Z(2026, 12, 25, 10)),
]


@pytest.mark.parametrize(("window", "due", "paused", "resumed", "expected"), PAUSES,
                         ids=[f"pause{i + 44}" for i in range(len(PAUSES))])
def test_hand_computed_pause(
    window: SlaWindow, due: datetime, paused: datetime, resumed: datetime, expected: datetime,
) -> None:
    cal = REG["NY"]["institution"]
    left = remaining_ms(window, cal, paused, due)
    assert resume_due(window, cal, resumed, left) == expected


def test_table_has_at_least_forty_rows() -> None:
    assert len(CASES) + len(PAUSES) >= 40
