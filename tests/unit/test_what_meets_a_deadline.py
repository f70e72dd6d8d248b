"""What counts as meeting a regulatory deadline, beyond the happy path (docs/sla.md
"Obligations"; domain.obligations.effective and assess).

Instants as in tests/unit/test_obligation_use_cases.py: a Reg E v3 dispute (New York,
Federal Reserve calendar) anchored Mon 2026-01-05 10:00 EST, disputed amount 125.00; D10 (10
business days) = Tue 2026-01-20 17:00 EST = 22:00Z.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from escalation.domain.errors import InvalidInput
from escalation.domain.obligations import Basis, DeadlineState
from escalation.service_layer.cancel import cancel
from escalation.service_layer.obligations import Resolve, resolve
from tests.unit.test_obligation_use_cases import CATALOG, D10, L, World, Z

D10_NAME, INV = "determine_or_provisionally_credit", "investigation"


def states(res: object) -> dict[str, tuple[DeadlineState, str | None]]:
    return {a.name: (a.state, None if a.by is None else a.by.action)
            for a in res.assessments}  # type: ignore[attr-defined]


def test_a_cancel_stops_escalating_but_meets_no_deadline_on_a_version_with_actions() -> None:
    """12 CFR 1005.11(c)(1): the 10 business days are met by a determination or a provisional
    credit. A cancel records neither (outcome unstated), so on Reg E v3 the deadlines stay
    open; a later resolve records the finding, and it is late: Mon Jan 26 > D10."""
    w = World()
    esc = w.enqueue(tier="standard")
    w.at(L(2026, 1, 12, 9))
    cancel(esc.dispute_id, scheduler=w.scheduler, store=w.store, actor="ops.alice",
           reason="handled elsewhere")
    w.at(L(2026, 1, 26, 9))
    res = resolve(Resolve(esc.dispute_id, "no_error_found", "ops.alice", "r-1"), **w.kw())
    got = states(res)
    assert got[D10_NAME] == (DeadlineState.MISSED, "resolution")
    assert res.escalation.status.value == "resolved"


def test_on_a_version_without_actions_a_cancel_still_counts_as_the_resolution() -> None:
    from escalation.domain.obligations import RecordedAction, assess, clocks

    v2 = CATALOG.get("reg_e_error_resolution", 2)
    placed = clocks(v2, {D10_NAME: D10}, [], {})
    cancelled = RecordedAction("resolution", D10 - timedelta(days=2), "ops.alice", 2,
                               outcome="unstated")
    [a] = assess(v2, placed, [cancelled], D10 + timedelta(days=5))
    assert (a.state, a.basis) == (DeadlineState.MET, Basis.RECORD)


def test_a_notice_before_the_credit_it_reports_does_not_meet_its_clock() -> None:
    """1005.11(c)(2)(ii): the consumer is told of the credit within 2 business days *after*
    crediting. Notice Fri Jan 9, credit Mon Jan 12 11:00 EST: the clock runs from the
    credit (Tue 13 (1), Wed 14 (2) -> Wed Jan 14 17:00 EST); the earlier notice is no notice
    of it, so the clock is missed once Jan 14 passes."""
    w = World()
    esc = w.enqueue(tier="standard")
    w.at(L(2026, 1, 12, 12))
    w.record(esc.dispute_id, "provisional_credit_notice", L(2026, 1, 9, 10), "n-1")
    res = w.record(esc.dispute_id, "provisional_credit", L(2026, 1, 12, 11), "pc-1")
    w.at(L(2026, 1, 15, 9))
    got = states(w.record(esc.dispute_id, "determination", L(2026, 1, 15, 8), "d-1"))
    assert got["provisional_credit_notice"] == (DeadlineState.MISSED, None)
    assert states(res)[D10_NAME] == (DeadlineState.MET, "provisional_credit")


def test_a_reversal_notice_may_precede_the_debit_by_five_business_days() -> None:
    """Comment 11(d)(2)-1 to 12 CFR 1005.11(d)(2): the notice may say the account "will be
    debited five business days from the transmittal", so reversal_notice counts a notice up
    to 5 business days before the debit (counts_before_start = 5). Debit Tue Jan 20 11:00
    EST: a notice on Mon Jan 12 (+5 bd: 13, 14, 15, 16, MLK 19 closed, 20) counts; one on
    Fri Jan 2 (+5 bd ends Fri Jan 9) is too early to be a notice of this debit."""
    w = World()
    esc = w.enqueue(tier="standard")
    w.at(L(2026, 1, 20, 12))
    w.record(esc.dispute_id, "provisional_credit", L(2026, 1, 6, 10), "pc-1")
    w.record(esc.dispute_id, "reversal_notice", L(2026, 1, 12, 10), "rn-1")
    got = states(w.record(esc.dispute_id, "provisional_credit_reversal", L(2026, 1, 20, 11),
                          "rev-1"))
    assert got["reversal_notice"] == (DeadlineState.MET, "reversal_notice")

    early = World()
    esc2 = early.enqueue(tier="standard")
    early.at(L(2026, 1, 20, 12))
    early.record(esc2.dispute_id, "provisional_credit", L(2026, 1, 5, 11), "pc-1")
    early.record(esc2.dispute_id, "reversal_notice", L(2026, 1, 2 + 3, 12), "rn-0")
    got2 = states(early.record(esc2.dispute_id, "provisional_credit_reversal",
                               L(2026, 1, 20, 11), "rev-1"))
    assert got2["reversal_notice"][0] is not DeadlineState.MET


def test_a_reversal_needs_the_credit_it_reverses() -> None:
    w = World()
    esc = w.enqueue(tier="standard")
    w.at(L(2026, 1, 20, 12))
    rows = w.rows(esc.dispute_id)
    with pytest.raises(InvalidInput, match="needs a 'provisional_credit' on record first"):
        w.record(esc.dispute_id, "provisional_credit_reversal", L(2026, 1, 20, 11), "rev-1")
    assert w.rows(esc.dispute_id) == rows


def test_a_credit_on_a_dispute_without_its_amount_counts_but_says_it_was_not_checked() -> None:
    w = World()
    esc = w.enqueue(tier="standard", materiality="0.00")
    w.at(L(2026, 1, 8, 12))
    res = w.record(esc.dispute_id, "provisional_credit", L(2026, 1, 8, 11), "pc",
                   amount="0.01")
    got = {a.name: a for a in res.assessments}[D10_NAME]
    assert got.state is DeadlineState.MET and got.by.unchecked  # type: ignore[union-attr]
    assert w.store.trail(esc.dispute_id)[-1].details["amount_unchecked"] is True


def test_an_idempotency_key_is_one_actors() -> None:
    from escalation.domain.errors import ConflictError
    from escalation.service_layer.obligations import ObligationPorts, RecordAction, record_action

    w = World()
    esc = w.enqueue(tier="standard")
    w.at(L(2026, 1, 8, 12))
    w.record(esc.dispute_id, "determination", L(2026, 1, 8, 11), "k")
    rows = w.rows(esc.dispute_id)
    with pytest.raises(ConflictError, match="used by another actor"):
        record_action(RecordAction(esc.dispute_id, "determination", L(2026, 1, 8, 11),
                                   "ops.bob", "k"), ObligationPorts(**w.kw()))
    assert w.rows(esc.dispute_id) == rows


def test_a_resolution_without_a_determination_starts_the_results_notice_clock() -> None:
    """1005.11(c)(1): results within 3 business days after completing the investigation. A
    resolve recorded Thu Jan 15 11:00 EST (no determination action) starts it: Fri 16 (1),
    Mon 19 MLK closed, Tue 20 (2), Wed 21 (3) -> Wed Jan 21 17:00 EST = 22:00Z."""
    w = World()
    esc = w.enqueue(tier="standard")
    w.at(L(2026, 1, 15, 12))
    res = resolve(Resolve(esc.dispute_id, "no_error_found", "ops.alice", "r-1",
                          occurred_at=L(2026, 1, 15, 11)), **w.kw())
    notice = {a.name: a for a in res.assessments}["results_notice"]
    assert notice.at == Z(2026, 1, 21, 22) and notice.state is DeadlineState.PENDING


def test_a_zero_credit_is_refused_and_a_partial_one_meets_nothing() -> None:
    """1005.11(c)(2)(i): the provisional credit is "in the amount of the alleged error"."""
    w = World()
    esc = w.enqueue(tier="standard")
    w.at(L(2026, 1, 8, 12))
    rows = w.rows(esc.dispute_id)
    with pytest.raises(InvalidInput, match="amount: must be greater than 0"):
        w.record(esc.dispute_id, "provisional_credit", L(2026, 1, 8, 11), "z", amount="0")
    assert w.rows(esc.dispute_id) == rows
    part = w.record(esc.dispute_id, "provisional_credit", L(2026, 1, 8, 11), "p",
                    amount="1.00")
    assert w.store.trail(esc.dispute_id)[-1].details["partial"] is True
    assert states(part)[D10_NAME][0] is not DeadlineState.MET
    assert "provisional_credit_notice" not in states(part)  # a partial credit starts nothing
    full = w.record(esc.dispute_id, "provisional_credit", L(2026, 1, 8, 11, 30), "f")
    assert states(full)[D10_NAME] == (DeadlineState.MET, "provisional_credit")


def test_an_assertion_without_timeliness_recorded_before_the_deadline_meets_it() -> None:
    """An action cannot happen after the row that records it: an import on Thu Jan 8 that
    asserts a determination (no instant, no timeliness) proves it came before D10."""
    w = World()
    esc = w.enqueue(tier="standard")
    w.at(L(2026, 1, 8, 12))
    from escalation.service_layer.obligations import ObligationPorts, RecordAction, record_action

    res = record_action(RecordAction(esc.dispute_id, "determination", None, "importer",
                                     "import:determination", asserted_timely=None,
                                     asserted_by="Timely response?"), ObligationPorts(**w.kw()))
    got = {a.name: a for a in res.assessments}[D10_NAME]
    assert (got.state, got.basis, got.by.occurred_at) == (  # type: ignore[union-attr]
        DeadlineState.MET, Basis.RECORD, None)
    assert got.by.recorded_at == L(2026, 1, 8, 12)  # type: ignore[union-attr]


def test_an_assertion_of_a_late_action_is_missed_per_source_even_recorded_early() -> None:
    """docs/sla.md "Imported outcomes": a source that says late is taken at its word, for the
    first deadline the action meets (D10), whenever the row was written; the later deadline
    (the investigation, also at D10 without a timely credit) is undetermined."""
    w = World()
    esc = w.enqueue(tier="standard")
    w.at(L(2026, 1, 8, 12))
    from escalation.service_layer.obligations import ObligationPorts, RecordAction, record_action

    res = record_action(RecordAction(esc.dispute_id, "determination", None, "importer",
                                     "import:determination", asserted_timely=False,
                                     asserted_by="Timely response?"), ObligationPorts(**w.kw()))
    by = {a.name: a for a in res.assessments}
    assert (by[D10_NAME].state, by[D10_NAME].basis, by[D10_NAME].late_s) == (
        DeadlineState.MISSED, Basis.SOURCE, None)
    assert (by[INV].state, by[INV].basis) == (DeadlineState.UNDETERMINED, Basis.SOURCE)


def test_a_backdated_action_says_when_it_was_recorded() -> None:
    w = World()
    esc = w.enqueue(tier="standard")
    w.at(L(2026, 3, 2, 9))
    res = w.record(esc.dispute_id, "determination", L(2026, 1, 9, 10), "d-late-entry")
    got = {a.name: a for a in res.assessments}[D10_NAME]
    assert got.state is DeadlineState.MET
    assert got.by.occurred_at == L(2026, 1, 9, 10)  # type: ignore[union-attr]
    assert got.by.recorded_at == L(2026, 3, 2, 9)  # type: ignore[union-attr]


def test_an_outcome_the_ladder_does_not_admit_is_refused() -> None:
    w = World()
    esc = w.enqueue(tier="standard")
    rows = w.rows(esc.dispute_id)
    with pytest.raises(InvalidInput, match="outcome: 'chargeback_won' is not an outcome"):
        resolve(Resolve(esc.dispute_id, "chargeback_won", "ops.alice", "r"), **w.kw())
    assert w.rows(esc.dispute_id) == rows


def test_resolve_after_resolve_is_refused_but_after_cancel_is_allowed() -> None:
    w = World()
    esc = w.enqueue(tier="standard")
    cancel(esc.dispute_id, scheduler=w.scheduler, store=w.store, actor="ops.alice",
           reason="dup")
    resolve(Resolve(esc.dispute_id, "withdrawn_by_consumer", "ops.alice", "r1"), **w.kw())
    from escalation.domain.errors import ConflictError

    with pytest.raises(ConflictError, match="already resolved"):
        resolve(Resolve(esc.dispute_id, "no_error_found", "ops.alice", "r2"), **w.kw())
    assert uuid.UUID(str(esc.dispute_id))


def test_the_outcome_phrase_says_when_a_backdated_action_was_recorded() -> None:
    from escalation.service_layer.deadline_outcomes import DeadlineOutcome

    on_time = DeadlineOutcome(
        uuid.uuid4(), None, "reg_e_error_resolution", 3, D10_NAME, "", D10, "met", None, 0.0,
        0, "standard", "record", "determination", L(2026, 1, 9, 10), "ops.alice", "",
        L(2026, 1, 9, 10, 5))
    assert on_time.explain(str).endswith("by ops.alice")  # recorded at the time: no note
    late_entry = DeadlineOutcome(
        uuid.uuid4(), None, "reg_e_error_resolution", 3, D10_NAME, "", D10, "met", None, 0.0,
        0, "standard", "record", "determination", L(2026, 1, 9, 10), "ops.alice", "",
        L(2026, 3, 2, 9))
    assert late_entry.explain(str).endswith(f", recorded {L(2026, 3, 2, 9)}")


def test_an_instant_outside_what_utc_holds_is_refused_naming_the_field() -> None:
    from datetime import datetime, timezone

    w = World()
    esc = w.enqueue(tier="standard")
    rows = w.rows(esc.dispute_id)
    far = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-5)))
    with pytest.raises(InvalidInput, match="occurred_at"):
        w.record(esc.dispute_id, "determination", far, "far")
    early = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5)))
    with pytest.raises(InvalidInput, match="occurred_at"):
        resolve(Resolve(esc.dispute_id, "no_error_found", "ops.alice", "r",
                        occurred_at=early), **w.kw())
    assert w.rows(esc.dispute_id) == rows


def test_a_credit_in_another_currency_is_recorded_as_unchecked_not_compared() -> None:
    """1005.11(c)(2)(i): a credit "in the amount of the alleged error". The disputed 125.00
    carries no currency; Reg E's full-amount rule compares in USD (the ladder's action
    currency). 100 JPY is not 100 USD: recorded, flagged ``amount_unchecked`` (the deadline
    shows it was met without the amount being compared), never ``partial`` nor plain met."""
    w = World()
    esc = w.enqueue(tier="standard")
    w.at(L(2026, 1, 8, 12))
    res = w.record(esc.dispute_id, "provisional_credit", L(2026, 1, 8, 11), "j",
                   amount="100", currency="JPY")
    details = w.store.trail(esc.dispute_id)[-1].details
    assert (details["amount"], details["currency"]) == ("100", "JPY")
    assert details["amount_unchecked"] is True and "partial" not in details
    assert states(res)[D10_NAME] == (DeadlineState.MET, "provisional_credit")
    usd = w.record(esc.dispute_id, "provisional_credit", L(2026, 1, 8, 11, 5), "u",
                   amount="125", currency="USD")
    details = w.store.trail(esc.dispute_id)[-1].details
    assert details["amount"] == "125.00" and "amount_unchecked" not in details
    assert states(usd)[D10_NAME] == (DeadlineState.MET, "provisional_credit")


@pytest.mark.parametrize(("amount", "currency", "stored"), [
    ("1.234", "BHD", "1.234"),  # ISO 4217: the dinar has three decimal places
    ("1.5", "BHD", "1.500"),
    ("1500", "JPY", "1500"),    # the yen has none
    ("1500.00", "JPY", "1500"),  # zeros below the unit are not digits
    ("0.0001", "CLF", "0.0001"),  # four
    ("2.5", "XAU", "2.5"),      # gold: List One gives no minor unit, none is imposed
])
def test_an_amount_has_the_decimal_places_of_its_currency(amount: str, currency: str,
                                                           stored: str) -> None:
    w = World()
    esc = w.enqueue(tier="standard")
    w.at(L(2026, 1, 8, 12))
    w.record(esc.dispute_id, "provisional_credit", L(2026, 1, 8, 11), "k", amount=amount,
             currency=currency)
    assert w.store.trail(esc.dispute_id)[-1].details["amount"] == stored


@pytest.mark.parametrize(("amount", "currency", "places"), [
    ("1.50", "JPY", "0 decimal places"), ("100.005", "USD", "2 decimal places"),
    ("1.2345", "KWD", "3 decimal places"),
])
def test_digits_below_the_currencys_minor_unit_are_refused_and_nothing_written(
    amount: str, currency: str, places: str,
) -> None:
    w = World()
    esc = w.enqueue(tier="standard")
    w.at(L(2026, 1, 8, 12))
    rows = w.rows(esc.dispute_id)
    with pytest.raises(InvalidInput, match=f"^amount: .*{currency} minor unit \\({places}") as e:
        w.record(esc.dispute_id, "provisional_credit", L(2026, 1, 8, 11), "x",
                 amount=amount, currency=currency)
    assert e.value.field == "amount"
    assert w.rows(esc.dispute_id) == rows
