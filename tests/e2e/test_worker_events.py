"""The worker's structured events carry trace_id, source_hash and match_decision
(docs/operations.md "Logs"), and the demo runs the main job end to end on the test servers."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from escalation.entrypoints.worker import run_worker
from tests.e2e.helpers import due_requests, enqueue
from tests.helpers import run_cli


@pytest.fixture()
def debug_logging() -> Any:
    """structlog at DEBUG for one test, as the worker's own configure_logging sets it: an
    earlier test in this process may have configured INFO, whose filtering bound logger
    drops DEBUG events before ``capture_logs()`` sees them."""
    import logging

    import structlog

    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    yield
    structlog.configure(**saved)


def test_burst_worker_logs_one_promoted_event_per_decision_with_the_seed_fields(
    app: Any, monkeypatch: pytest.MonkeyPatch, debug_logging: Any,
) -> None:
    # the per-decision events are built only when the worker logs at DEBUG (or serves
    # metrics): above DEBUG the firing path does not format them at all
    monkeypatch.setattr(app, "settings", app.settings.model_copy(update={"log_level": "DEBUG"}))
    now = app.scheduler.time()
    ids = enqueue(app, due_requests(5, now))
    enqueue(app, due_requests(2, now, tier="compliance"))
    with capture_logs() as logs:
        totals = run_worker(app, burst=True)
    assert totals.recorded == 7
    assert all(e["log_level"] == "debug" for e in logs
               if e["event"] in ("escalation.promoted", "escalation.terminal"))
    (batch,) = [e for e in logs if e["event"] == "worker.batch"]
    assert batch["log_level"] == "info" and batch["recorded"] == 7
    assert batch["decisions"] == {"PROMOTED_TO_SENIOR": 5, "TERMINAL_ESCALATION": 2}
    assert batch["lag_ms_max"] >= batch["lag_ms_p50"] >= 5000
    promoted = [e for e in logs if e["event"] == "escalation.promoted"]
    terminal = [e for e in logs if e["event"] == "escalation.terminal"]
    assert {e["dispute_id"] for e in promoted} == {str(i) for i in ids}
    assert len(terminal) == 2
    for e in promoted + terminal:
        assert e["trace_id"] and len(e["source_hash"]) == 64
        assert e["match_decision"] in ("PROMOTED_TO_SENIOR", "TERMINAL_ESCALATION")
        assert e["worker_id"] == app.actor and e["seq"] == 2
    assert [e["event"] for e in logs if e["event"].startswith("worker.")] == [
        "worker.started", "worker.batch", "worker.stopped"]


def test_burst_worker_at_info_writes_one_line_per_batch_not_per_decision(
    app: Any, cli_env: dict[str, str]
) -> None:
    n, batch_size = 230, 50
    enqueue(app, due_requests(n, app.scheduler.time()))
    env = dict(cli_env, ESCALATION_LOG_LEVEL="INFO")
    res = subprocess.run(
        [sys.executable, "-m", "escalation", "worker", "--burst", "--batch-size", str(batch_size)],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    lines = [json.loads(line) for line in res.stderr.splitlines() if line.startswith("{")]
    events = [e["event"] for e in lines]
    batches = [e for e in lines if e["event"] == "worker.batch"]
    assert sum(b["recorded"] for b in batches) == n
    assert len(batches) == -(-n // batch_size)  # ceil: 5 batches for 230 decisions
    assert "escalation.promoted" not in events
    # O(batches): the batch lines plus a constant few (started, stopped, ...), never O(N)
    assert len(lines) <= len(batches) + 10, events
    assert batches[0]["decisions"] == {"PROMOTED_TO_SENIOR": batch_size}


@pytest.mark.slow
def test_demo_runs_the_main_job_on_the_configured_servers(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    # no ESCALATION_HOME: the default data directory (under XDG_DATA_HOME here) is left alone
    data = tmp_path / "data"
    res = run_cli(dict(cli_env, XDG_DATA_HOME=str(data), HOME=str(tmp_path)), "demo",
                  "--count", "60", timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    # 60 generated + the walkthrough dispute, said as such
    assert "enqueued 61 (already there: 0, invalid: 0; 60 + 1 that walks the whole ladder)" \
        in res.stderr, res.stderr[-2000:]
    assert "duplicate decisions in the ledger │     0" in res.stdout
    assert "still due (not decided)           │     0" in res.stdout
    assert "TERMINAL_ESCALATION" in res.stdout and "audit trail of" in res.stdout
    # the walkthrough trail climbs the whole ladder and fits 100 columns
    trail = res.stdout[res.stdout.index("audit trail of"):res.stdout.index("worker logs:")]
    assert "reg_e_error_resolution@3" in trail  # the latest version: 3
    decisions = [line.split()[1] for line in trail.splitlines()
                 if line.strip()[:1].isdigit()]
    assert decisions[:3] == ["ENQUEUED", "PROMOTED_TO_SENIOR", "PROMOTED_TO_COMPLIANCE"]
    assert max(len(line.rstrip()) for line in trail.splitlines()) <= 100
    assert "standard" in trail and "senior" in trail and "compliance" in trail
    # and it says where the worker logs are: a temporary directory, not the data directory
    said = res.stdout[res.stdout.index("worker logs: "):].split()[2]
    logs = Path(said).parent
    assert logs.name.startswith("escalation-demo-logs-"), said
    assert f"worker logs: {logs}" in res.stderr, res.stderr[-2000:]
    assert sorted(p.name for p in logs.glob("worker-*.log")), said
    assert not (data / "escalation").exists() and not data.exists()
    shutil.rmtree(logs)


@pytest.mark.slow
def test_demo_on_configured_servers_writes_its_logs_under_escalation_home(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    res = run_cli(dict(cli_env, ESCALATION_HOME=str(home)), "demo", "--count", "5",
                  "--workers", "1", timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"worker logs: {home / 'demo-logs'}/worker-*.log" in res.stdout
    assert list((home / "demo-logs").glob("worker-*.log"))


def test_a_stop_signal_right_after_worker_started_ends_the_worker_cleanly(
    app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The demo sends SIGTERM as soon as a worker has logged "worker.started"; the signal
    # must end the loop (totals returned, no exception), not escape run_worker.
    import os
    import signal

    import escalation.entrypoints.worker as worker_mod

    real_info = worker_mod.log.info

    def info(event: str, **fields: Any) -> None:
        real_info(event, **fields)
        if event == "worker.started":
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(worker_mod.log, "info", info)
    enqueue(app, due_requests(3, app.scheduler.time()))
    before = signal.getsignal(signal.SIGTERM)
    totals = run_worker(app)
    assert totals.batches == 0  # stopped before the first batch
    assert signal.getsignal(signal.SIGTERM) is before  # the caller's handler is back


def test_burst_worker_schedules_the_new_tiers_warnings_with_the_apply_call(app: Any) -> None:
    """The worker sends each promoted escalation's pre-breach warnings inside the apply
    call (``fire_due(warning_members=...)``): the warnings ZSET holds exactly the members
    ``warning_members`` gives for the recorded states (senior: 0.50 and 0.75)."""
    from escalation.bootstrap import warnings_for
    from escalation.service_layer.warnings import warning_members

    ids = enqueue(app, due_requests(4, app.scheduler.time()))
    totals = run_worker(app, burst=True)
    assert totals.recorded == 4
    states = [app.store.get(i)[0] for i in ids]
    expected = {m.member: m.due_ms for m in warning_members(states, app.ladders, app.calendars)}
    assert len(expected) == 8
    got = {m: ms for i in ids for m, ms in warnings_for(app).pending(i)}
    assert got == expected
