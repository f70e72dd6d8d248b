"""Recording actions and resolving disputes over HTTP (ADR 0010), on a real uvicorn server:
a provisional credit meets the Reg E 10-business-day clock and starts the notice clock,
replays and conflicts of idempotency keys, bad input refused naming the field with nothing
written, resolution from the terminal tier, and ``GET`` reporting the same states."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from escalation.adapters.audit_store import PostgresAuditStore
from tests.api.conftest import Server, body
from tests.helpers import run_cli

PROBLEM = "application/problem+json"
REG_E = {"new_account": False, "point_of_sale": False, "foreign_initiated": False}


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _rows(engine: Any, did: str) -> list[Any]:
    return list(PostgresAuditStore(engine).trail(uuid.UUID(did)))


def _reg_e(service: httpx.Client, notice: datetime, **over: Any) -> str:
    """A Reg E v3 dispute of 100.00 whose notice of error arrived at ``notice`` (the credit
    below covers the whole disputed amount, as 12 CFR 1005.11(c)(2)(i) requires)."""
    b = body(ladder="reg_e_error_resolution", due_at=None, tier=None, materiality="100.00",
             opened_at=notice.isoformat(), notice_at=notice.isoformat(), attributes=REG_E)
    b.update(over)
    b = {k: v for k, v in b.items() if v is not None}
    r = service.post("/v1/escalations", json=b)
    assert r.status_code == 201, r.text
    assert r.json()["ladder_version"] == 3, r.json()
    return str(b["dispute_id"])


def _deadlines(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in doc["deadlines"]}


def _credit(at: datetime, key: str, **over: Any) -> dict[str, Any]:
    b = {"action": "provisional_credit", "occurred_at": at.isoformat(), "amount": "100.00",
         "currency": "USD", "idempotency_key": key,
         "evidence": {"ref": "ledger://credits/1", "sha256": "ab" * 32}}
    b.update(over)
    return {k: v for k, v in b.items() if v is not None}


def test_provisional_credit_meets_the_10_day_clock_and_starts_the_notice_clock(
        api_server: Server, service: httpx.Client, engine: Any) -> None:
    notice = _now() - timedelta(days=2)
    did = _reg_e(service, notice)
    before = _deadlines(service.get(f"/v1/escalations/{did}").json())
    assert before["determine_or_provisionally_credit"]["state"] in ("pending", "at_risk")
    # without a timely credit the investigation is due with the 10-day clock
    assert (before["investigation"]["deadline_at"]
            == before["determine_or_provisionally_credit"]["deadline_at"])
    assert "provisional_credit_notice" not in before
    credited = _now() - timedelta(hours=1)
    r = service.post(f"/v1/escalations/{did}/actions", json=_credit(credited, "pc-1"))
    assert r.status_code == 201, r.text
    doc = r.json()
    assert doc["replayed"] is False and doc["recorded_seq"] == 2
    got = service.get(f"/v1/escalations/{did}")
    assert got.status_code == 200
    d = _deadlines(got.json())
    met = d["determine_or_provisionally_credit"]
    assert met["state"] == "met" and met["basis"] == "record"
    assert met["met_by"]["action"] == "provisional_credit"
    assert datetime.fromisoformat(met["met_by"]["occurred_at"]) == credited
    assert met["met_by"]["actor"] == api_server.names["service"]
    # when the ledger recorded it: after the credit itself (entered an hour later here)
    assert datetime.fromisoformat(met["met_by"]["recorded_at"]) > credited
    assert met["citation"].startswith("12 CFR 1005.11")
    assert met["late_seconds"] is None
    notice_clock = d["provisional_credit_notice"]
    assert notice_clock["state"] in ("pending", "at_risk")
    assert notice_clock["met_by"] is None
    assert notice_clock["rule"].startswith("from provisional_credit")
    assert datetime.fromisoformat(notice_clock["deadline_at"]) > credited
    # the timely credit opened the investigation's own 45-day window
    assert (datetime.fromisoformat(d["investigation"]["deadline_at"])
            >= notice + timedelta(days=45))
    assert _rows(engine, did)[-1].actor == api_server.names["service"]


def test_replay_conflict_and_the_idempotency_key_header(
        service: httpx.Client, engine: Any) -> None:
    did = _reg_e(service, _now() - timedelta(days=2))
    at = _now() - timedelta(hours=2)
    first = service.post(f"/v1/escalations/{did}/actions", json=_credit(at, "k-1"))
    assert first.status_code == 201, first.text
    again = service.post(f"/v1/escalations/{did}/actions", json=_credit(at, "k-1"))
    assert again.status_code == 200, again.text
    assert again.json()["replayed"] is True
    assert again.json()["recorded_seq"] == first.json()["recorded_seq"]
    n = len(_rows(engine, did))
    for other in (_credit(at, "k-1", amount="101.00"),  # another amount
                  _credit(at, "k-1", note="second thoughts"),  # a field added
                  _credit(at, "k-1", evidence=None)):  # a field left out
        r = service.post(f"/v1/escalations/{did}/actions", json=other)
        assert r.status_code == 409, (other, r.text)
        assert r.headers["content-type"] == PROBLEM
        assert "idempotency_key" in r.json()["detail"]
    assert len(_rows(engine, did)) == n
    # the key as a header; a body key that differs from it is refused
    notice_body = {"action": "provisional_credit_notice",
                   "occurred_at": _now().isoformat()}
    r = service.post(f"/v1/escalations/{did}/actions", json=notice_body,
                     headers={"Idempotency-Key": "hdr-1"})
    assert r.status_code == 201, r.text
    assert _deadlines(r.json())["provisional_credit_notice"]["state"] == "met"
    r = service.post(f"/v1/escalations/{did}/actions",
                     json={**notice_body, "idempotency_key": "other"},
                     headers={"Idempotency-Key": "hdr-1"})
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "idempotency_key"
    assert len(_rows(engine, did)) == n + 1


def _bad_inputs(notice: datetime) -> list[tuple[dict[str, Any], str]]:
    ok = _now() - timedelta(hours=1)
    return [
        (_credit(ok, "b1", amount=100.5), "amount"),  # a JSON number
        (_credit(ok, "b2", amount="NaN"), "amount"),
        (_credit(ok, "b3", amount="-1.00"), "amount"),
        (_credit(ok, "b4", amount=None), "amount"),  # a money action needs one
        (_credit(ok, "b5", currency="usd"), "currency"),
        (_credit(_now() + timedelta(days=1), "b6"), "occurred_at"),  # future
        (_credit(notice - timedelta(days=1), "b7"), "occurred_at"),  # before the anchor
        ({**_credit(ok, "b8"), "occurred_at": "2026-03-01T10:00:00"}, "occurred_at"),  # naive
        (_credit(ok, "b9", action="teleport"), "action"),
        (_credit(ok, "b10", evidence={"ref": "x", "sha256": "nothex"}), "evidence.sha256"),
        (_credit(ok, None), "idempotency_key"),  # neither body nor header
        ({**_credit(ok, "b12"), "colour": "red"}, "colour"),
    ]


def test_bad_input_is_422_naming_the_field_and_writes_nothing(
        service: httpx.Client, engine: Any) -> None:
    notice = _now() - timedelta(days=2)
    did = _reg_e(service, notice)
    n = len(_rows(engine, did))
    for bad, field in _bad_inputs(notice):
        r = service.post(f"/v1/escalations/{did}/actions", json=bad)
        assert r.status_code == 422, (bad, r.text)
        assert r.headers["content-type"] == PROBLEM
        assert r.json()["errors"][0]["field"] == field, (bad, r.json())
        if field == "action":  # the ladder's declared actions are listed
            assert "provisional_credit_notice" in r.json()["detail"]
    assert len(_rows(engine, did)) == n
    # an unknown dispute: 404, by both addresses
    for path in (f"/v1/escalations/{uuid.uuid4()}",
                 "/v1/sources/visa/escalations/nope-1"):
        r = service.post(f"{path}/actions", json=_credit(_now(), "x"))
        assert r.status_code == 404, r.text
        r = service.post(f"{path}/resolve", json={"outcome": "closed", "idempotency_key": "x"})
        assert r.status_code == 404, r.text
    r = service.post(f"/v1/escalations/{did}/resolve",
                     json={"outcome": "unstated", "idempotency_key": "u"})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "outcome"
    assert len(_rows(engine, did)) == n


def _terminal(api_server: Server, service: httpx.Client, notice: datetime,
              external_id: str) -> str:
    """A Reg E dispute in its terminal tier, due in the past, fired by a worker burst."""
    b = body(ladder="reg_e_error_resolution", tier="compliance", attributes=REG_E,
             materiality="100.00", notice_at=notice.isoformat(),
             due_at=(_now() - timedelta(minutes=1)).isoformat(),
             dispute_id=None, source="bank", external_id=external_id)
    r = service.post("/v1/escalations", json=b)
    assert r.status_code == 201, r.text
    return str(r.json()["dispute_id"])


def test_resolve_from_terminal_and_cancel_names_resolve(
        api_server: Server, service: httpx.Client, engine: Any) -> None:
    notice = _now() - timedelta(days=20)  # the 10 business days are over
    ext = f"T-{uuid.uuid4().hex[:8]}"
    did = _terminal(api_server, service, notice, ext)
    credited = notice + timedelta(days=3)  # within the 10 business days
    r = service.post(f"/v1/sources/bank/escalations/{ext}/actions",
                     json=_credit(credited, "t-pc"))
    assert r.status_code == 201, r.text
    burst = run_cli(api_server.env, "worker", "--burst")
    assert burst.returncode == 0, burst.stderr
    got = service.get(f"/v1/escalations/{did}").json()
    assert got["status"] == "terminal", got
    cancel = service.post(f"/v1/escalations/{did}/cancel")
    assert cancel.status_code == 409 and "resolve" in cancel.json()["detail"]
    n = len(_rows(engine, did))
    res = service.post(f"/v1/sources/bank/escalations/{ext}/resolve",
                       json={"outcome": "error_corrected", "reason": "credit made final"},
                       headers={"Idempotency-Key": "t-res"})
    assert res.status_code == 201, res.text
    assert res.json()["status"] == "resolved"
    assert len(_rows(engine, did)) == n + 1
    row = _rows(engine, did)[-1]
    assert row.event == "RESOLVED" and row.details["from_status"] == "terminal"
    assert row.actor == api_server.names["service"]
    replay = service.post(f"/v1/escalations/{did}/resolve",
                          json={"outcome": "error_corrected", "reason": "credit made final"},
                          headers={"Idempotency-Key": "t-res"})
    assert replay.status_code == 200 and replay.json()["recorded_seq"] == row.seq
    second = service.post(f"/v1/escalations/{did}/resolve",
                          json={"outcome": "no_error_found", "idempotency_key": "t-res-2"})
    assert second.status_code == 409, second.text
    assert len(_rows(engine, did)) == n + 1
    got = service.get(f"/v1/escalations/{did}").json()
    assert got["status"] == "resolved" and got["due_at"] is None
    d = _deadlines(got)
    # met on time by the credit; the 45 days were met by the resolution
    assert d["determine_or_provisionally_credit"]["state"] == "met"
    assert d["determine_or_provisionally_credit"]["met_by"]["action"] == "provisional_credit"
    assert d["investigation"]["state"] == "met"
    assert d["investigation"]["met_by"]["action"] == "resolution"
    # the notice of the credit was owed within 2 business days and never recorded
    missed = d["provisional_credit_notice"]
    assert missed["state"] == "missed" and missed["met_by"] is None
    assert missed["late_seconds"] > 10 * 86400
    assert set(row.details["late"]) == {"provisional_credit_notice"}
    again = service.post(f"/v1/escalations/{did}/cancel")
    assert again.status_code == 409, again.text


def test_get_of_a_dispute_whose_deadlines_passed_says_missed(service: httpx.Client) -> None:
    did = _reg_e(service, datetime(2026, 1, 5, 15, tzinfo=UTC))
    states = {d["state"] for d in service.get(f"/v1/escalations/{did}").json()["deadlines"]}
    assert states == {"missed"}


@pytest.mark.parametrize("role", ["compliance"])
def test_a_read_only_role_may_not_record(api_server: Server, service: httpx.Client,
                                         engine: Any, role: str) -> None:
    did = _reg_e(service, _now() - timedelta(days=2))
    with api_server.client(role) as c:
        r = c.post(f"/v1/escalations/{did}/actions", json=_credit(_now(), "ro"))
        assert r.status_code == 403
        r = c.post(f"/v1/escalations/{did}/resolve",
                   json={"outcome": "closed", "idempotency_key": "ro"})
        assert r.status_code == 403
    assert len(_rows(engine, did)) == 1


def test_a_resolution_before_the_dispute_was_opened_is_422_on_every_ladder(
        service: httpx.Client, engine: Any) -> None:
    """The default ladder has no regulatory anchor: a resolution instant before the dispute's
    opened_at is refused on occurred_at, nothing written; at opened_at it is accepted."""
    opened = _now() - timedelta(days=3)
    b = body(due_at=None, opened_at=opened.isoformat())
    assert service.post("/v1/escalations", json=b).status_code == 201
    did = str(b["dispute_id"])
    n = len(_rows(engine, did))
    r = service.post(f"/v1/escalations/{did}/resolve", json={
        "outcome": "no_error_found", "idempotency_key": "early",
        "occurred_at": (opened - timedelta(days=365)).isoformat()})
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"] == "occurred_at", r.json()
    assert "before the dispute was opened" in r.json()["detail"]
    assert len(_rows(engine, did)) == n
    r = service.post(f"/v1/escalations/{did}/resolve", json={
        "outcome": "no_error_found", "idempotency_key": "at-open",
        "occurred_at": opened.isoformat()})
    assert r.status_code == 201, r.text


def test_resolve_of_a_cancelled_dispute_is_409_where_the_cancel_is_the_resolution(
        service: httpx.Client, engine: Any) -> None:
    """dispute_review v1 declares no actions: its cancel is the resolution (docs/sla.md,
    "What a cancel meets"); a later resolve is a 409 problem and writes nothing."""
    b = body()
    assert service.post("/v1/escalations", json=b).status_code == 201
    did = str(b["dispute_id"])
    assert service.post(f"/v1/escalations/{did}/cancel",
                        json={"reason": "dup"}).status_code == 200
    n = len(_rows(engine, did))
    r = service.post(f"/v1/escalations/{did}/resolve",
                     json={"outcome": "closed", "idempotency_key": "cx-1"})
    assert r.status_code == 409, r.text
    assert r.headers["content-type"].startswith(PROBLEM)
    assert "cancel is its resolution" in r.json()["detail"]
    assert len(_rows(engine, did)) == n
    assert [row.event for row in _rows(engine, did)] == ["ENQUEUED", "CANCELLED"]
