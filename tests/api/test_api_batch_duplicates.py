"""``POST /v1/escalations/batch`` with a dispute repeated in one request, against a real
uvicorn server: the first occurrence is recorded, every later one is answered like a replay
(``created: false``), the ledger holds one ENQUEUED row per dispute, and what the API
reports (the batch answer, the escalation, its audit trail) is what was recorded."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from escalation.adapters.audit_store import PostgresAuditStore
from tests.api.conftest import body


def _post(service: Any, items: list[dict[str, Any]]) -> dict[str, Any]:
    r = service.post("/v1/escalations/batch", json={"items": items})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def _enqueued(compliance: Any, did: str) -> list[dict[str, Any]]:
    r = compliance.get(f"/v1/escalations/{did}/audit")
    assert r.status_code == 200, r.text
    return [row for row in r.json() if row["event"] == "ENQUEUED"]


def _assert_recorded_once(service: Any, compliance: Any, engine: Any, did: str) -> None:
    """One ENQUEUED row, and it agrees with the escalation the API shows and the store holds."""
    [row] = _enqueued(compliance, did)
    shown = service.get(f"/v1/escalations/{did}").json()
    assert row["trace_id"] == shown["trace_id"]
    assert datetime.fromisoformat(row["due_at"]) == datetime.fromisoformat(shown["due_at"])
    assert row["materiality"] == shown["materiality"]
    state = PostgresAuditStore(engine).get(uuid.UUID(did))
    assert state is not None
    assert row["details"]["institution"]["timezone"] == state[0].institution_tz
    assert PostgresAuditStore(engine).verify(uuid.UUID(did)) == []


def test_identical_repeats_in_one_batch_answer_like_a_replay(service, compliance, engine):
    b = body()  # no trace id: each occurrence would otherwise carry its own
    out = _post(service, [b, dict(b), dict(b)])
    assert (out["created"], out["existing"]) == (1, 2)
    assert [r["created"] for r in out["results"]] == [True, False, False]
    assert {r["status"] for r in out["results"]} == {"pending"}
    _assert_recorded_once(service, compliance, engine, b["dispute_id"])
    replay = _post(service, [b])
    assert (replay["created"], replay["existing"]) == (0, 1)


def test_a_repeat_with_different_content_does_not_change_the_record(service, compliance,
                                                                      engine):
    first = body(trace_id="first-occurrence", timezone="America/New_York")
    later = body(dispute_id=first["dispute_id"], trace_id="later-occurrence",
                 timezone="Europe/London", materiality="9.99",
                 due_at="2030-02-01T00:00:00+00:00")
    out = _post(service, [first, later])
    assert [r["created"] for r in out["results"]] == [True, False]
    shown = service.get(f"/v1/escalations/{first['dispute_id']}").json()
    assert shown["trace_id"] == "first-occurrence"
    assert shown["materiality"] == "125.50"
    [row] = _enqueued(compliance, first["dispute_id"])
    assert row["details"]["institution"]["timezone"] == "America/New_York"
    _assert_recorded_once(service, compliance, engine, first["dispute_id"])


def test_repeats_mixed_with_other_and_existing_disputes(service, compliance, engine):
    old = body()
    assert _post(service, [old])["created"] == 1
    a, b, c = body(timezone="America/Chicago"), body(), body()
    items = [a, b, body(dispute_id=old["dispute_id"], timezone="Asia/Tokyo"),
             body(dispute_id=a["dispute_id"], timezone="Europe/Paris"), c,
             dict(b), body(dispute_id=a["dispute_id"], trace_id="third")]
    out = _post(service, items)
    assert [r["dispute_id"] for r in out["results"]] == [i["dispute_id"] for i in items]
    assert [r["created"] for r in out["results"]] == [True, True, False, False, True, False,
                                                      False]
    assert (out["created"], out["existing"]) == (3, 4)
    # body() gives every item its own source hash: only the copy of b carries the same one
    assert [r["source_hash_differs"] for r in out["results"]] == [False, False, True, True,
                                                                  False, False, True]
    for item in (old, a, b, c):
        _assert_recorded_once(service, compliance, engine, item["dispute_id"])
    [row] = _enqueued(compliance, a["dispute_id"])
    assert row["details"]["institution"]["timezone"] == "America/Chicago"
