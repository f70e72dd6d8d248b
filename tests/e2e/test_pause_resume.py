"""Pause / resume (docs/sla.md) through the CLI: ``escalation pause ID --reason ...`` /
``escalation resume ID`` as subprocesses (cli_env): PAUSED/RESUMED ledger rows, the member
leaves and re-enters the pending schedule, the remaining window is kept."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from tests.e2e.helpers import due_requests, enqueue
from tests.helpers import run_cli


def _scheduled(app: Any, did: Any) -> bool:
    keys = app.scheduler.keys_for(did)
    return any(app.redis.zscore(k, str(did)) is not None
               for k in (keys.pending, getattr(keys, "ready", keys.pending)))


def test_pause_and_resume_through_the_cli_record_rows_and_move_the_member(
    app: Any, cli_env: dict[str, str]
) -> None:
    now = app.scheduler.time()
    [did] = enqueue(app, due_requests(1, now, past_s=-3600))  # due in one hour
    assert _scheduled(app, did)

    paused = run_cli(cli_env, "pause", str(did), "--reason", "waiting for cardholder", "--json")
    assert paused.returncode == 0, paused.stderr
    body = json.loads(paused.stdout)
    assert body["status"] == "paused"
    assert 3_500_000 < body["remaining_ms"] <= 3_600_000
    assert not _scheduled(app, did)  # off the due schedule
    assert app.scheduler.payload(did) is not None  # payload kept
    again = run_cli(cli_env, "pause", str(did), "--reason", "twice")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"already paused {did} (seq 2): nothing changed")
    assert [r.event for r in app.store.trail(did)] == ["ENQUEUED", "PAUSED"]

    resumed = run_cli(cli_env, "resume", str(did), "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert _scheduled(app, did)
    trail = app.store.trail(did)
    assert [r.event for r in trail] == ["ENQUEUED", "PAUSED", "RESUMED"]
    assert trail[1].details["reason"] == "waiting for cardholder"
    assert trail[1].details["remaining_ms"] == body["remaining_ms"]
    assert all(r.calendar_version for r in trail)
    state, status = app.store.get(did)
    assert status.value == "pending"
    # due = resume time + remaining (utc calendar: elapsed time)
    assert state.due_at - trail[2].decided_at == timedelta(milliseconds=body["remaining_ms"])
    twice = run_cli(cli_env, "resume", str(did))
    assert twice.returncode == 0, twice.stderr
    assert twice.stdout.startswith(f"already running (resumed or never paused) {did} (seq 3)")
    assert len(app.store.trail(did)) == 3


def test_cancelling_a_paused_escalation_removes_it(app: Any, cli_env: dict[str, str]) -> None:
    now = app.scheduler.time()
    [did] = enqueue(app, due_requests(1, now, past_s=-3600))
    assert run_cli(cli_env, "pause", str(did), "--reason", "r").returncode == 0
    from escalation.service_layer.cancel import cancel

    cancel(did, scheduler=app.scheduler, store=app.store, actor="test", reason="resolved")
    assert [r.event for r in app.store.trail(did)][-1] == "CANCELLED"
    assert app.scheduler.payload(did) is None and not _scheduled(app, did)
