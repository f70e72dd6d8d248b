"""Hand-computed obligations: which action meets or starts which clock (domain.obligations).

Each row is one dispute on a shipped ladder version (ladders/*.toml, loaded with the catalog)
in a New York institution on the Federal Reserve calendar, with its recorded actions and the
instant it is looked at. Every clock's instant, state, lateness and what ended it is
computed by hand in the comment above the row, with the rule the row pins.

Calendar facts used (Federal Reserve holidays; a Sunday holiday closes the Monday after, a
Saturday holiday leaves the Friday before open):
2026: Jan 1 Thu, MLK Jan 19, Presidents Feb 16, Juneteenth Fri Jun 19, Jul 4 Sat (Fri Jul 3
open), Thanksgiving Nov 26, Christmas Fri Dec 25. DST (US): 2026 Mar 8 / Nov 1. Business
hours 09:00-17:00 local; business-day deadlines end at the close of the Nth business day after
the start's local day (receipt day never counted); calendar-day deadlines end at the end of
the local day (the next 00:00 local). A deadline is met by an action strictly before it.

The anchor of every row is Mon 2026-01-05 10:00 EST (15:00Z). From it:
* D10 = 10 business days: Jan 6,7,8,9,12,13,14,15,16 (9), Mon 19 MLK closed, Tue 20 is the
  10th -> Tue 2026-01-20 17:00 EST = 22:00Z (12 CFR 1005.11(c)(1), (c)(2)(i)).
* D20 = 20 business days: after Jan 20 (10th): 21,22,23,26,27,28,29,30, Feb 2 (19), Feb 3
  (20) -> Tue 2026-02-03 17:00 EST = 22:00Z (1005.11(c)(3)(i)).
* INV45 = 45 calendar days: Jan 5 + 45 = Feb 19 -> end of Feb 19 EST = 2026-02-20 05:00Z
  (1005.11(c)(2)).
* INV90 = 90 calendar days: Jan 5 + 90 = Apr 5 (26 left in Jan, 28 Feb, 31 Mar = 85, +5) ->
  end of Apr 5 EDT = 2026-04-06 04:00Z (1005.11(c)(3)(ii)).
* Reg Z ACK30 = Jan 5 + 30 = Feb 4 -> end of Feb 4 EST = 2026-02-05 05:00Z (1026.13(c)(1)).
* CFPB CR15 = Jan 5 + 15 = Jan 20 -> end = 2026-01-21 05:00Z; FR60 = Jan 5 + 60 = Mar 6 ->
  end of Mar 6 EST = 2026-03-07 05:00Z (CFPB 15/60 days).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from escalation.adapters.ladder_files import LadderCatalog
from escalation.domain.calendars import builtin_calendars, with_institution
from escalation.domain.ladder import RESOLUTION, Ladder
from escalation.domain.obligations import (
    Basis,
    DeadlineState,
    RecordedAction,
    assess,
    binding,
    clocks,
)
from escalation.domain.sla_timing import resolve_deadlines

ROOT = Path(__file__).resolve().parents[2]
CATALOG = LadderCatalog.from_dir(ROOT / "ladders")
REG_E = CATALOG.get("reg_e_error_resolution", 3)
REG_Z = CATALOG.get("reg_z_billing_error", 3)
CFPB = CATALOG.get("cfpb_complaint_response", 4)
NY = ZoneInfo("America/New_York")
CAL = with_institution(builtin_calendars(), "us_federal_reserve", "America/New_York")

MET, MISSED = DeadlineState.MET, DeadlineState.MISSED
AT_RISK, PENDING, UNDET = DeadlineState.AT_RISK, DeadlineState.PENDING, DeadlineState.UNDETERMINED
REC, SRC = Basis.RECORD, Basis.SOURCE
H = 3600.0  # seconds per hour
DAY = 86400.0


def Z(y: int, mo: int, d: int, h: int = 0, mi: int = 0) -> datetime:
    """An instant written in UTC."""
    return datetime(y, mo, d, h, mi, tzinfo=UTC)


def L(y: int, mo: int, d: int, h: int = 0, mi: int = 0) -> datetime:
    """New York wall time."""
    return datetime(y, mo, d, h, mi, tzinfo=NY)


ANCHOR = L(2026, 1, 5, 10)
D10, D20 = Z(2026, 1, 20, 22), Z(2026, 2, 3, 22)
INV45, INV90 = Z(2026, 2, 20, 5), Z(2026, 4, 6, 4)
ACK30 = Z(2026, 2, 5, 5)
CR15, FR60 = Z(2026, 1, 21, 5), Z(2026, 3, 7, 5)
NO = {"new_account": False, "point_of_sale": False, "foreign_initiated": False}
NO_PC = "no timely provisional_credit: due with determine_or_provisionally_credit"
DOPC, INV, PCN = "determine_or_provisionally_credit", "investigation", "provisional_credit_notice"
RN, RVN = "results_notice", "reversal_notice"
ACK, RES, CR, FR = "acknowledgment", "resolution", "company_response", "final_response"


@dataclass(frozen=True)
class E:
    """Expected assessment: instant, state, lateness (s), what ended it, basis."""

    at: datetime | None
    state: DeadlineState
    late: float | None = 0.0
    by: str | None = None
    basis: Basis | None = None


def met(at: datetime, by: str) -> E:
    return E(at, MET, 0.0, by, REC)


def late(at: datetime, seconds: float, by: str) -> E:
    """Missed, ended by a late action ``seconds`` after the deadline."""
    return E(at, MISSED, seconds, by, REC)


def open_miss(at: datetime, seconds: float) -> E:
    """Missed and still open, ``seconds`` past it at *now*."""
    return E(at, MISSED, seconds)


def pending(at: datetime) -> E:
    return E(at, PENDING)


def at_risk(at: datetime) -> E:
    return E(at, AT_RISK)


def act(action: str, at: datetime | None, seq: int, timely: bool | None = None) -> RecordedAction:
    return RecordedAction(action, at, "ops.alice", seq, timely)


def imported(action: str, timely: bool | None, recorded: datetime) -> RecordedAction:
    """An import's assertion: no instant, the source's timeliness, recorded at ``recorded``."""
    return RecordedAction(action, None, "importer", 2, timely, recorded_at=recorded)


@dataclass(frozen=True)
class Row:
    """One dispute: its ladder, attributes, actions, when it is looked at, and what must come
    out: every clock placed (in the ladder's order), each one's state, and the binding set."""

    cite: str
    ladder: Ladder
    actions: tuple[RecordedAction, ...]
    now: datetime
    expect: dict[str, E]
    binds: tuple[str, ...]
    attrs: dict[str, object] = field(default_factory=lambda: dict(NO))
    rules: dict[str, str] = field(default_factory=dict)


PC, PCN_A, DET = "provisional_credit", "provisional_credit_notice", "determination"
RN_A, REV, RVN_A = "results_notice", "provisional_credit_reversal", "reversal_notice"
PC_DAY3 = act(PC, L(2026, 1, 8, 11), 2)  # Thu Jan 8 11:00 EST: business day 3 (6, 7, 8)
PCN_DAY4 = act(PCN_A, L(2026, 1, 9, 10), 3)  # Fri Jan 9 10:00 EST: notice on time
PCN_AT = L(2026, 1, 12, 17)  # PC Thu Jan 8 + 2 bd: Fri 9 (1), Mon 12 (2) -> Jan 12 17:00 EST
Z6: dict[str, object] = {"cycle_closing_day": 6}
Z20: dict[str, object] = {"cycle_closing_day": 20}
# Reg Z with cycles closing on the 20th, received Mon Jan 5: the cycle under way at receipt
# closes Jan 20 (it began Dec 21, before receipt: not complete after receipt); complete cycles
# Jan 21..Feb 20 and Feb 21..Mar 20 -> end of Fri Mar 20 EDT (DST from Mar 8) = 2026-03-21
# 04:00Z; 90 days would end at the end of Apr 5, later: the cycles bind (1026.13(c)(2)).
CYC20 = Z(2026, 3, 21, 4)
# Closing day 6: cycles Jan 7..Feb 6, Feb 7..Mar 6 -> end of Mar 6 EST = 2026-03-07 05:00Z.
CYC6 = Z(2026, 3, 7, 5)

ROWS: dict[str, Row] = {
    # --- Reg E, provisional credit on day 3 -------------------------------------------------
    # 1. PC Thu Jan 8 11:00 EST < D10: the 10-bd clock is met by the credit (met_by includes
    #    provisional_credit); the investigation gets its own 45 days (INV45, requires met);
    #    the credit starts the 2-bd notice clock: Fri 9 (1), Mon 12 (2) -> Jan 12 17:00 EST =
    #    22:00Z. Now Fri Jan 9 12:00 EST (17:00Z): 77 h before the notice deadline -> pending.
    "reg_e_pc_day3_opens_45_days_and_the_notice_clock": Row(
        "12 CFR 1005.11(c)(2)(i), (c)(2)(ii)", REG_E, (PC_DAY3,), L(2026, 1, 9, 12),
        {DOPC: met(D10, PC), INV: pending(INV45), PCN: pending(PCN_AT)}, (INV, PCN)),
    # 2. Notice Mon Jan 12 16:00 EST < Jan 12 17:00 -> met; it stops binding.
    "reg_e_pc_notice_on_time": Row(
        "12 CFR 1005.11(c)(2)(ii)", REG_E, (PC_DAY3, act(PCN_A, L(2026, 1, 12, 16), 3)),
        L(2026, 1, 13, 12),
        {DOPC: met(D10, PC), INV: pending(INV45), PCN: met(PCN_AT, PCN_A)}, (INV,)),
    # 3. Notice Tue Jan 13 10:00 EST (15:00Z): 17 h after Jan 12 22:00Z -> missed, late
    #    61200 s, ended by the late notice: it no longer binds.
    "reg_e_pc_notice_late": Row(
        "12 CFR 1005.11(c)(2)(ii)", REG_E, (PC_DAY3, act(PCN_A, L(2026, 1, 13, 10), 3)),
        L(2026, 1, 13, 12),
        {DOPC: met(D10, PC), INV: pending(INV45), PCN: late(PCN_AT, 17 * H, PCN_A)}, (INV,)),
    # 4. No notice; now Tue Jan 13 10:00 EST: missed while open, 17 h late, still binds.
    "reg_e_pc_notice_open_missed_still_binds": Row(
        "12 CFR 1005.11(c)(2)(ii)", REG_E, (PC_DAY3,), L(2026, 1, 13, 10),
        {DOPC: met(D10, PC), INV: pending(INV45), PCN: open_miss(PCN_AT, 17 * H)}, (INV, PCN)),
    # 5. A PC at 18:00 on Thu Jan 8 (after close) still counts from its local day Jan 8: the
    #    notice is due Mon Jan 12 17:00 EST all the same.
    "reg_e_pc_after_close_counts_from_its_local_day": Row(
        "12 CFR 1005.11(c)(2)(ii)", REG_E, (act(PC, L(2026, 1, 8, 18), 2),), L(2026, 1, 9, 12),
        {DOPC: met(D10, PC), INV: pending(INV45), PCN: pending(PCN_AT)}, (INV, PCN)),
    # --- Reg E, no provisional credit ------------------------------------------------------
    # 6. Determination Fri Jan 16 15:00 EST (business day 9: 6,7,8,9,12,13,14,15,16) < D10:
    #    the 10-bd clock met; the investigation (no timely PC) falls at D10 and is met by it.
    #    The determination starts the 3-bd results notice: Tue 20 (1; Mon 19 MLK), Wed 21 (2),
    #    Thu 22 (3) -> Jan 22 17:00 EST = 22:00Z, pending at Fri Jan 16 16:00 EST.
    "reg_e_no_pc_determination_day9_meets_both": Row(
        "12 CFR 1005.11(c)(1), (c)(2)(iv)", REG_E, (act(DET, L(2026, 1, 16, 15), 2),),
        L(2026, 1, 16, 16),
        {DOPC: met(D10, DET), INV: met(D10, DET), RN: pending(Z(2026, 1, 22, 22))}, (RN,),
        rules={INV: NO_PC}),
    # 7. Determination Thu Jan 22 10:00 EST (business day 12: 20 is the 10th, 21, 22) =
    #    15:00Z: both clocks (both at D10) missed, 41 h late (Jan 20 22:00Z -> Jan 22 15:00Z),
    #    ended by it. Results notice: Fri 23, Mon 26, Tue 27 -> Jan 27 22:00Z.
    "reg_e_no_pc_determination_day12_misses_both": Row(
        "12 CFR 1005.11(c)(1), (c)(2)(i)", REG_E, (act(DET, L(2026, 1, 22, 10), 2),),
        L(2026, 1, 22, 12),
        {DOPC: late(D10, 41 * H, DET), INV: late(D10, 41 * H, DET),
         RN: pending(Z(2026, 1, 27, 22))}, (RN,), rules={INV: NO_PC}),
    # 8. Nothing recorded; now Wed Jan 21 09:00 EST (14:00Z): both missed while open, 16 h
    #    past D10; both still bind (the escalation is due at once).
    "reg_e_no_action_after_day10_open_misses_bind": Row(
        "12 CFR 1005.11(c)(1), (c)(2)(i)", REG_E, (), L(2026, 1, 21, 9),
        {DOPC: open_miss(D10, 16 * H), INV: open_miss(D10, 16 * H)}, (DOPC, INV),
        rules={INV: NO_PC}),
    # 9. PC after day 10: Wed Jan 21 11:00 EST (16:00Z) is 18 h after D10 -> the 10-bd clock
    #    is missed, ended by the late credit (no longer binding). The credit was not timely,
    #    so the investigation stays at D10, open and missed: now Jan 21 12:00 EST (17:00Z),
    #    19 h late, binding. Notice clock: Thu 22 (1), Fri 23 (2) -> Jan 23 22:00Z, 53 h off.
    "reg_e_pc_after_day10_investigation_stays_at_d10": Row(
        "12 CFR 1005.11(c)(2)(i)", REG_E, (act(PC, L(2026, 1, 21, 11), 2),), L(2026, 1, 21, 12),
        {DOPC: late(D10, 18 * H, PC), INV: open_miss(D10, 19 * H),
         PCN: pending(Z(2026, 1, 23, 22))}, (INV, PCN), rules={INV: NO_PC}),
    # 10. PC at exactly D10 (Tue Jan 20 17:00 EST): not strictly before -> missed, 0 s late;
    #     not timely, so the investigation is at D10 and (now 17:30) open, 1800 s late.
    #     Notice: Wed 21 (1), Thu 22 (2) -> Jan 22 22:00Z, 47.5 h after 22:30Z: at risk.
    "reg_e_pc_exactly_at_the_deadline_is_late": Row(
        "12 CFR 1005.11(c)(2)(i)", REG_E, (act(PC, D10, 2),), L(2026, 1, 20, 17, 30),
        {DOPC: late(D10, 0.0, PC), INV: open_miss(D10, 1800.0),
         PCN: at_risk(Z(2026, 1, 22, 22))}, (INV, PCN), rules={INV: NO_PC}),
    # --- Reg E variants ---------------------------------------------------------------------
    # 11. New account with PC on day 3: 20 bd (D20) met by it; investigation 90 days (INV90);
    #     notice Jan 12 22:00Z pending at Fri Jan 9 12:00.
    "reg_e_new_account_pc_20bd_90days": Row(
        "12 CFR 1005.11(c)(3)(i), (c)(3)(ii)", REG_E, (PC_DAY3,), L(2026, 1, 9, 12),
        {DOPC: met(D20, PC), INV: pending(INV90), PCN: pending(PCN_AT)}, (INV, PCN),
        attrs={**NO, "new_account": True}),
    # 12. New account, no PC, determination Tue Jan 27 10:00 EST (business day 15: 21, 22,
    #     23, 26, 27 after the 10th) < D20: both met (the investigation falls at D20). Results
    #     notice: Wed 28, Thu 29, Fri 30 -> Jan 30 22:00Z.
    "reg_e_new_account_no_pc_day15_meets_both_at_20bd": Row(
        "12 CFR 1005.11(c)(3)(i)", REG_E, (act(DET, L(2026, 1, 27, 10), 2),),
        L(2026, 1, 27, 12),
        {DOPC: met(D20, DET), INV: met(D20, DET), RN: pending(Z(2026, 1, 30, 22))}, (RN,),
        attrs={**NO, "new_account": True}, rules={INV: NO_PC}),
    # 13. Point of sale, PC day 3, notice day 4: 10 bd (D10) met; the investigation has 90
    #     days, so on Sat Feb 21 (past INV45) it is still pending at INV90.
    "reg_e_point_of_sale_10bd_90days": Row(
        "12 CFR 1005.11(c)(3)(ii)(B)", REG_E, (PC_DAY3, PCN_DAY4), L(2026, 2, 21, 12),
        {DOPC: met(D10, PC), INV: pending(INV90), PCN: met(PCN_AT, PCN_A)}, (INV,),
        attrs={**NO, "point_of_sale": True}),
    # 14. Foreign-initiated, PC day 3, notice day 4, determination Mon Mar 30 10:00 EDT
    #     (14:00Z) < INV90: met. Results notice: Tue 31 (1), Wed Apr 1 (2), Thu Apr 2 (3) ->
    #     Apr 2 17:00 EDT = 21:00Z, pending at Mar 30 12:00 EDT.
    "reg_e_foreign_initiated_determination_within_90": Row(
        "12 CFR 1005.11(c)(3)(ii)(A)", REG_E,
        (PC_DAY3, PCN_DAY4, act(DET, L(2026, 3, 30, 10), 4)), L(2026, 3, 30, 12),
        {DOPC: met(D10, PC), INV: met(INV90, DET), PCN: met(PCN_AT, PCN_A),
         RN: pending(Z(2026, 4, 2, 21))}, (RN,), attrs={**NO, "foreign_initiated": True}),
    # --- Reg E results notice and reversal --------------------------------------------------
    # 15. PC day 3, notice day 4, determination Thu Feb 12 10:00 EST < INV45 (met). Results
    #     notice 3 bd: Fri 13 (1), Mon 16 Presidents Day closed, Tue 17 (2), Wed 18 (3) ->
    #     Feb 18 17:00 EST = 22:00Z. Report Wed Feb 18 16:00 EST -> met. Nothing binds.
    "reg_e_results_notice_on_time": Row(
        "12 CFR 1005.11(c)(2)(iv)", REG_E,
        (PC_DAY3, PCN_DAY4, act(DET, L(2026, 2, 12, 10), 4), act(RN_A, L(2026, 2, 18, 16), 5)),
        L(2026, 2, 18, 17),
        {DOPC: met(D10, PC), INV: met(INV45, DET), PCN: met(PCN_AT, PCN_A),
         RN: met(Z(2026, 2, 18, 22), RN_A)}, ()),
    # 16. The report on Thu Feb 19 09:00 EST (14:00Z): 16 h after Feb 18 22:00Z -> missed,
    #     ended by the late report; nothing binds.
    "reg_e_results_notice_late": Row(
        "12 CFR 1005.11(c)(1), (c)(2)(iv)", REG_E,
        (PC_DAY3, PCN_DAY4, act(DET, L(2026, 2, 12, 10), 4), act(RN_A, L(2026, 2, 19, 9), 5)),
        L(2026, 2, 19, 12),
        {DOPC: met(D10, PC), INV: met(INV45, DET), PCN: met(PCN_AT, PCN_A),
         RN: late(Z(2026, 2, 18, 22), 16 * H, RN_A)}, ()),
    # 17. Reversal Fri Feb 13 10:00 EST: its notice clock is 1 bd: Mon 16 closed -> Tue Feb 17
    #     17:00 EST = 22:00Z. Under Comment 11(d)(2)-1 the notice went out Fri Feb 6 10:00 EST
    #     (five business days before the debit: 9, 10, 11, 12, 13): recorded before the clock
    #     started, and before its instant -> met.
    "reg_e_reversal_notice_before_the_debit_meets_it": Row(
        "12 CFR 1005.11(d)(2); comment 11(d)(2)-1", REG_E,
        (PC_DAY3, PCN_DAY4, act(RVN_A, L(2026, 2, 6, 10), 4), act(DET, L(2026, 2, 12, 10), 5),
         act(RN_A, L(2026, 2, 12, 11), 6), act(REV, L(2026, 2, 13, 10), 7)),
        L(2026, 2, 13, 11),
        {DOPC: met(D10, PC), INV: met(INV45, DET), PCN: met(PCN_AT, PCN_A),
         RN: met(Z(2026, 2, 18, 22), RN_A), RVN: met(Z(2026, 2, 17, 22), RVN_A)}, ()),
    # 18. The reversal notice on Wed Feb 18 10:00 EST (15:00Z), after its 1 bd: 17 h late.
    "reg_e_reversal_notice_after_1bd_missed": Row(
        "12 CFR 1005.11(d)(2)", REG_E,
        (PC_DAY3, PCN_DAY4, act(DET, L(2026, 2, 12, 10), 4), act(RN_A, L(2026, 2, 12, 11), 5),
         act(REV, L(2026, 2, 13, 10), 6), act(RVN_A, L(2026, 2, 18, 10), 7)),
        L(2026, 2, 18, 11),
        {DOPC: met(D10, PC), INV: met(INV45, DET), PCN: met(PCN_AT, PCN_A),
         RN: met(Z(2026, 2, 18, 22), RN_A), RVN: late(Z(2026, 2, 17, 22), 17 * H, RVN_A)}, ()),
    # 19. Reversal recorded, no notice yet; now Mon Feb 16 09:00 EST (14:00Z): Feb 17 22:00Z
    #     is 32 h away -> at risk, and binding.
    "reg_e_reversal_notice_open_at_risk_binds": Row(
        "12 CFR 1005.11(d)(2)", REG_E,
        (PC_DAY3, PCN_DAY4, act(DET, L(2026, 2, 12, 10), 4), act(RN_A, L(2026, 2, 12, 11), 5),
         act(REV, L(2026, 2, 13, 10), 6)),
        L(2026, 2, 16, 9),
        {DOPC: met(D10, PC), INV: met(INV45, DET), PCN: met(PCN_AT, PCN_A),
         RN: met(Z(2026, 2, 18, 22), RN_A), RVN: at_risk(Z(2026, 2, 17, 22))}, (RVN,)),
    # --- Reg E: open clocks ------------------------------------------------------------------
    # 20. Nothing recorded, now Tue Jan 6 10:00 EST: both at D10 (no PC yet: conservative),
    #     14 days off -> pending, binding.
    "reg_e_pending": Row(
        "12 CFR 1005.11(c)(1)", REG_E, (), L(2026, 1, 6, 10),
        {DOPC: pending(D10), INV: pending(D10)}, (DOPC, INV), rules={INV: NO_PC}),
    # 21. Now Sun Jan 18 22:00Z: D10 (Jan 20 22:00Z) exactly 48 h away -> at risk.
    "reg_e_at_risk_at_48h": Row(
        "12 CFR 1005.11(c)(1)", REG_E, (), Z(2026, 1, 18, 22),
        {DOPC: at_risk(D10), INV: at_risk(D10)}, (DOPC, INV), rules={INV: NO_PC}),
    # 22. One minute earlier (48 h 1 min away) -> still pending.
    "reg_e_pending_just_beyond_48h": Row(
        "12 CFR 1005.11(c)(1)", REG_E, (), Z(2026, 1, 18, 21, 59),
        {DOPC: pending(D10), INV: pending(D10)}, (DOPC, INV), rules={INV: NO_PC}),
    # --- Reg E: assertions without an instant (import) ---------------------------------------
    # 23. PC asserted timely (no instant): the 10-bd clock met per source; the assertion opens
    #     the 45 days (INV45, pending); the notice clock's start is unknown -> undetermined,
    #     no instant, not binding.
    "reg_e_source_pc_timely": Row(
        "12 CFR 1005.11(c)(2)(i), (c)(2)(ii)", REG_E, (act(PC, None, 2, True),),
        L(2026, 1, 9, 12),
        {DOPC: E(D10, MET, 0.0, PC, SRC), INV: pending(INV45), PCN: E(None, UNDET, None)},
        (INV,), rules={PCN: "provisional_credit instant unknown"}),
    # 24. PC asserted not timely: the 10-bd clock (its first deadline) missed per source with
    #     the lateness unknown; the investigation stays at D10 (pending on Jan 9).
    "reg_e_source_pc_untimely": Row(
        "12 CFR 1005.11(c)(2)(i)", REG_E, (act(PC, None, 2, False),), L(2026, 1, 9, 12),
        {DOPC: E(D10, MISSED, None, PC, SRC), INV: pending(D10), PCN: E(None, UNDET, None)},
        (INV,), rules={INV: NO_PC}),
    # 25. Determination asserted timely: it meets both clocks (both at D10), the first and
    #     the later one -> both met per source. The results notice clock's start is unknown.
    "reg_e_source_determination_timely_meets_later_deadline_too": Row(
        "12 CFR 1005.11(c)(1)", REG_E, (act(DET, None, 2, True),), L(2026, 1, 9, 12),
        {DOPC: E(D10, MET, 0.0, DET, SRC), INV: E(D10, MET, 0.0, DET, SRC),
         RN: E(None, UNDET, None)}, (), rules={INV: NO_PC}),
    # 26. Determination asserted not timely: the first deadline it meets (both at D10; the
    #     tie goes to determine_or_provisionally_credit) is missed per source; the later one
    #     (investigation) is undetermined: closed, but when is not known. Neither binds.
    "reg_e_source_determination_untimely_later_undetermined": Row(
        "12 CFR 1005.11(c)(1)", REG_E, (act(DET, None, 2, False),), L(2026, 1, 9, 12),
        {DOPC: E(D10, MISSED, None, DET, SRC), INV: E(D10, UNDET, None, DET, SRC),
         RN: E(None, UNDET, None)}, (), rules={INV: NO_PC}),
    # --- Reg Z -------------------------------------------------------------------------------
    # 27. Acknowledgment day 25 (Fri Jan 30 10:00 EST) < ACK30 -> met; resolution pending at
    #     CYC20; only the resolution binds.
    "reg_z_acknowledgment_day25": Row(
        "12 CFR 1026.13(c)(1)", REG_Z, (act(ACK, L(2026, 1, 30, 10), 2),), L(2026, 1, 30, 11),
        {ACK: met(ACK30, ACK), RES: pending(CYC20)}, (RES,), attrs=Z20),
    # 28. No acknowledgment; resolution day 20 (Sun Jan 25 10:00 EST) within the 30 days ->
    #     it meets the acknowledgment ("unless ... complied with the resolution procedures
    #     within the 30-day period") and the resolution deadline.
    "reg_z_resolution_day20_meets_acknowledgment": Row(
        "12 CFR 1026.13(c)(1), (c)(2)", REG_Z, (act(RESOLUTION, L(2026, 1, 25, 10), 2),),
        L(2026, 1, 25, 11), {ACK: met(ACK30, RESOLUTION), RES: met(CYC20, RESOLUTION)}, (),
        attrs=Z20),
    # 29. Acknowledgment day 31 (Thu Feb 5 10:00 EST = 15:00Z): 10 h after ACK30 -> missed.
    "reg_z_acknowledgment_day31_missed": Row(
        "12 CFR 1026.13(c)(1)", REG_Z, (act(ACK, L(2026, 2, 5, 10), 2),), L(2026, 2, 5, 11),
        {ACK: late(ACK30, 10 * H, ACK), RES: pending(CYC20)}, (RES,), attrs=Z20),
    # 30. Resolution Fri Mar 20 23:00 EDT (Mar 21 03:00Z), one hour before CYC20 -> met.
    "reg_z_resolution_within_two_cycles": Row(
        "12 CFR 1026.13(c)(2)", REG_Z,
        (act(ACK, L(2026, 1, 30, 10), 2), act(RESOLUTION, L(2026, 3, 20, 23), 3)),
        L(2026, 3, 21, 9), {ACK: met(ACK30, ACK), RES: met(CYC20, RESOLUTION)}, (), attrs=Z20),
    # 31. Resolution Sat Mar 21 10:00 EDT (14:00Z): 10 h after CYC20 -> missed.
    "reg_z_resolution_after_two_cycles": Row(
        "12 CFR 1026.13(c)(2)", REG_Z,
        (act(ACK, L(2026, 1, 30, 10), 2), act(RESOLUTION, L(2026, 3, 21, 10), 3)),
        L(2026, 3, 21, 11), {ACK: met(ACK30, ACK), RES: late(CYC20, 10 * H, RESOLUTION)}, (),
        attrs=Z20),
    # 32. Closing day 6 (CYC6 = Mar 7 05:00Z); unresolved at Sat Mar 7 10:00 EST (15:00Z):
    #     missed while open, 10 h late, binding.
    "reg_z_resolution_open_missed_closing_day_6": Row(
        "12 CFR 1026.13(c)(2)", REG_Z, (act(ACK, L(2026, 1, 30, 10), 2),), L(2026, 3, 7, 10),
        {ACK: met(ACK30, ACK), RES: open_miss(CYC6, 10 * H)}, (RES,), attrs=Z6),
    # --- CFPB ----------------------------------------------------------------------------------
    # 33. "In progress" response day 10 (Thu Jan 15 10:00 EST) < CR15, final response day 50
    #     (Tue Feb 24 10:00 EST) < FR60 -> both met.
    "cfpb_in_progress_day10_final_day50": Row(
        "CFPB 15/60 days", CFPB,
        (act("response", L(2026, 1, 15, 10), 2), act("final_response", L(2026, 2, 24, 10), 3)),
        L(2026, 2, 24, 11), {CR: met(CR15, "response"), FR: met(FR60, "final_response")}, (),
        attrs={}),
    # 34. Final response day 61 (Sat Mar 7 10:00 EST = 15:00Z): 10 h after FR60 -> missed.
    "cfpb_final_response_day61_missed": Row(
        "CFPB 15/60 days", CFPB,
        (act("response", L(2026, 1, 15, 10), 2), act("final_response", L(2026, 3, 7, 10), 3)),
        L(2026, 3, 7, 11),
        {CR: met(CR15, "response"), FR: late(FR60, 10 * H, "final_response")}, (), attrs={}),
    # 35. In progress day 10, nothing since; now Sun Mar 8 10:00 EDT (14:00Z; DST began
    #     02:00): FR60 missed while open by 1 day 9 h (118800 s), binding.
    "cfpb_final_response_open_missed_binds": Row(
        "CFPB 15/60 days", CFPB, (act("response", L(2026, 1, 15, 10), 2),), Z(2026, 3, 8, 14),
        {CR: met(CR15, "response"), FR: open_miss(FR60, DAY + 9 * H)}, (FR,), attrs={}),
    # 36. Nothing until a resolution after the terminal tier, Mon Mar 16 10:00 EDT (14:00Z):
    #     CR15 missed by Jan 21 05:00Z -> Mar 16 14:00Z = 54 days 9 h; FR60 by Mar 7 05:00Z
    #     -> Mar 16 14:00Z = 9 days 9 h; both ended by the resolution, neither binds.
    "cfpb_resolution_after_terminal_tier": Row(
        "CFPB 15/60 days", CFPB, (act(RESOLUTION, Z(2026, 3, 16, 14), 4),), Z(2026, 3, 16, 15),
        {CR: late(CR15, 54 * DAY + 9 * H, RESOLUTION), FR: late(FR60, 9 * DAY + 9 * H,
                                                                   RESOLUTION)},
        (), attrs={}),
    # 37. Final response asserted timely ("Timely response? Yes"): it meets CR (its first
    #     deadline) and FR (the later one) -> both met per source.
    "cfpb_source_timely_yes_meets_first_and_later": Row(
        "CFPB 15/60 days", CFPB, (act("final_response", None, 2, True),), Z(2026, 3, 16, 15),
        {CR: E(CR15, MET, 0.0, "final_response", SRC),
         FR: E(FR60, MET, 0.0, "final_response", SRC)}, (), attrs={}),
    # 38. Final response asserted not timely: CR (first) missed per source, lateness unknown;
    #     FR undetermined (closed, when not known). Neither binds.
    "cfpb_source_timely_no_first_missed_later_undetermined": Row(
        "CFPB 15/60 days", CFPB, (act("final_response", None, 2, False),), Z(2026, 3, 16, 15),
        {CR: E(CR15, MISSED, None, "final_response", SRC),
         FR: E(FR60, UNDET, None, "final_response", SRC)}, (), attrs={}),
    # 39. Only an "in progress" response asserted timely: CR met per source; it does not meet
    #     FR, which is pending on Feb 1 and binds.
    "cfpb_source_response_only_leaves_final_open": Row(
        "CFPB 15/60 days", CFPB, (act("response", None, 2, True),), L(2026, 2, 1, 12),
        {CR: E(CR15, MET, 0.0, "response", SRC), FR: pending(FR60)}, (FR,), attrs={}),
    # --- CFPB import matrix: Timely response? x deadlines passed x outcome ---------------------
    # Each assertion is recorded at *now*: EARLY = Sat Jan 10 12:00 EST (17:00Z), before CR15
    # and FR60; LATE = Mon Mar 16 11:00 EDT (15:00Z), after both. A "Closed ..." value is the
    # resolution (met_by of both deadlines, first: CR15); "In progress" is the response
    # (met_by of company_response only). A stated timeliness is taken at its word whenever it
    # was recorded (docs/sla.md "Imported outcomes"): never met on record without an instant.
    # 40./41. Yes, closed: the first deadline met per source, the later one too (the action
    #     came before the first). Nothing binds, before or after the deadlines.
    "cfpb_import_yes_closed_before_deadlines": Row(
        "CFPB 15/60 days", CFPB, (imported(RESOLUTION, True, Z(2026, 1, 10, 17)),),
        Z(2026, 1, 10, 17), {CR: E(CR15, MET, 0.0, RESOLUTION, SRC),
                             FR: E(FR60, MET, 0.0, RESOLUTION, SRC)}, (), attrs={}),
    "cfpb_import_yes_closed_after_deadlines": Row(
        "CFPB 15/60 days", CFPB, (imported(RESOLUTION, True, Z(2026, 3, 16, 15)),),
        Z(2026, 3, 16, 15), {CR: E(CR15, MET, 0.0, RESOLUTION, SRC),
                             FR: E(FR60, MET, 0.0, RESOLUTION, SRC)}, (), attrs={}),
    # 42. Yes, in progress, early: CR met per source; FR (not met by a response) pending,
    #     binding.
    "cfpb_import_yes_in_progress_before_deadlines": Row(
        "CFPB 15/60 days", CFPB, (imported("response", True, Z(2026, 1, 10, 17)),),
        Z(2026, 1, 10, 17), {CR: E(CR15, MET, 0.0, "response", SRC), FR: pending(FR60)},
        (FR,), attrs={}),
    # 43. Yes, in progress, late: CR met per source; FR missed while open, Mar 7 05:00Z ->
    #     Mar 16 15:00Z = 9 days 10 h, binding.
    "cfpb_import_yes_in_progress_after_deadlines": Row(
        "CFPB 15/60 days", CFPB, (imported("response", True, Z(2026, 3, 16, 15)),),
        Z(2026, 3, 16, 15), {CR: E(CR15, MET, 0.0, "response", SRC),
                             FR: open_miss(FR60, 9 * DAY + 10 * H)}, (FR,), attrs={}),
    # 44./45. No, closed: CR (the first deadline) missed per source, lateness unknown, even
    #     though the row was recorded before CR15; FR undetermined (closed, when not known).
    #     Neither binds: the dispute is closed.
    "cfpb_import_no_closed_before_deadlines": Row(
        "CFPB 15/60 days", CFPB, (imported(RESOLUTION, False, Z(2026, 1, 10, 17)),),
        Z(2026, 1, 10, 17), {CR: E(CR15, MISSED, None, RESOLUTION, SRC),
                             FR: E(FR60, UNDET, None, RESOLUTION, SRC)}, (), attrs={}),
    "cfpb_import_no_closed_after_deadlines": Row(
        "CFPB 15/60 days", CFPB, (imported(RESOLUTION, False, Z(2026, 3, 16, 15)),),
        Z(2026, 3, 16, 15), {CR: E(CR15, MISSED, None, RESOLUTION, SRC),
                             FR: E(FR60, UNDET, None, RESOLUTION, SRC)}, (), attrs={}),
    # 46. No, in progress, early: CR missed per source (not met on record though recorded
    #     before CR15); FR pending and binding.
    "cfpb_import_no_in_progress_before_deadlines": Row(
        "CFPB 15/60 days", CFPB, (imported("response", False, Z(2026, 1, 10, 17)),),
        Z(2026, 1, 10, 17), {CR: E(CR15, MISSED, None, "response", SRC), FR: pending(FR60)},
        (FR,), attrs={}),
    # 47. No, in progress, late: CR missed per source; FR missed while open, 9 days 10 h.
    "cfpb_import_no_in_progress_after_deadlines": Row(
        "CFPB 15/60 days", CFPB, (imported("response", False, Z(2026, 3, 16, 15)),),
        Z(2026, 3, 16, 15), {CR: E(CR15, MISSED, None, "response", SRC),
                             FR: open_miss(FR60, 9 * DAY + 10 * H)}, (FR,), attrs={}),
    # 48. No timeliness stated, closed, recorded Jan 10 (before both): the action preceded its
    #     row, so both deadlines are met on record (the only evidence there is).
    "cfpb_import_blank_closed_recorded_before_deadlines": Row(
        "CFPB 15/60 days", CFPB, (imported(RESOLUTION, None, Z(2026, 1, 10, 17)),),
        Z(2026, 1, 10, 17), {CR: E(CR15, MET, 0.0, RESOLUTION, REC),
                             FR: E(FR60, MET, 0.0, RESOLUTION, REC)}, (), attrs={}),
    # 49. No timeliness stated, closed, recorded Mar 16 (after both): both undetermined.
    "cfpb_import_blank_closed_recorded_after_deadlines": Row(
        "CFPB 15/60 days", CFPB, (imported(RESOLUTION, None, Z(2026, 3, 16, 15)),),
        Z(2026, 3, 16, 15), {CR: E(CR15, UNDET, None, RESOLUTION, SRC),
                             FR: E(FR60, UNDET, None, RESOLUTION, SRC)}, (), attrs={}),
}


def _run(row: Row) -> tuple[list, list, tuple]:  # type: ignore[type-arg]
    base = {r.name: r.at for r in resolve_deadlines(row.ladder, ANCHOR, CAL, row.attrs)}
    placed = clocks(row.ladder, base, row.actions, CAL, row.attrs)
    return placed, assess(row.ladder, placed, row.actions, row.now), binding(
        row.ladder, placed, row.actions, row.now)


@pytest.mark.parametrize("name", list(ROWS))
def test_hand_computed_obligation(name: str) -> None:
    row = ROWS[name]
    placed, states, bind = _run(row)
    assert [c.name for c in placed] == list(row.expect), row.cite
    for s in states:
        want = row.expect[s.name]
        got = E(s.at, s.state, s.late_s, None if s.by is None else s.by.action, s.basis)
        assert got == want, f"{name} {s.name} ({row.cite}): {got} != {want}"
        assert s.rule == row.rules.get(s.name, s.rule), s.name
    for c in placed:
        if c.name in row.rules:
            assert c.rule == row.rules[c.name]
    assert tuple(n for n, _ in bind) == row.binds, f"{name} ({row.cite})"
    assert all(at == row.expect[n].at for n, at in bind)


def test_table_has_at_least_twenty_five_rows() -> None:
    assert len(ROWS) >= 25


def test_rows_pin_every_cited_rule() -> None:
    cited = " ".join(r.cite for r in ROWS.values())
    for cite in ("(c)(1)", "(c)(2)(i)", "(c)(2)(ii)", "(c)(2)(iv)", "(c)(3)(i)",
                 "(c)(3)(ii)", "(d)(2)", "1026.13(c)(1)", "1026.13(c)(2)", "CFPB 15/60"):
        assert cite in cited, cite


def test_each_assessment_carries_the_ladder_citation() -> None:
    _, states, _ = _run(ROWS["reg_e_new_account_pc_20bd_90days"])
    by = {s.name: s for s in states}
    assert by[PCN].citation == "12 CFR 1005.11(c)(2)(ii)"
    assert by[DOPC].citation == "12 CFR 1005.11(c)(1), (c)(2)(i)"


# binding() after each action of one Reg E dispute: a met clock stops binding, a late-met one
# too, an open missed one still binds.
def test_binding_after_each_action() -> None:
    steps: list[tuple[RecordedAction | None, datetime, tuple[str, ...]]] = [
        # nothing yet: both anchor clocks cap (conservative investigation at D10)
        (None, L(2026, 1, 6, 10), (DOPC, INV)),
        # PC day 3: 10-bd met, investigation opens to INV45, the notice clock caps
        (PC_DAY3, L(2026, 1, 8, 12), (INV, PCN)),
        # no notice by Jan 12 17:00: open missed -> still binds on Tue Jan 13 09:00
        (None, L(2026, 1, 13, 9), (INV, PCN)),
        # the late notice ends it: it stops binding
        (act(PCN_A, L(2026, 1, 13, 10), 3), L(2026, 1, 13, 10, 1), (INV,)),
        # the determination meets the investigation and starts the results notice
        (act(DET, L(2026, 2, 12, 10), 4), L(2026, 2, 12, 10, 1), (RN,)),
        # the report on time: nothing binds any more
        (act(RN_A, L(2026, 2, 13, 10), 5), L(2026, 2, 13, 10, 1), ()),
    ]
    actions: list[RecordedAction] = []
    base = {r.name: r.at for r in resolve_deadlines(REG_E, ANCHOR, CAL, NO)}
    for action, now, want in steps:
        if action is not None:
            actions.append(action)
        placed = clocks(REG_E, base, actions, CAL, NO)
        assert tuple(n for n, _ in binding(REG_E, placed, actions, now)) == want, now
