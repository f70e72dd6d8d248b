"""The payload HASH mapping (``adapters/redis_scheduler.py``) without Redis: round trip in the
current short-name format and decoding of the long-name format earlier versions wrote."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from escalation.adapters.redis_scheduler import (
    LEGACY_NAMES,
    OPTIONAL_FIELDS,
    PAYLOAD_FIELDS,
    REQUIRED_FIELDS,
    escalation_to_payload,
    normalize_payload,
    payload_to_escalation,
)
from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import Escalation, Status
from escalation.domain.materiality import Materiality

T0 = datetime(2026, 3, 2, 9, 0, 0, 123000, tzinfo=UTC)
OLD_NAMES = ("tier", "ladder", "seq", "due_ms", "entered_ms", "materiality", "source_hash",
             "trace_id", "external_id", "source", "deadline_ms", "deadlines", "tz", "cal")


def full_esc() -> Escalation:
    """An escalation with every optional payload field set."""
    return Escalation(
        dispute_id=uuid.uuid4(), tier="senior", due_at=T0 + timedelta(hours=4),
        materiality=Materiality(Decimal("1250.25")), source_hash="ab" * 32,
        ladder="cfpb_complaint_response", ladder_version=3, seq=4, entered_tier_at=T0,
        trace_id=uuid.uuid4().hex, external_id="2026-0417-0093", source="cfpb",
        regulatory_deadline=T0 + timedelta(days=15),
        deadlines=(("company_response", T0 + timedelta(days=15)),
                   ("final", T0 + timedelta(days=60))),
        institution_tz="America/New_York", institution_calendar="us_federal",
    )


def bare_esc() -> Escalation:
    """An escalation with no optional payload field set."""
    return Escalation(
        dispute_id=uuid.uuid4(), tier="standard", due_at=T0, materiality=Materiality(
            Decimal("0.50")), source_hash="a1", ladder="default", ladder_version=1, seq=1,
        entered_tier_at=T0 - timedelta(hours=1), trace_id="t-1",
    )


def long_name_payload(esc: Escalation) -> dict[str, str]:
    """What the earlier version's mapping wrote for ``esc`` (its field names, spelled out)."""
    fields = {
        "tier": esc.tier, "ladder": f"{esc.ladder}@{esc.ladder_version}", "seq": str(esc.seq),
        "due_ms": str(int(esc.due_at.timestamp() * 1000)),
        "entered_ms": str(int(esc.entered_tier_at.timestamp() * 1000)),
        "materiality": str(esc.materiality), "source_hash": esc.source_hash,
        "trace_id": esc.trace_id,
    }
    if esc.external_id is not None:
        fields["external_id"] = esc.external_id
    if esc.source is not None:  # no earlier version wrote it; the long name is read all the same
        fields["source"] = esc.source
    if esc.regulatory_deadline is not None:
        fields["deadline_ms"] = str(int(esc.regulatory_deadline.timestamp() * 1000))
    if esc.deadlines:
        fields["deadlines"] = ",".join(f"{n}={int(at.timestamp() * 1000)}"
                                       for n, at in esc.deadlines)
    if esc.institution_tz is not None:
        fields["tz"] = esc.institution_tz
    if esc.institution_calendar is not None:
        fields["cal"] = esc.institution_calendar
    return fields


@pytest.mark.parametrize("make", [full_esc, bare_esc])
def test_round_trip_in_the_current_format(make: object) -> None:
    esc = make()  # type: ignore[operator]
    fields = escalation_to_payload(esc)
    assert set(fields) <= set(PAYLOAD_FIELDS)
    assert not set(fields) & (set(OLD_NAMES) - {"seq", "due_ms"})  # no long name written
    assert payload_to_escalation(str(esc.dispute_id), fields) == esc
    assert payload_to_escalation(esc.dispute_id, fields, Status.PAUSED) == esc.with_changes(
        status=Status.PAUSED)


def test_every_field_is_written_when_set_and_only_then() -> None:
    assert set(escalation_to_payload(full_esc())) == set(PAYLOAD_FIELDS)
    assert set(escalation_to_payload(bare_esc())) == set(REQUIRED_FIELDS)


@pytest.mark.parametrize("make", [full_esc, bare_esc])
def test_a_long_name_payload_decodes_to_the_same_escalation(make: object) -> None:
    esc = make()  # type: ignore[operator]
    old = long_name_payload(esc)
    assert payload_to_escalation(str(esc.dispute_id), old) == esc
    assert normalize_payload(old) == escalation_to_payload(esc)


def test_the_legacy_table_names_every_field_once() -> None:
    assert set(LEGACY_NAMES) == set(PAYLOAD_FIELDS)
    assert sorted(LEGACY_NAMES.values()) == sorted(OLD_NAMES)
    assert len(set(PAYLOAD_FIELDS)) == len(REQUIRED_FIELDS) + len(OPTIONAL_FIELDS)


def test_the_short_names_are_what_make_the_payload_smaller() -> None:
    esc = full_esc()
    new, old = escalation_to_payload(esc), long_name_payload(esc)
    assert list(new.values()) == list(old.values())  # same values, same order
    assert sum(map(len, new)) < sum(map(len, old)) - 50


def test_a_current_payload_ignores_stray_long_names() -> None:
    """A short-name payload is read by the short names only (a long ``external_id`` left
    beside it is not taken for the absent ``x``)."""
    esc = bare_esc()
    fields = {**escalation_to_payload(esc), "external_id": "stale", "tier": "other"}
    assert payload_to_escalation(esc.dispute_id, fields) == esc


@pytest.mark.parametrize("fmt", ["short", "long"])
def test_a_missing_required_field_is_refused_by_its_name(fmt: str) -> None:
    esc = bare_esc()
    fields = escalation_to_payload(esc) if fmt == "short" else long_name_payload(esc)
    del fields["m" if fmt == "short" else "materiality"]
    with pytest.raises(InvalidInput, match="materiality"):
        payload_to_escalation(esc.dispute_id, fields)


@pytest.mark.parametrize(("short", "long", "bad"), [
    ("seq", "seq", "x"), ("e", "entered_ms", "soon"), ("d", "deadline_ms", "1.5"),
    ("ds", "deadlines", "a:1"), ("l", "ladder", "default"),
])
def test_a_malformed_field_is_refused_in_either_format(short: str, long: str, bad: str) -> None:
    esc = full_esc()
    for fields, name in ((escalation_to_payload(esc), short), (long_name_payload(esc), long)):
        fields[name] = bad
        with pytest.raises(InvalidInput):
            payload_to_escalation(esc.dispute_id, fields)
