"""Escalation.new validates once so adapters can trust what they store."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from escalation.domain.calendars import SlaWindow, WindowUnit
from escalation.domain.errors import InvalidInput, UnknownTier
from escalation.domain.escalation import Escalation, NewEscalation
from escalation.domain.ladder import Ladder, Tier

LADDER = Ladder(
    name="dispute_review",
    version=1,
    tiers=(
        Tier("standard", "Standard", 10, SlaWindow(24, WindowUnit.CALENDAR_HOURS)),
        Tier("senior", "Senior", 20, SlaWindow(48, WindowUnit.CALENDAR_HOURS)),
        Tier("compliance", "Compliance", 30, SlaWindow(72, WindowUnit.CALENDAR_HOURS)),
    ),
    terminal_tier="compliance",
)
T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def _new(**over: Any) -> Escalation:
    kwargs: dict[str, Any] = {
        "dispute_id": str(uuid.uuid4()),
        "tier": "standard",
        "due_at": T0,
        "materiality": "1250.00",
        "source_hash": "ab" * 32,
        "ladder": LADDER,
        "entered_tier_at": T0,
        "trace_id": "t-1",
    }
    kwargs.update(over)
    ladder = kwargs.pop("ladder")
    return Escalation.new(NewEscalation(**kwargs), ladder)


def test_valid_escalation_is_pinned_to_its_ladder_version() -> None:
    esc = _new(source_hash="AB" * 32)
    assert (esc.ladder, esc.ladder_version, esc.ladder_key) == (
        "dispute_review",
        1,
        "dispute_review@1",
    )
    assert esc.seq == 0
    assert esc.source_hash == "ab" * 32
    assert str(esc.materiality) == "1250.00"


def test_due_at_is_converted_to_utc() -> None:
    local = datetime(2026, 3, 2, 7, 0, tzinfo=ZoneInfo("America/New_York"))
    assert _new(due_at=local).due_at == T0


@pytest.mark.parametrize("field", ["due_at", "entered_tier_at", "regulatory_deadline"])
def test_naive_datetime_is_refused(field: str) -> None:
    with pytest.raises(InvalidInput, match="timezone-aware"):
        _new(**{field: datetime(2026, 3, 2, 12, 0)})


@pytest.mark.parametrize("bad", ["42", "not-a-uuid", 42, None, ""])
def test_non_uuid_dispute_id_is_refused(bad: object) -> None:
    with pytest.raises(InvalidInput, match="UUID"):
        _new(dispute_id=bad)


def test_unknown_tier_is_refused() -> None:
    with pytest.raises(UnknownTier, match="'manager'"):
        _new(tier="manager")


@pytest.mark.parametrize("bad", ["a" * 129, "xyz", "", 123, "ab cd"])
def test_oversize_or_non_hex_source_hash_is_refused(bad: object) -> None:
    with pytest.raises(InvalidInput, match="source hash"):
        _new(source_hash=bad)


def test_128_hex_source_hash_is_accepted() -> None:
    assert len(_new(source_hash="f" * 128).source_hash) == 128


def test_float_materiality_is_refused() -> None:
    with pytest.raises(InvalidInput, match="float"):
        _new(materiality=1250.0)


@pytest.mark.parametrize("trace", ["", "x" * 65])
def test_bad_trace_id_is_refused(trace: str) -> None:
    with pytest.raises(InvalidInput, match="trace id"):
        _new(trace_id=trace)


@pytest.mark.parametrize(("reason", "message"), [
    ("", "must not be empty"), ("   ", "must not be empty"),
    ("x" * 501, "at most 500 characters, got 501"), ("why\nnot", "control character"),
])
def test_a_ledger_reason_is_refused_blank_overlong_or_multiline(reason: str,
                                                                message: str) -> None:
    from escalation.domain.escalation import check_reason

    with pytest.raises(InvalidInput, match=message):
        check_reason(reason)
    assert check_reason("x" * 500) == "x" * 500 and check_reason("CHG-7") == "CHG-7"
