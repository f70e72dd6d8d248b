"""The ladder chain id and events (domain/ladder_ledger.py; ADR 0012)."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID, uuid5

import pytest

from escalation.domain.errors import InvalidInput
from escalation.domain.ladder_ledger import (
    LADDER_CHAIN_NAMESPACE,
    LadderEvent,
    ReleaseEvent,
    ladder_chain_id,
    run_event,
)


def test_the_chain_id_is_uuid5_of_ladder_at_version_and_recomputable() -> None:
    on_record = UUID("6f1c2a7e-5b0d-4c3e-9a8f-1d2e3f405162")  # never changes
    assert on_record == LADDER_CHAIN_NAMESPACE
    cid = ladder_chain_id("reg_e_error_resolution", 3)
    assert cid == uuid5(LADDER_CHAIN_NAMESPACE, "reg_e_error_resolution@3")
    assert cid.version == 5  # never a dispute's random (version 4) id
    assert ladder_chain_id("reg_e_error_resolution", 2) != cid


@pytest.mark.parametrize(("ladder", "version", "field"), [("", 1, "ladder"), ("x", 0, "version")])
def test_a_chain_id_needs_a_ladder_and_a_version(ladder: str, version: int, field: str) -> None:
    with pytest.raises(InvalidInput, match=f"^{field}:"):
        ladder_chain_id(ladder, version)


def test_a_run_ends_done_or_failed_and_nothing_else_is_an_event() -> None:
    assert run_event("done") is LadderEvent.APPLIED
    assert run_event("failed") is LadderEvent.APPLY_FAILED
    with pytest.raises(InvalidInput, match=r"^status:"):
        run_event("running")


def test_a_migrated_row_names_the_release_event() -> None:
    at = datetime(2026, 12, 6, 9, 30, tzinfo=UTC)
    ev = ReleaseEvent(ladder="lad", version=2, event=LadderEvent.RELEASED,
                      chain_id=ladder_chain_id("lad", 2), seq=1, row_hash="ab" * 32,
                      released_by="jane", released_at=at)
    assert ev.migration_reason("CHG-7") == (
        f"CHG-7; migrated to lad@2, released as LADDER_RELEASED by jane "
        f"(ledger {ladder_chain_id('lad', 2)}#1)")
    assert ev.migration_reason("").startswith("migrated to lad@2")
    assert ev.as_details() == {
        "version": 2, "event": "LADDER_RELEASED", "chain_id": str(ladder_chain_id("lad", 2)),
        "seq": 1, "row_hash": "ab" * 32, "released_by": "jane",
        "released_at": "2026-12-06T09:30:00+00:00"}
