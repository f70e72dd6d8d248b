"""The staged ENQUEUED write (``adapters.audit_store``, "ENQUEUED staging") hashes the same
fields as the general row builder (``audit_store.enqueue_rows``): both go through the one
renderer, ``audit_hash.canonical_bytes``, and must agree on every hashed value."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from escalation.adapters.audit_store import (
    enqueue_rows,
    enqueued_canonical_bytes,
    enqueued_details,
    enqueued_row_hash,
)
from escalation.domain.audit_hash import canonical_bytes
from escalation.domain.escalation import Escalation
from escalation.domain.materiality import Materiality
from tests.unit.property_budget import examples

zones = st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)),
                         timezone(timedelta(hours=-8)), timezone(timedelta(seconds=1))])
aware = st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1),
                     timezones=zones)
money = st.decimals(min_value=Decimal(0), max_value=Decimal("1e12"), places=2,
                    allow_nan=False, allow_infinity=False)
plain = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text()),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=8)
# not plain JSON: the template hands these to the general encoder
other = st.one_of(aware, money, st.uuids(), st.tuples(st.text(max_size=3)))
extras = st.one_of(
    st.none(),
    st.dictionaries(st.text(max_size=8), plain, max_size=4),
    st.dictionaries(st.text(max_size=8), st.one_of(plain, other), max_size=4),
)


@st.composite
def escalations(draw: st.DrawFn) -> Escalation:
    due = draw(aware)
    return Escalation(
        dispute_id=draw(st.uuids()), tier=draw(st.text(min_size=1)), due_at=due,
        materiality=Materiality.parse(draw(money)), source_hash=draw(st.text(min_size=1)),
        ladder=draw(st.text(min_size=1)), ladder_version=draw(st.integers(1, 10**6)), seq=0,
        entered_tier_at=draw(aware), trace_id=draw(st.text(min_size=1)),
        external_id=draw(st.none() | st.text()),
        regulatory_deadline=draw(st.none() | aware),
        deadlines=tuple(draw(st.lists(st.tuples(st.text(max_size=6), aware), max_size=3))),
        institution_tz=draw(st.none() | st.just("America/New_York")),
        institution_calendar=draw(st.none() | st.just("us_federal_reserve")),
    )


@settings(deadline=None, max_examples=examples(25))
@given(escalations(), st.text(), aware, st.none() | st.text(), extras)
def test_staged_bytes_and_hash_equal_the_general_rows_on_generated_rows(
    esc: Escalation, actor: str, decided_at: datetime, version: str | None,
    extra: dict[str, Any] | None,
) -> None:
    ledger = enqueue_rows(esc, actor, decided_at, version, extra)["ledger"]
    details = enqueued_details(esc, extra)
    assert details == ledger["details"]
    got = enqueued_canonical_bytes(esc, actor, decided_at, version, details)
    assert got == canonical_bytes(ledger)
    assert enqueued_row_hash(esc, actor, decided_at, version, details) == ledger["row_hash"]


def test_non_ascii_quotes_and_escapes_hash_as_the_general_row() -> None:
    esc = Escalation(
        dispute_id=__import__("uuid").UUID(int=5), tier='t\u00e9"\\', ladder="l\u2028",
        due_at=datetime(2026, 3, 8, 7, 30, tzinfo=timezone(timedelta(hours=-5))),
        materiality=Materiality.parse("1250.00"), source_hash="ab", ladder_version=2, seq=0,
        entered_tier_at=datetime(2026, 3, 1, tzinfo=UTC), trace_id="x\ty",
        external_id="caf\u00e9 \U0001f600", regulatory_deadline=datetime(2026, 4, 1, tzinfo=UTC),
        deadlines=(("reg_e", datetime(2026, 4, 1, tzinfo=UTC)),),
    )
    extra = {"attributes": {"new_account": True, "n": 3, "s": "\u00e9\n\"\\"}}
    ledger = enqueue_rows(esc, "svc\u00e9", datetime(2026, 3, 1, 12, tzinfo=UTC), "v1",
                          extra)["ledger"]
    details = enqueued_details(esc, extra)
    assert enqueued_canonical_bytes(esc, "svc\u00e9", datetime(2026, 3, 1, 12, tzinfo=UTC),
                                    "v1", details) == canonical_bytes(ledger)
