"""``escalation demo``: the main job end to end, with nothing configured.

1. start (or reuse) the embedded Valkey + PostgreSQL and bring the schema to head;
2. enqueue a generated batch of disputes (mixed tiers and materiality, most already past
   their SLA window, a few due within seconds) -- or import ``--csv`` with ``--mapping``;
3. start N worker processes (``python -m escalation worker``);
4. wait until every escalation that was due has been decided, stop the workers (SIGTERM);
5. print the summary (enqueued, promoted per tier, terminal, duplicate decisions = 0), the
   audit trail of one walkthrough dispute that climbs the whole ladder (standard, senior,
   compliance) and where the worker logs are.

The walkthrough dispute is a Regulation E error on ``reg_e_error_resolution`` whose notice
of error came in 90 days ago: its regulatory deadline has passed, so every tier's due time is
capped to "now" and the workers walk it through every tier within seconds.
Exit code 0 only if everything due was decided exactly once.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from rich.table import Table

from escalation.bootstrap import App, build, core_ports_for, resolve_urls
from escalation.composition_cli import demo_figures, upgrade_database_url
from escalation.entrypoints.cli_common import err, out, redact_url
from escalation.entrypoints.render import compact_trail_table
from escalation.logs import configure_logging
from escalation.service_layer.bulk import BulkEnqueue, BulkResult, bulk_enqueue
from escalation.service_layer.enqueue import EnqueueRequest
from escalation.settings import Settings, get_settings


def generated_batch(count: int, now_ms: int, seed: int | None = None) -> list[EnqueueRequest]:
    """``count`` disputes: 60% standard / 25% senior / 15% compliance; 90% already past their
    SLA window (up to 10 min ago), 10% due within the next 3 s; materiality 0-25,000.00."""
    rng = random.Random(seed)
    from escalation.domain.timeutil import from_ms

    reqs = []
    for _ in range(count):
        tier = rng.choices(["standard", "senior", "compliance"], weights=[60, 25, 15])[0]
        offset = -rng.randint(0, 600_000) if rng.random() < 0.9 else rng.randint(200, 3000)
        money = Decimal(rng.randint(0, 2_500_000)) / 100
        did = uuid.UUID(int=rng.getrandbits(128), version=4)
        body = json.dumps({"id": str(did), "tier": tier, "amount": str(money)}).encode()
        reqs.append(EnqueueRequest(
            dispute_id=did, materiality=money, source_hash=hashlib.sha256(body).hexdigest(),
            tier=tier, due_at=from_ms(now_ms + offset),
        ))
    return reqs


WALKTHROUGH_LADDER = "reg_e_error_resolution"


WALKTHROUGH_ATTRIBUTES: dict[str, object] = {
    "new_account": False, "point_of_sale": False, "foreign_initiated": False,
}
"""The dispute attributes the Reg E ladder's deadlines depend on (version 2 refuses an
escalation without them): an established account, not point-of-sale, initiated in a State,
so the short deadlines (10 business days, 45 days) apply and both passed long ago."""


def walkthrough_request(now_ms: int) -> EnqueueRequest:
    """One dispute whose Reg E deadlines passed long ago: it climbs every tier at once."""
    from escalation.domain.timeutil import from_ms

    did = uuid.uuid4()
    return EnqueueRequest(
        dispute_id=did, materiality=Decimal("250.00"),
        source_hash=hashlib.sha256(f"walkthrough:{did}".encode()).hexdigest(),
        tier="standard", due_at=from_ms(now_ms - 1000), ladder=WALKTHROUGH_LADDER,
        anchor_at=from_ms(now_ms - 90 * 86_400_000), attributes=WALKTHROUGH_ATTRIBUTES,
    )


def _with_walkthrough(
    lines: list[tuple[int, EnqueueRequest]], ladders: Any, now: datetime,
) -> tuple[list[tuple[int, EnqueueRequest]], EnqueueRequest | None]:
    """``lines`` plus the walkthrough dispute, unless the deployment's ladders directory
    has no ``reg_e_error_resolution`` ladder (then no walkthrough)."""
    from escalation.domain.errors import LadderError
    from escalation.domain.timeutil import to_ms

    try:
        ladders.latest(WALKTHROUGH_LADDER)
    except LadderError:
        return lines, None
    walk = walkthrough_request(to_ms(now))
    return [*lines, (len(lines) + 1, walk)], walk


def _print_walkthrough(a: Any, walk: EnqueueRequest | None) -> None:
    """The walkthrough dispute's trail in at most 100 columns (or why there is none)."""
    trail = a.store.trail(walk.dispute_id) if walk is not None else []
    if trail:
        out.print(compact_trail_table(trail), width=100)
    else:
        out.print(f"no walkthrough trail: ladder {WALKTHROUGH_LADDER} is not in the ladders "
                  "directory", markup=False, highlight=False)


def _wait_started(log_dir: Path, count: int, deadline: float) -> None:
    """Wait (until ``deadline``) for each worker to log ``worker.started``, so a stop signal
    reaches a running worker (clean exit 0) rather than one still importing."""
    while time.monotonic() < deadline:
        started = sum(
            1 for i in range(count)
            if "worker.started" in (log_dir / f"worker-{i + 1}.log").read_text(errors="replace")
        )
        if started >= count:
            return
        time.sleep(0.1)


def _requests(*, count: int, csv_path: Path | None, mapping: Path | None,
              now: datetime, app: App,
              ) -> tuple[list[tuple[int, EnqueueRequest]], list[tuple[int, str]]]:
    """The numbered enqueue requests and the errors already found: parsed from ``csv_path``
    (with ``mapping``; rows naming no zone count in the ladder version's institution zone,
    else the deployment's), else ``count`` generated disputes breaching around ``now``."""
    if csv_path is not None:
        from escalation.service_layer.importer import ColumnMapping, default_timezone, plan_import

        cmap = ColumnMapping.from_file(mapping) if mapping else ColumnMapping()
        zone_name = default_timezone(cmap, app.ladders, app.calendars,
                                     app.settings.default_ladder)
        with csv_path.open(newline="", encoding="utf-8-sig") as fh:
            plan = plan_import(fh, cmap, zone_name)
        return plan.requests, plan.errors
    from escalation.domain.timeutil import to_ms

    return list(enumerate(generated_batch(count, to_ms(now)), start=1)), []


def _start_workers(workers: int, env: dict[str, str],
                   log_dir: Path) -> list[subprocess.Popen[bytes]]:
    """Start ``workers`` ``escalation worker`` processes, each logging to its own file."""
    procs = []
    for i in range(workers):
        fh = (log_dir / f"worker-{i + 1}.log").open("w")
        procs.append(subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "escalation", "worker", "--poll-interval-s", "1",
             "--worker-id", f"demo-worker-{i + 1}-{os.getpid()}"],
            env=env, stdout=fh, stderr=subprocess.STDOUT,
        ))
    return procs


def _wait_decided(a: App, ids: list[uuid.UUID], last_due: datetime, deadline: float) -> int:
    """Poll (until ``deadline``, monotonic s) until every dispute due by ``last_due`` is
    decided and the Redis clock has passed ``last_due``; returns how many are still due."""
    remaining = len(ids)
    while time.monotonic() < deadline:
        at = max(a.scheduler.time(), last_due + timedelta(milliseconds=1))
        remaining = demo_figures(a).undecided_due(ids, at)
        if remaining == 0 and a.scheduler.time() > last_due:
            break
        time.sleep(0.3)
    return remaining


def _stop_workers(procs: list[subprocess.Popen[bytes]], log_dir: Path,
                  deadline: float) -> list[int]:
    """SIGTERM each worker once it has started (or ``deadline`` passed); their exit codes."""
    _wait_started(log_dir, len(procs), deadline)
    for p in procs:
        p.send_signal(signal.SIGTERM)
    return [p.wait(timeout=60) for p in procs]


def _summary(res: BulkResult, counts: dict[str, int], remaining: int, dupes: int,
             codes: list[int]) -> Table:
    """The demo's summary table: enqueued, decisions by kind, still due, duplicates."""
    table = Table(title="escalation demo summary")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("enqueued", str(res.created))
    if res.existing:
        table.add_row("already enqueued by an earlier run", str(res.existing))
    for key in sorted(k for k in counts if k.startswith("PROMOTED_TO_")):
        table.add_row(key, str(counts[key]))
    table.add_row("TERMINAL_ESCALATION", str(counts.get("TERMINAL_ESCALATION", 0)))
    table.add_row("still due (not decided)", str(remaining))
    table.add_row("duplicate decisions in the ledger", str(dupes))
    table.add_row("worker exit codes", ",".join(str(c) for c in codes))
    return table


def demo_log_dir(settings: Settings, embedded: bool) -> Path:
    """Where the demo's worker logs go: ``<home>/demo-logs`` when the demo runs on the
    embedded servers (they live under ``settings.home``) or ``ESCALATION_HOME`` is set;
    on your own servers with no ``ESCALATION_HOME``, a new temporary directory (the default
    data directory holds nothing of such a run, and is not created for it). Created here."""
    if embedded or "home" in settings.model_fields_set:
        log_dir = settings.home / "demo-logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        return log_dir
    return Path(tempfile.mkdtemp(prefix="escalation-demo-logs-"))


def run_demo(*, count: int, workers: int, csv_path: Path | None, mapping: Path | None,
             timeout_s: float) -> int:
    """Run the demo; returns the process exit code (0 = all due decided exactly once).

    Decisions are counted from this run's start; duplicates over the disputes' whole history.

    Raises:
        InvalidInput: ``--mapping`` without ``--csv``.
    """
    if mapping is not None and csv_path is None:
        from escalation.domain.errors import InvalidInput

        raise InvalidInput("--mapping needs --csv (the mapping describes the CSV's columns)")
    settings = get_settings()
    configure_logging(settings.log_format, settings.log_level)
    urls = resolve_urls(settings)
    err.print(f"servers: redis {redact_url(urls.redis_url)} | postgres "
              + (f"embedded (home {settings.home})" if urls.embedded else "configured"))
    upgrade_database_url(urls.database_url)
    a = build(settings, actor="demo", strict_ladders=True, durable_redis=True)
    try:
        now = a.scheduler.time()
        lines, prior = _requests(count=count, csv_path=csv_path, mapping=mapping, now=now,
                                 app=a)
        lines, walk = _with_walkthrough(lines, a.ladders, now)
        res = bulk_enqueue(BulkEnqueue(lines, a.actor, settings.default_ladder,
                                       prior_errors=prior, skip_invalid=True),
                           core_ports_for(a))
        ids = [r.escalation.dispute_id for r in res.results]
        horizon = now + timedelta(seconds=10)  # what this run waits for: due within 10 s
        due_now = [r.escalation.due_at for r in res.results
                   if r.status.value == "pending" and r.escalation.due_at <= horizon]
        last_due = max(due_now, default=now)
        if not due_now:
            err.print(f"nothing due to fire: the {len(ids)} disputes were already enqueued "
                      "and decided by an earlier run (use a fresh ESCALATION_HOME or --count)")
            workers = 0
        walk_note = "" if walk is None else f"; {len(lines) - 1} + 1 that walks the whole ladder"
        err.print(f"enqueued {res.created} (already there: {res.existing}, invalid: "
                  f"{len(res.errors)}{walk_note}); starting {workers} workers")
        env = dict(os.environ, ESCALATION_REDIS_URL=urls.redis_url,
                   ESCALATION_DATABASE_URL=urls.database_url, ESCALATION_LOG_FORMAT="json")
        log_dir = demo_log_dir(settings, urls.embedded)
        err.print(f"worker logs: {log_dir}", markup=False, highlight=False, soft_wrap=True)
        procs = _start_workers(workers, env, log_dir)
        deadline = time.monotonic() + timeout_s
        remaining = len(ids)
        try:
            remaining = _wait_decided(a, ids, last_due, deadline)
        finally:
            codes = _stop_workers(procs, log_dir, deadline)
        counts = demo_figures(a).decision_counts(ids, since=now)
        dupes = demo_figures(a).duplicate_decisions(ids)
        out.print(_summary(res, counts, remaining, dupes, codes))
        _print_walkthrough(a, walk)
        out.print(f"worker logs: {log_dir}/worker-*.log", markup=False, highlight=False,
                  soft_wrap=True)
        out.print("(JSON lines, one per batch; ESCALATION_LOG_LEVEL=DEBUG adds one per decision)",
                  markup=False, highlight=False)
        ok = remaining == 0 and dupes == 0 and all(c == 0 for c in codes)
        if not ok:
            err.print(f"demo FAILED: {remaining} still due, {dupes} duplicates, exit codes "
                      f"{codes}; worker logs in {log_dir}")
        return 0 if ok else 1
    finally:
        a.close()
