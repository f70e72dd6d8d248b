"""``escalation bench ledger``: build a large, faithful ledger and time the audit answers on it.

Two phases (docs/performance.md, "A large ledger"):

1. **Templates, made by the product.** A few dozen disputes are enqueued, decided, given
   actions (on time and late), paused, resumed, resolved and cancelled through the product's
   own use cases and audit store, on every shipped ladder whose attributes the bench knows:
   real chains, real projection rows.
2. **Clones.** Each template chain is cloned into new disputes spread over ``--months``
   monthly partitions: a new dispute id, external id, trace id and source hash, every instant
   (columns and the ISO instants inside ``details``) moved by the same whole number of weeks
   plus a few seconds, and every row hash recomputed with the product's own hash code
   (``domain.audit_hash.row_hash``); ledger rows and projection rows are written with COPY,
   one month per task, in ``--jobs`` processes. Older months clone only finished chains
   (terminal, resolved, cancelled); the last two months also clone pending and paused ones,
   so the ledger holds pending escalations whose deadlines are met, missed or still open.

The clones are **ledger-only**: they have no Redis entries (the console and ``audit``
commands read PostgreSQL only; ``escalation reconcile`` would schedule the pending ones).
Then the audit answers are timed on the result, each as the CLI runs it (a fresh
interpreter): ``audit show`` by UUID and by external id, ``audit search``, ``audit export`` of
a month, ``audit verify --all`` (rows/s) and ``audit checkpoint`` (twice: the first seal,
then an incremental one after a few hundred changes).
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import sqlalchemy as sa

from escalation.bench.common import Target, load
from escalation.bootstrap import App, core_ports_for, pause_ports_for
from escalation.domain.audit_hash import GENESIS, LEDGER_COLUMNS, row_hash
from escalation.domain.decide import decide
from escalation.domain.errors import EscalationError, InvalidInput
from escalation.domain.escalation import Status
from escalation.ports import ClaimedItem

AUDIT_COLUMNS: tuple[str, ...] = LEDGER_COLUMNS
_AUDIT_TIMES = ("due_at", "next_due_at", "regulatory_deadline", "decided_at", "recorded_at",
                "chain_created_at")
_STATE_TIMES = ("due_at", "entered_tier_at", "regulatory_deadline", "created_at", "updated_at")
_ISO = re.compile(r'"(\d{4}-\d{2}-\d{2})(T\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?(?:Z|[+-]\d{2}:\d{2}))?"')
RECENT_DAYS = 61
"""Clones created within this many days of now may be pending or paused; older ones are
finished chains (a real ledger's old months hold few open disputes)."""
KNOWN_ATTRIBUTES: dict[str, list[object]] = {
    "new_account": [False, True], "point_of_sale": [False, True],
    "foreign_initiated": [False, True], "cycle_closing_day": [15, 28, 3],
}
"""Values the bench gives the dispute attributes a ladder needs (docs/ladders.md)."""


@dataclass(frozen=True, slots=True)
class Template:
    """One chain the product made: its ledger rows and projection row, as stored."""

    rows: tuple[dict[str, Any], ...]
    state: dict[str, Any]
    details: tuple[ShiftableJson, ...] = ()
    premoved: bool = False
    """``details`` and the projection clocks are already moved (``_moved_template``)."""

    @property
    def open(self) -> bool:
        """Pending or paused (cloned only into recent months)."""
        return str(self.state["status"]) in (Status.PENDING.value, Status.PAUSED.value)


# ----------------------------------------------------------------------- templates
def _attributes(needs: Sequence[str], variant: int) -> dict[str, object] | None:
    out: dict[str, object] = {}
    for name in needs:
        values = KNOWN_ATTRIBUTES.get(name)
        if values is None:
            return None
        out[name] = values[variant % len(values)]
    return out


def make_templates(app: App, per_ladder: int = 8, seed: int = 7) -> list[uuid.UUID]:
    """Enqueue, decide, act on, pause, resolve and cancel ``per_ladder`` disputes on every
    shipped ladder (latest released version) whose attributes the bench knows, through the
    product's use cases; returns their dispute ids. Scenario ``k`` of a ladder: decisions at
    each due time (up to ``k % 4`` of them), actions on time (even ``k``) or late (odd),
    a resolution (``k % 4 == 3``), a cancel (``k == 5``), a pause (``k == 6``) or left
    pending."""
    from escalation.service_layer.enqueue import EnqueueMany, EnqueueRequest, enqueue_many

    rnd = random.Random(seed)
    now = app.scheduler.time()
    start = now - timedelta(days=80)
    made: list[uuid.UUID] = []
    for name in sorted(app.ladders.names()):
        try:
            ladder = app.ladders.latest(name)
        except EscalationError:
            continue
        for k in range(per_ladder):
            attrs = _attributes(ladder.needs, k)
            if attrs is None:
                break
            opened = start + timedelta(days=k, hours=rnd.randrange(0, 9))
            did = uuid.uuid4()
            req = EnqueueRequest(
                dispute_id=did, materiality=Decimal(rnd.choice(["125.00", "1250.00", "25000.00"])),
                source_hash=uuid.uuid4().hex[:16], ladder=name, external_id=f"TPL-{name}-{k}",
                opened_at=opened, anchor_at=opened - timedelta(days=1), attributes=attrs or None,
            )
            enqueue_many(EnqueueMany([req], "bench-intake", name, now=opened), core_ports_for(app))
            made.append(did)
            _decide_due(app, did, k % 4, now, rnd)
            _act(app, did, ladder, opened + timedelta(days=40 if k % 2 == 1 else 2, hours=3),
                 now)
            _finish(app, did, ladder, k, opened)
    if not made:
        raise InvalidInput("no shipped ladder could be used for the bench's templates")
    return made


def _decide_due(app: App, did: uuid.UUID, steps: int, now: datetime,
                rnd: random.Random) -> None:
    """Up to ``steps`` decisions, each at its due time plus a few seconds (the product's
    ``decide`` and audit store, as a worker records them)."""
    for _ in range(steps):
        got = app.store.get(did)
        if got is None or got[1] is not Status.PENDING or got[0].due_at is None:
            return
        esc = got[0]
        at = esc.due_at + timedelta(seconds=rnd.randrange(1, 90))
        if at > now - timedelta(hours=1):
            return
        token = rnd.randrange(1_000, 1_000_000)
        decision = decide(esc, app.ladders.get(esc.ladder, esc.ladder_version), at,
                          app.calendars)
        app.store.record_decisions([(ClaimedItem(esc, token, 0), decision)],
                                   f"bench-worker-{token % 3}")


def _act(app: App, did: uuid.UUID, ladder: Any, first_at: datetime, now: datetime) -> None:
    """The ladder's first actions, a day apart from ``first_at`` (two days after the dispute
    opened when on time, forty when late), those after ``now`` left out."""
    from escalation.service_layer.obligations import ObligationPorts, RecordAction, record_action

    for j, act in enumerate(ladder.actions[:3]):
        when = first_at + timedelta(days=j)
        if when > now:
            continue
        money = act.money
        try:
            record_action(RecordAction(
                dispute_id=did, action=act.id, occurred_at=when, actor="analyst.one",
                idempotency_key=f"{act.id}-{did}", amount="125.00" if money else None,
                currency="USD" if money else None),
                ObligationPorts(app.scheduler, app.store, app.ladders, app.calendars))
        except EscalationError:
            continue


def _finish(app: App, did: uuid.UUID, ladder: Any, k: int, opened: datetime) -> None:
    """Resolve (``k % 4 == 3``), cancel (``k == 5``), pause (``k == 6``) or leave pending."""
    from escalation.service_layer.cancel import cancel
    from escalation.service_layer.obligations import Resolve, resolve
    from escalation.service_layer.pause import PauseClock, pause

    if k % 4 == 3 and ladder.outcomes:
        resolve(Resolve(dispute_id=did, outcome=ladder.outcomes[0], actor="analyst.two",
                        idempotency_key=f"res-{did}",
                        occurred_at=opened + timedelta(days=45 if k % 2 else 20)),
                scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                calendars=app.calendars)
    elif k == 5:
        cancel(did, scheduler=app.scheduler, store=app.store, actor="analyst.two",
               reason="withdrawn by the cardholder")
    elif k == 6:
        pause(PauseClock(did, "analyst.one", "waiting for documents"), pause_ports_for(app))


def read_templates(engine: sa.Engine, ids: Sequence[uuid.UUID]) -> list[Template]:
    """The ledger and projection rows of ``ids`` as stored (``details`` as canonical text)."""
    cols = ", ".join(c for c in AUDIT_COLUMNS if c != "details")
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            f"SELECT {cols}, CAST(details AS text) AS details FROM escalation_audit "
            "WHERE dispute_id = ANY(:ids) ORDER BY dispute_id, seq"),
            {"ids": list(ids)}).mappings().all()
        states = {r["dispute_id"]: dict(r) for r in conn.execute(sa.text(
            "SELECT * FROM escalation_state WHERE dispute_id = ANY(:ids)"),
            {"ids": list(ids)}).mappings()}
    chains: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for r in rows:
        row = dict(r)
        row["details"] = json.loads(row["details"])
        chains.setdefault(row["dispute_id"], []).append(row)
    for d, chain in chains.items():
        if d in states:
            _rebase_unhashed(chain, states[d])
    return [Template(tuple(chains[d]), states[d],
                     tuple(ShiftableJson.of(r["details"]) for r in chains[d]))
            for d in ids if d in chains and d in states]


def _rebase_unhashed(chain: list[dict[str, Any]], state: dict[str, Any]) -> None:
    """Put a template's unhashed instants where the product would have written them had it
    recorded each row at its decision instant: the chain (and projection row) created at
    its ENQUEUED row's ``decided_at``, each row recorded at its ``decided_at`` (never before
    the previous row's). The templates were made in minutes with decision instants spread
    over weeks; without this every clone's partition (``chain_created_at``) would be the
    month after its decisions."""
    created = chain[0]["decided_at"]
    last = created
    for row in chain:
        last = max(last, row["decided_at"])
        row["recorded_at"] = last
        row["chain_created_at"] = created
    state["created_at"] = created
    state["updated_at"] = last


# -------------------------------------------------------------------------- clones
@dataclass(frozen=True, slots=True)
class _Instant:
    """One ISO date or instant inside a JSON text, and how it was written."""

    at: datetime
    date_only: bool
    fraction: int  # digits after the seconds (0: none)
    suffix: str  # "Z" or "+HH:MM"

    def moved(self, delta: timedelta) -> str:
        """The same rendering of ``at + delta``."""
        if self.date_only:
            return (self.at + timedelta(days=delta.days)).date().isoformat()
        moved = self.at + delta
        spec = _TIMESPEC.get(self.fraction, "microseconds") if (
            self.fraction or moved.microsecond) else "seconds"
        text = moved.isoformat(timespec=spec)
        return text[:-6] + "Z" if self.suffix == "Z" else text


_TIMESPEC = {3: "milliseconds", 6: "microseconds"}


def _parse_instant(m: re.Match[str]) -> _Instant:
    day, rest = m[1], m[2]
    if rest is None:
        return _Instant(datetime.fromisoformat(day).replace(tzinfo=UTC), True, 0, "")
    frac = re.search(r"\.(\d+)", rest)
    suffix = "Z" if rest.endswith("Z") else rest[-6:]
    at = datetime.fromisoformat((day + rest).replace("Z", "+00:00"))
    return _Instant(at, False, 0 if frac is None else len(frac[1]), suffix)


@dataclass(frozen=True, slots=True)
class ShiftableJson:
    """A JSON text cut around its ISO dates and instants, so a clone's text (every one of
    them moved by the same delta) is a join, not a parse."""

    parts: tuple[str, ...]
    instants: tuple[_Instant, ...]
    value: Any  # the decoded text, for a text with no instant

    @classmethod
    def of(cls, value: Any) -> ShiftableJson:
        """Cut the compact JSON text of ``value``."""
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        parts, instants, pos = [], [], 0
        for m in _ISO.finditer(text):
            parts.append(text[pos:m.start() + 1])
            instants.append(_parse_instant(m))
            pos = m.end() - 1
        parts.append(text[pos:])
        return cls(tuple(parts), tuple(instants), value)

    def text(self, delta: timedelta) -> str:
        """The JSON text with every instant moved by ``delta``."""
        if not self.instants:
            return self.parts[0]
        out = [self.parts[0]]
        for inst, part in zip(self.instants, self.parts[1:], strict=True):
            out.append(inst.moved(delta))
            out.append(part)
        return "".join(out)

    def moved(self, delta: timedelta) -> Any:
        """The decoded value with every instant moved by ``delta``."""
        return self.value if not self.instants else orjson.loads(self.text(delta))


def _shift_json(value: Any, delta: timedelta) -> Any:
    """``value`` (decoded JSON) with every ISO date or instant string moved by ``delta``."""
    return ShiftableJson.of(value).moved(delta)


def clone_chain(tpl: Template, new_id: uuid.UUID, n: int, delta: timedelta,
                ) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
    """The ledger rows (in :data:`AUDIT_COLUMNS` order) and projection row of one clone:
    ids replaced, instants moved by ``delta``, every hash recomputed (``row_hash``)."""
    zero = timedelta(0)
    ext = f"LEDGER-{n:09d}"
    trace = f"t-{new_id.hex[:16]}"
    src = new_id.hex[16:]
    prev = GENESIS
    out: list[tuple[Any, ...]] = []
    for r, details in zip(tpl.rows, tpl.details, strict=True):
        row = dict(r)
        row["dispute_id"] = new_id
        row["trace_id"] = trace
        row["source_hash"] = src
        if row["external_id"] is not None:
            row["external_id"] = ext
        for c in _AUDIT_TIMES:
            if row[c] is not None:
                row[c] = row[c] + delta
        row["details"] = details.moved(zero if tpl.premoved else delta)
        row["prev_hash"] = prev
        prev = row_hash(prev, row)
        row["row_hash"] = prev
        row["details"] = details.text(zero if tpl.premoved else delta)
        out.append(tuple(row[c] for c in AUDIT_COLUMNS))
    state = dict(tpl.state)
    state.update(dispute_id=new_id, trace_id=trace, source_hash=src, last_hash=prev)
    if state["external_id"] is not None:
        state["external_id"] = ext
    for c in _STATE_TIMES:
        if state[c] is not None:
            state[c] = state[c] + delta
    for c in ("deadlines", "obligations"):
        if state.get(c) is not None:
            moved = state[c] if tpl.premoved else _shift_json(state[c], delta)
            state[c] = json.dumps(moved, separators=(",", ":"))
    return out, state


@dataclass(frozen=True, slots=True)
class MonthTask:
    """One COPY task: ``count`` clones created in ``[start, end)``, numbered from ``first``."""

    database_url: str
    start: datetime
    end: datetime
    count: int
    first: int
    recent_from: datetime
    seed: int


_TEMPLATES: list[Template] = []  # set before the pool forks


def _psycopg_url(url: str) -> str:
    return sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _weights(templates: Sequence[Template]) -> list[float]:
    """Cumulative choice weights ``1 / rows^3``: short chains are the common case (a real
    ledger of 2M disputes held about 3.6 rows per dispute), long ones still occur."""
    out, total = [], 0.0
    for t in templates:
        total += 1.0 / len(t.rows) ** 3
        out.append(total)
    return out


def build_month(task: MonthTask) -> tuple[int, int]:
    """Clone ``task.count`` chains into one month with COPY; returns ``(disputes, rows)``.

    A clone's delta is a whole number of weeks plus a multiple of 4 hours, so clones of one
    template in one month share a few dozen deltas: their moved ``details`` are computed once
    per template and delta (the hashes never are: each row is hashed with its own ids)."""
    import psycopg

    rnd = random.Random(task.seed)
    finished = [t for t in _TEMPLATES if not t.open]
    every = list(_TEMPLATES)
    pools = ((finished, _weights(finished)), (every, _weights(every)))
    span = (task.end - task.start).total_seconds()
    rows_written = 0
    state_cols: list[str] | None = None
    cache: dict[tuple[int, int], Template] = {}
    with psycopg.connect(_psycopg_url(task.database_url)) as conn:
        conn.execute("SET synchronous_commit = off")
        done = 0
        while done < task.count:
            chunk = min(5_000, task.count - done)
            ledger: list[tuple[Any, ...]] = []
            states: list[dict[str, Any]] = []
            for i in range(chunk):
                created = task.start + timedelta(seconds=rnd.random() * span)
                group, cum = pools[created >= task.recent_from]
                tpl = rnd.choices(group, cum_weights=cum)[0]
                base = tpl.state["created_at"]
                delta = timedelta(weeks=round((created - base).total_seconds() / 604800),
                                  hours=4 * rnd.randrange(0, 6))
                if not task.start <= base + delta < task.end:
                    delta = timedelta(weeks=math.floor((created - base).total_seconds() / 604800))
                    if not task.start <= base + delta < task.end:
                        delta = timedelta(seconds=int((created - base).total_seconds()))
                key = (id(tpl), int(delta.total_seconds()))
                moved = cache.get(key)
                if moved is None:
                    moved = cache[key] = _moved_template(tpl, delta)
                rows, state = clone_chain(moved, uuid.UUID(int=rnd.getrandbits(128), version=4),
                                          task.first + done + i, delta)
                ledger.extend(rows)
                states.append(state)
            if state_cols is None:
                state_cols = list(states[0])
            with conn.cursor() as cur:
                with cur.copy(f"COPY escalation_audit ({', '.join(AUDIT_COLUMNS)}) "
                              "FROM STDIN") as copy:
                    for row in ledger:
                        copy.write_row(row)
                with cur.copy(f"COPY escalation_state ({', '.join(state_cols)}) "
                              "FROM STDIN") as copy:
                    for st in states:
                        copy.write_row([st[c] for c in state_cols])
            conn.commit()
            rows_written += len(ledger)
            done += chunk
    return task.count, rows_written


def _moved_template(tpl: Template, delta: timedelta) -> Template:
    """``tpl`` with the instants inside its ``details`` and projection clocks already moved
    by ``delta`` (columns are moved per clone by :func:`clone_chain`, with ``delta`` 0 here)."""
    details = tuple(ShiftableJson((d.text(delta),), (), d.moved(delta)) for d in tpl.details)
    state = dict(tpl.state)
    for c in ("deadlines", "obligations"):
        if state.get(c) is not None:
            state[c] = _shift_json(state[c], delta)
    return Template(tpl.rows, state, details, premoved=True)


def month_starts(now: datetime, months: int) -> list[datetime]:
    """First instants (UTC) of the ``months`` months ending with ``now``'s, oldest first."""
    first = datetime(now.year, now.month, 1, tzinfo=UTC)
    out = []
    for i in range(months - 1, -1, -1):
        index = first.year * 12 + first.month - 1 - i
        out.append(datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC))
    return out


def ensure_months(engine: sa.Engine, starts: Sequence[datetime], ahead: int = 2) -> None:
    """Create the ledger partitions of ``starts`` and ``ahead`` months after the last (the
    schema's own SQL function, as maintenance calls it)."""
    last = starts[-1]
    extra = []
    for i in range(1, ahead + 1):
        index = last.year * 12 + last.month - 1 + i
        extra.append(datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC))
    with engine.begin() as conn:
        for m in [*starts, *extra]:
            conn.execute(sa.text("SELECT escalation_audit_ensure_partition(:m)"),
                         {"m": m.date()})


@dataclass(frozen=True, slots=True)
class LedgerShape:
    """The ledger :func:`build_ledger` builds: ``disputes`` disputes over the ``months``
    months before ``now`` (aware), built by ``jobs`` processes, with random ``seed``."""

    disputes: int
    months: int
    jobs: int
    now: datetime
    seed: int = 11


def build_ledger(engine: sa.Engine, database_url: str, templates: Sequence[Template],
                 shape: LedgerShape,
                 progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Clone ``templates`` into ``shape.disputes`` disputes over ``shape.months`` months
    (oldest first, evenly), in ``shape.jobs`` processes; then ANALYZE. Returns counts and the
    build rate."""
    disputes, months, jobs, now, seed = (shape.disputes, shape.months, shape.jobs, shape.now,
                                         shape.seed)
    starts = month_starts(now, months)
    ensure_months(engine, starts)
    ends = [*starts[1:], now - timedelta(minutes=5)]
    per = [disputes // months + (1 if i < disputes % months else 0) for i in range(months)]
    recent = now - timedelta(days=RECENT_DAYS)
    tasks, first = [], 0
    for i, (s, e) in enumerate(zip(starts, ends, strict=True)):
        tasks.append(MonthTask(database_url, s, e, per[i], first, recent, seed * 1000 + i))
        first += per[i]
    _TEMPLATES[:] = list(templates)
    t0 = time.perf_counter()
    made_disputes = made_rows = 0
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(max(1, jobs)) as pool:
        for d, r in pool.imap_unordered(build_month, tasks):
            made_disputes += d
            made_rows += r
            if progress is not None:
                progress(made_disputes, disputes)
    build_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("ANALYZE escalation_audit")
        conn.exec_driver_sql("ANALYZE escalation_state")
    return {"disputes": made_disputes, "rows": made_rows, "months": months,
            "build_s": round(build_s, 1), "analyze_s": round(time.perf_counter() - t1, 1),
            "rows_per_s": round(made_rows / build_s) if build_s else None,
            "disputes_per_s": round(made_disputes / build_s) if build_s else None}


# ------------------------------------------------------------------------- figures
def ledger_figures(engine: sa.Engine) -> dict[str, Any]:
    """What the ledger holds: rows, disputes, partitions, size, statuses, events."""
    with engine.connect() as conn:
        q = conn.execute
        parts = q(sa.text(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'escalation_audit'::regclass"
        )).scalar_one()
        nonempty = q(sa.text(
            "SELECT count(DISTINCT date_trunc('month', created_at)) FROM escalation_state"
        )).scalar_one()
        size = q(sa.text("SELECT pg_database_size(current_database())")).scalar_one()
        statuses: dict[str, int] = dict(q(sa.text(
            "SELECT status, count(*) FROM escalation_state GROUP BY status")).all())
        ladders: dict[str, int] = dict(q(sa.text(
            "SELECT ladder, count(*) FROM escalation_state GROUP BY ladder")).all())
        rows = q(sa.text("SELECT sum(n_live_tup) FROM pg_stat_user_tables "
                         "WHERE relname LIKE 'escalation_audit_y%'")).scalar_one()
    return {"partitions": int(parts), "months_with_disputes": int(nonempty),
            "database_bytes": int(size), "statuses": {k: int(v) for k, v in statuses.items()},
            "ladders": {k: int(v) for k, v in ladders.items()},
            "rows_estimate": int(rows or 0)}


@dataclass
class Timed:
    """One CLI run: wall seconds, exit code, the tail of its output."""

    seconds: float
    code: int
    out: str
    max_rss_kib: int | None = None


def run_cli(database_url: str, args: Sequence[str], env: Mapping[str, str] | None = None,
            timeout_s: float = 7200) -> Timed:
    """``python -m escalation ARGS`` against ``database_url`` (a fresh interpreter, as a user
    runs it): wall time, exit code, output tail and peak RSS (``/usr/bin/time`` when present)."""
    full = {**os.environ, **(env or {}), "ESCALATION_DATABASE_URL": database_url}
    cmd = [sys.executable, "-P", "-m", "escalation", *args]
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        wrapped = (["/usr/bin/time", "-f", "%M", "-o", rss.name, *cmd]
                   if Path("/usr/bin/time").exists() else cmd)
        t0 = time.perf_counter()
        proc = subprocess.run(  # noqa: S603 - this interpreter, fixed args
            wrapped, env=full, capture_output=True, text=True, timeout=timeout_s, check=False)
        seconds = time.perf_counter() - t0
        kib = None
        try:
            kib = int(Path(rss.name).read_text().strip().splitlines()[-1])
        except (OSError, ValueError, IndexError):
            kib = None
    out = (proc.stdout + proc.stderr)[-600:]
    return Timed(round(seconds, 2), proc.returncode, out, kib)


def _sample(engine: sa.Engine) -> tuple[str, str, str]:
    """A cloned dispute of the newest whole month (the one before this one): its UUID and
    external id, and that month."""
    with engine.connect() as conn:
        did, ext, created = conn.execute(sa.text(
            "SELECT dispute_id, external_id, created_at FROM escalation_state "
            "WHERE external_id LIKE 'LEDGER-%' AND created_at < date_trunc('month', now()) "
            "ORDER BY created_at DESC LIMIT 1")).one()
    return str(did), str(ext), f"{created:%Y-%m}"


def _bump(engine: sa.Engine, app: App, changes: int) -> int:
    """Append ``changes`` PAUSED/RESUMED-free decisions: cancel ``changes`` pending clones
    through the product's audit store (a change of that many chains since the checkpoint)."""
    with engine.connect() as conn:
        ids = list(conn.execute(sa.text(
            "SELECT dispute_id FROM escalation_state WHERE status = 'pending' "
            "AND external_id LIKE 'LEDGER-%' LIMIT :n"), {"n": changes}).scalars())
    at = app.scheduler.time()
    for did in ids:
        app.store.record_cancel(did, "bench-operator", at, "bench: a change before the seal")
    return len(ids)


def time_audit(tgt: Target, app: App, key_env: Mapping[str, str], changes: int,
               skip_verify: bool = False) -> dict[str, Any]:
    """Time the audit answers on the built ledger (each a fresh CLI process)."""
    engine = tgt.engine()
    try:
        did, ext, month = _sample(engine)
        total_rows = ledger_figures(engine)["rows_estimate"]
        out: dict[str, Any] = {"sample_dispute": did, "sample_external_id": ext, "month": month}
        url = tgt.database_url
        first = datetime.strptime(month, "%Y-%m").replace(tzinfo=UTC)
        nxt = (first + timedelta(days=32)).replace(day=1)
        runs: dict[str, list[str]] = {
            "startup": ["--version"],
            "show_uuid": ["audit", "show", did],
            "show_external_id": ["audit", "show", ext],
            "search_dispute": ["audit", "search", "--dispute", did],
            "search_month_tier": ["audit", "search", "--tier", "senior", "--from",
                                  first.isoformat(), "--to", nxt.isoformat(), "--limit", "100"],
        }
        for name, args in runs.items():
            res = run_cli(url, args, key_env)
            out[name] = {"s": res.seconds, "exit": res.code, "rss_kib": res.max_rss_kib}
        with tempfile.TemporaryDirectory() as tmp:
            res = run_cli(url, ["audit", "export", "--from", first.isoformat(), "--to",
                                nxt.isoformat(), "--out", str(Path(tmp) / "m.csv")], key_env)
            size = sum(p.stat().st_size for p in Path(tmp).iterdir())
            out["export_month"] = {"s": res.seconds, "exit": res.code,
                                   "rss_kib": res.max_rss_kib, "bytes": size}
        if not skip_verify:
            res = run_cli(url, ["audit", "verify", "--all", "--json"], key_env)
            out["verify_all"] = {"s": res.seconds, "exit": res.code, "rss_kib": res.max_rss_kib,
                                 "rows_per_s": round(total_rows / res.seconds)
                                 if res.seconds else None, "tail": res.out[-300:]}
        res = run_cli(url, ["audit", "checkpoint"], key_env)
        out["checkpoint_first"] = {"s": res.seconds, "exit": res.code,
                                   "rss_kib": res.max_rss_kib, "tail": res.out[-300:]}
        changed = _bump(engine, app, changes)
        res = run_cli(url, ["audit", "checkpoint"], key_env)
        out["checkpoint_incremental"] = {"s": res.seconds, "exit": res.code, "changed": changed,
                                         "rss_kib": res.max_rss_kib, "tail": res.out[-300:]}
        return out
    finally:
        engine.dispose()


def keygen(dirpath: Path) -> dict[str, str]:
    """A checkpoint signing key pair for the bench (``audit keygen``); the environment that
    points the CLI at it."""
    priv, pub = dirpath / "bench.key", dirpath / "bench.pub"
    if not priv.exists():
        subprocess.run([sys.executable, "-P", "-m", "escalation", "audit", "keygen",  # noqa: S603
                        "--private-out", str(priv), "--public-out", str(pub)],
                       check=True, capture_output=True)
    return {"ESCALATION_CHECKPOINT_KEY_FILE": str(priv),
            "ESCALATION_CHECKPOINT_PUBLIC_KEY_FILE": str(pub)}


@dataclass(frozen=True, slots=True)
class LedgerRound:
    """A ledger build and its audit timings (the command of :func:`run`): ``disputes``
    disputes over ``months`` months by ``jobs`` processes (each >= 1); ``changes``: disputes
    changed before the incremental checkpoint is timed; ``key_dir``: where the signing key
    is made (None: a temporary directory); ``skip_verify``: leave ``audit verify --all`` out;
    ``time_it``: time the audit answers (False: build only)."""

    disputes: int
    months: int
    jobs: int
    changes: int = 500
    key_dir: Path | None = None
    skip_verify: bool = False
    time_it: bool = True


def run(tgt: Target, cmd: LedgerRound) -> dict[str, Any]:
    """Build the ledger on ``tgt``'s database and (``cmd.time_it``) time the audit answers.
    Raises InvalidInput when a count is not positive."""
    disputes, months, jobs, changes = cmd.disputes, cmd.months, cmd.jobs, cmd.changes
    key_dir, skip_verify, time_it = cmd.key_dir, cmd.skip_verify, cmd.time_it
    if disputes < 1 or months < 1 or jobs < 1:
        raise InvalidInput("--disputes, --months and --jobs must be positive")
    app = tgt.app()
    result: dict[str, Any] = {"scenario": "ledger", "load_before": load(),
                              "database_url": tgt.database_url}
    t0 = time.perf_counter()
    ids = make_templates(app)
    engine = tgt.engine()
    try:
        templates = read_templates(engine, ids)
        result["templates"] = len(templates)
        result["template_s"] = round(time.perf_counter() - t0, 1)
        now = app.scheduler.time()
        result["build"] = build_ledger(engine, tgt.database_url, templates,
                                       LedgerShape(disputes, months, jobs, now))
        result["ledger"] = ledger_figures(engine)
    finally:
        engine.dispose()
    result["load_after_build"] = load()
    if time_it:
        kd = key_dir or Path(tempfile.mkdtemp(prefix="escalation-bench-key-"))
        result["audit"] = time_audit(tgt, app, keygen(kd), changes, skip_verify)
    result["load"] = load()
    return result
