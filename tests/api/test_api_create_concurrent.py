"""Concurrent single creates against a real uvicorn server (they are group-committed per
worker process, ``entrypoints.api.batching``): every request gets its own answer -- 201 for
the one that created the dispute's escalation, 200 for the others, its own 422 for a bad
value -- and every ledger row names the token that sent it."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx

from escalation.adapters.audit_store import PostgresAuditStore
from tests.api.conftest import Server, body


def post_all(server: Server, sends: list[tuple[str, dict[str, Any]]]) -> list[httpx.Response]:
    """POST every ``(role, body)`` to /v1/escalations at once (one connection each)."""

    async def go() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=len(sends))
        async with httpx.AsyncClient(base_url=server.url, timeout=60, limits=limits) as c:
            return await asyncio.gather(*(
                c.post("/v1/escalations", json=b,
                       headers={"Authorization": f"Bearer {server.tokens[role]}"})
                for role, b in sends))

    return asyncio.run(go())


def trail(engine: Any, did: str) -> list[tuple[str, str]]:
    return [(r.event, r.actor) for r in PostgresAuditStore(engine).trail(uuid.UUID(did))]


def test_concurrent_creates_of_distinct_disputes(api_server, engine):
    bodies = [body() for _ in range(40)]
    answers = post_all(api_server, [("service", b) for b in bodies])
    assert [r.status_code for r in answers] == [201] * 40, [r.text for r in answers]
    for b, r in zip(bodies, answers, strict=True):
        assert r.json()["dispute_id"] == b["dispute_id"] and r.json()["created"] is True
        assert trail(engine, b["dispute_id"]) == [("ENQUEUED", api_server.names["service"])]


def test_concurrent_creates_of_one_dispute_create_it_once(api_server, engine):
    b = body()
    answers = post_all(api_server, [("service", b)] * 12)
    codes = sorted(r.status_code for r in answers)
    assert codes == [200] * 11 + [201], [r.text for r in answers]
    assert {r.json()["seq"] for r in answers} == {1}
    assert {r.json()["trace_id"] for r in answers} == {answers[0].json()["trace_id"]}
    assert trail(engine, b["dispute_id"]) == [("ENQUEUED", api_server.names["service"])]


def test_one_bad_item_among_good_ones_fails_alone(api_server, engine):
    good = [body() for _ in range(15)]
    bad_tier = body(tier="no-such-tier")
    bad_time = body(due_at="next tuesday")
    sends = [("service", b) for b in good[:7]] + [("service", bad_tier)] + \
        [("service", b) for b in good[7:]] + [("service", bad_time)]
    answers = post_all(api_server, sends)
    by_id = {b["dispute_id"]: r for (_, b), r in zip(sends, answers, strict=True)}
    for b in good:
        assert by_id[b["dispute_id"]].status_code == 201, by_id[b["dispute_id"]].text
        assert trail(engine, b["dispute_id"]) == [("ENQUEUED", api_server.names["service"])]
    for bad, field in ((bad_tier, "tier"), (bad_time, "due_at")):
        r = by_id[bad["dispute_id"]]
        assert r.status_code == 422, r.text
        assert r.json()["errors"][0]["field"] == field  # its own field, no batch position
        assert trail(engine, bad["dispute_id"]) == []


def test_replays_are_200_and_write_nothing(api_server, engine):
    bodies = [body() for _ in range(10)]
    first = post_all(api_server, [("service", b) for b in bodies])
    fresh = body()
    again = post_all(api_server, [("admin", b) for b in bodies] + [("admin", fresh)])
    assert [r.status_code for r in first] == [201] * 10
    assert [r.status_code for r in again] == [200] * 10 + [201]
    assert all(r.json()["created"] is False for r in again[:10])
    for b in bodies:  # the replays, sent with another token, wrote no row of their own
        assert trail(engine, b["dispute_id"]) == [("ENQUEUED", api_server.names["service"])]
    assert trail(engine, fresh["dispute_id"]) == [("ENQUEUED", api_server.names["admin"])]


def test_each_row_names_the_token_that_sent_it(api_server, engine):
    roles = ["service", "admin"] * 10
    bodies = [body() for _ in roles]
    answers = post_all(api_server, list(zip(roles, bodies, strict=True)))
    assert [r.status_code for r in answers] == [201] * len(roles)
    for role, b in zip(roles, bodies, strict=True):
        assert trail(engine, b["dispute_id"]) == [("ENQUEUED", api_server.names[role])]


def test_a_role_without_write_permission_is_refused_among_writers(api_server, engine):
    ok, refused = body(), body()
    answers = post_all(api_server, [("service", ok), ("compliance", refused)])
    assert answers[0].status_code == 201
    assert answers[1].status_code == 403
    assert trail(engine, refused["dispute_id"]) == []
