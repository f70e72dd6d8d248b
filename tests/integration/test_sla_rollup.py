"""The SLA rollup (ADR 0033) against a full recount from the ledger, on real Redis and
PostgreSQL: after a random mix of enqueues, decisions, cancels, pauses and resumes, ladder
migrations, recorded actions and resolutions, each followed by an incremental refresh, the
report from the rollup equals ``sla_report.build`` (the full recount) for several windows,
figure by figure, and so do the deadline lists (every deadline, and the missed ones)."""

from __future__ import annotations

import json
import random
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from escalation.adapters.console_queries import PostgresConsoleQueries, PostgresRolledDeadlines
from escalation.adapters.report_queries import PostgresReports
from escalation.adapters.sla_rollup import HOUR_BUCKET_UPPERS_S, PostgresSlaRollup
from escalation.domain.errors import EscalationError
from escalation.ports import ClockFilter, DeadlineList
from escalation.service_layer import deadline_outcomes as dl
from escalation.service_layer import sla_report, sla_rollup
from escalation.service_layer.cancel import cancel
from escalation.service_layer.core import CorePorts
from escalation.service_layer.enqueue import EnqueueRequest
from escalation.service_layer.fire import FireDue, fire_due
from escalation.service_layer.obligations import (
    ObligationPorts,
    RecordAction,
    Resolve,
    record_action,
    resolve,
)
from escalation.service_layer.pause import PauseClock, PausePorts, ResumeClock, pause, resume
from tests.e2e.helpers import due_requests, enqueue
from tests.helpers import run_cli
from tests.integration import reliability_support
from tests.integration.ladder_support import MigEnv, hours

# The random mix compares every deadline of the database, page by page (each sort, 4 rows a
# page): on the session's shared database that grows with whatever other tests wrote before
# (seen: over 600 s), so it runs on a database of its own.
own_database_url = reliability_support.own_database_url  # fixtures
own_app = reliability_support.own_app

REG_E = "reg_e_error_resolution"
REG_E_ATTRS = {"new_account": False, "point_of_sale": False, "foreign_initiated": False}


def _figures(report: sla_report.SlaReport) -> dict[tuple[str, str], dict[str, Any]]:
    """The report's rows by (ladder, tier), without all-zero rows (the full recount lists
    the tier of a stay that ended outside the window at zero; the rollup lists a tier only
    with a figure in the window)."""
    out = {}
    for f in report.tiers:
        row = f.as_row()
        if any(v not in (0, "") for k, v in row.items() if k not in ("ladder", "tier")):
            out[(f.ladder, f.tier)] = row
    return out


def _differences(rolled: dict[Any, dict[str, Any]],
                 full: dict[Any, dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    """Per (ladder, tier), the figures that differ: {field: (rollup, recount)}."""
    out: dict[Any, dict[str, Any]] = {}
    for key in sorted(set(rolled) | set(full)):
        a, b = rolled.get(key, {}), full.get(key, {})
        fields = {f: (a.get(f), b.get(f)) for f in sorted(set(a) | set(b))
                  if a.get(f) != b.get(f)}
        if fields:
            out[key] = fields
    return out


def _listed(items: Any) -> list[tuple[str, str, str]]:
    return [(o.dispute_id, o.name, o.status) for o in items]


def _mix(app: Any, env: MigEnv, rng: random.Random) -> None:
    """One random step on the test's disputes."""
    kw = {"scheduler": app.scheduler, "store": app.store, "ladders": app.ladders,
          "calendars": app.calendars}
    now = app.scheduler.time()
    step = rng.choice(["enqueue", "reg_e", "fire", "cancel", "pause", "resume", "action",
                       "resolve", "migdemo"])
    with app.engine.connect() as conn:
        pending = [r[0] for r in conn.execute(sa.text(
            "SELECT dispute_id FROM escalation_state WHERE status IN ('pending', 'paused') "
            "ORDER BY dispute_id"))]
    if step == "enqueue":
        tier = rng.choice(["standard", "senior", "compliance"])
        enqueue(app, due_requests(rng.randint(1, 4), now, tier=tier,
                                  past_s=rng.choice([5.0, -3600.0, 86_400.0])))
    elif step == "reg_e":
        back = timedelta(days=rng.choice([1, 12, 50, 70]))
        enqueue(app, [EnqueueRequest(uuid.uuid4(), "125.00", "ab" * 32,
                                     opened_at=now - back, anchor_at=now - back,
                                     ladder=REG_E, attributes=REG_E_ATTRS)])
    elif step == "fire":
        fire_due(FireDue(batch_size=100, lease_ms=30_000, worker_id="w"),
                 CorePorts(app.scheduler, app.store, app.ladders, app.calendars))
    elif step == "migdemo":
        env.enqueue("standard", due_at=now + hours(rng.choice([-2, 3])), n=2)
    elif pending:
        did = rng.choice(pending)
        try:
            if step == "cancel":
                cancel(did, scheduler=app.scheduler, store=app.store, actor="t", reason="r")
            elif step == "pause":
                pause(PauseClock(did, "t", "wait"), PausePorts(**kw))
            elif step == "resume":
                resume(ResumeClock(did, "t"), PausePorts(**kw))
            elif step == "action":
                record_action(RecordAction(did, "provisional_credit",
                                           now - timedelta(days=rng.choice([0, 3, 20])),
                                           "ops", f"k-{uuid.uuid4().hex[:8]}",
                                           amount="125.00", currency="USD"), ObligationPorts(**kw))
            elif step == "resolve":
                resolve(Resolve(did, "error_corrected", "ops", f"r-{uuid.uuid4().hex[:8]}"),
                        **kw)
        except EscalationError:
            pass  # not applicable to that dispute (not paused, no such action, ...): skipped


@pytest.mark.parametrize("seed", [7, 2026])
def test_the_rollup_equals_a_full_recount_after_a_random_mix(
    own_app: Any, tmp_path: Path, seed: int,
) -> None:
    app = own_app
    rng = random.Random(seed)
    env = MigEnv.make(app, tmp_path)
    store, reports = PostgresSlaRollup(app.engine), PostgresReports(app.engine)
    lookup = app.ladders.get
    ports = sla_rollup.RollupPorts(store, app.calendars, lookup)
    sla_rollup.refresh(sla_rollup.RefreshRollup(), ports)  # first: full
    for i in range(40):
        _mix(app, env, rng)
        if i == 20:  # a ladder migration of the migdemo escalations (LADDER_MIGRATED rows)
            env.add("inserted")
            env.apply(env.plan().plan_hash)
        if i % 3 == 0:
            assert not sla_rollup.refresh(sla_rollup.RefreshRollup(), ports).full
    now = app.scheduler.time()
    windows = [(now - timedelta(days=100), now + timedelta(days=100)),
               (now - timedelta(days=60), now - timedelta(days=5)),
               (now - timedelta(hours=2), now + timedelta(hours=1)),
               (now - timedelta(days=3), now + timedelta(days=40))]
    for since, until in windows:
        rolled, at = sla_rollup.report(sla_rollup.RollupReport(since, until), ports)
        full = sla_report.build(sla_report.ReportSla(since, until, now=at), reports, app.calendars,
                                lookup)
        assert _figures(rolled) == _figures(full), (since, until, _differences(
            _figures(rolled), _figures(full)))
        every = list(sla_rollup.deadlines(
            sla_rollup.RollupDeadlines(since, until, at, missed_only=False, page=7), ports))
        assert _listed(every) == _listed(full.deadlines)
        missed = list(sla_rollup.deadlines(
            sla_rollup.RollupDeadlines(since, until, at, missed_only=True, page=3), ports))
        assert _listed(missed) == _listed(full.missed)
    assert any(_figures(full).values())  # the mix produced figures to compare
    _hour_counts_equal_the_rows(app.engine, store, now)
    _console_lists_equal_the_recount(app, store)


_UPPERS = "ARRAY[3600, 14400, 86400, 172800, 432000, 864000]::float8[]"
_ROW_OUTCOMES = sa.text(
    """
    SELECT width_bucket(at, CAST(:bounds AS timestamptz[])) - 1 AS span, ladder, tier, name,
           count(*) FILTER (WHERE kind = 'resolved' AND duration_s IS NOT NULL) AS achieved,
           count(*) FILTER (WHERE kind IN ('on_time', 'late')) AS breached,
           count(*) FILTER (WHERE state = 'met') AS met,
           count(*) FILTER (WHERE state = 'missed') AS missed
      FROM sla_rollup
     WHERE at >= :since AND at < :until AND kind <> 'entered'
     GROUP BY span, ladder, tier, name
    """
)
"""The trend's counts straight from the rollup rows: what the hour counts must add up to."""


def _hour_counts_equal_the_rows(engine: sa.Engine, store: PostgresSlaRollup,
                                now: Any) -> None:
    """``sla_rollup_hours``, kept by every replace of the mix, equals a recount of the
    rollup rows per hour; and the trend and the time-in-tier counts summed from it (whole
    hours, plus the rows of the edges and of the hours a span bound cuts) equal the same
    counts taken from the rows."""
    with engine.connect() as conn:
        kept = set(conn.execute(sa.text(
            "SELECT hour, ladder, tier, kind, state, name, bucket, n FROM sla_rollup_hours "
            "WHERE n <> 0")).all())
        recount = set(conn.execute(sa.text(
            "SELECT date_trunc('hour', at, 'UTC'), ladder, tier, kind, COALESCE(state, ''), "
            f"COALESCE(name, ''), COALESCE(width_bucket(duration_s, {_UPPERS}), -1), "
            "count(*) FROM sla_rollup GROUP BY 1, 2, 3, 4, 5, 6, 7")).all())
    assert kept == recount and kept
    uppers = [float(u) for u in HOUR_BUCKET_UPPERS_S]  # the counted buckets
    # bounds off the hour (a span bound cuts an hour), on the hour, and a window inside one
    for bounds in ([now - timedelta(days=80, minutes=7), now - timedelta(days=30),
                    now - timedelta(days=2, minutes=31), now + timedelta(days=30)],
                   [now.replace(minute=0, second=0, microsecond=0) - timedelta(days=d)
                    for d in (60, 20, 0)],
                   [now - timedelta(minutes=20), now - timedelta(minutes=1)]):
        with engine.connect() as conn:
            rows = {(r.span, r.ladder, r.tier, r.name, r.achieved, r.breached, r.met, r.missed)
                    for r in conn.execute(_ROW_OUTCOMES, {
                        "bounds": bounds, "since": bounds[0], "until": bounds[-1]})
                    if r.achieved or r.breached or r.met or r.missed}
            stays = {(r[0], r[1], int(r[2]), int(r[3])) for r in conn.execute(sa.text(
                "SELECT ladder, tier, width_bucket(duration_s, CAST(:u AS float8[])), "
                "count(*) FROM sla_rollup WHERE at >= :s AND at < :e AND duration_s IS NOT "
                "NULL GROUP BY 1, 2, 3"), {"u": uppers, "s": bounds[0], "e": bounds[-1]})}
        summed = {(o["span"], o["ladder"], o["tier"], o["name"], o["achieved"], o["breached"],
                   o["met"], o["missed"]) for o in store.outcomes(bounds)
                  if o["achieved"] or o["breached"] or o["met"] or o["missed"]}
        assert summed == rows, bounds
        assert set(store.durations(bounds[0], bounds[-1], uppers)) == stays, bounds


def _keyed(rows: Any) -> list[tuple[Any, ...]]:
    return [(o.dispute_id, o.name, o.status, o.deadline, o.late_s, o.late_business_days,
             o.action, o.basis, o.tier) for o in rows]


def _console_lists_equal_the_recount(app: Any, store: PostgresSlaRollup) -> None:
    """The console's lists and counts from the rollup's deadline rows (docs/adr/0037) equal
    the whole-ledger computation (every dispute's outcomes, filtered and sorted in Python),
    for every state (and the open misses), ladder, period, sort and direction, paged."""
    lookup, cals = app.ladders.get, app.calendars
    kw = {"scheduler": app.scheduler, "store": app.store, "ladders": app.ladders,
          "calendars": app.calendars}
    now = app.scheduler.time()
    for back in (1, 50):  # resolved now: deadlines met, and missed with a known lateness
        did = uuid.uuid4()
        enqueue(app, [EnqueueRequest(did, "125.00", "ab" * 32, opened_at=now - timedelta(
            days=back), anchor_at=now - timedelta(days=back), ladder=REG_E,
            attributes=REG_E_ATTRS)])
        resolve(Resolve(did, "error_corrected", "ops", f"r-{did.hex[:8]}"), **kw)
    # and one left open 70 days: its deadlines are missed and still open, whatever the mix
    # (a random walk of steps that depends on timing) happened to leave
    enqueue(app, [EnqueueRequest(uuid.uuid4(), "125.00", "ab" * 32,
                                 opened_at=now - timedelta(days=70),
                                 anchor_at=now - timedelta(days=70), ladder=REG_E,
                                 attributes=REG_E_ATTRS)])
    q, rolled = PostgresConsoleQueries(app.engine), PostgresRolledDeadlines(app.engine)
    at = sla_rollup.served_refresh(sla_rollup.RollupPorts(store, cals, lookup))
    src = dl.DeadlineSources(q, lookup, cals)
    whole = [o for o in dl.deadline_outcomes(src, now=at) if o.deadline]
    assert any(o.open_miss for o in whole) and any(o.status == "met" for o in whole)
    assert any(o.status == "missed" and not o.open_miss and o.late_s for o in whole)
    since, until = at - timedelta(days=20), at + timedelta(days=20)
    ladders = sorted({o.ladder for o in whole})
    for state in [None, *dl.STATUSES, "open_miss"]:
        for ladder, lo, hi in [(None, None, None), (ladders[0], None, None),
                               (None, since, until)]:
            want = [o for o in whole if (state is None or dl._keep(o, state))
                    and (ladder is None or o.ladder == ladder)
                    and (lo is None or lo <= o.deadline) and (hi is None or o.deadline < hi)]
            flt = ClockFilter(lo, hi, ladder, None, state)
            assert rolled.count(flt) == len(want), (state, ladder, lo)
            for desc in (False, True):
                rows, after = [], None
                while True:
                    page = dl.rolled_page(src, rolled, DeadlineList(flt, at, descending=desc),
                                          after, 3)
                    rows += page.rows
                    if page.next_key is None:
                        break
                    after = page.next_key
                assert _keyed(rows) == _keyed(dl.select(want, dl.Selection(
                    sort="deadline_at", descending=desc))), (state, desc)
                csv_rows = dl.rolled_walk(src, rolled, DeadlineList(flt, at, descending=desc),
                                          None, (3, 4))  # 3 keys, then 4 at a time
                assert _keyed(csv_rows) == _keyed(rows)
                for sort in [k for k in dl.SORT_KEYS if k != "deadline_at"]:
                    got = [o for off in range(0, len(want) + 1, 4) for o in dl.rolled_sorted(
                        src, rolled, DeadlineList(flt, at, sort, desc), off, 4)]
                    assert _keyed(got) == _keyed(dl.select(want, dl.Selection(
                        sort=sort, descending=desc)))
    for lo, hi in [(None, None), (since, until), (at - timedelta(days=3), at)]:
        inside = [o for o in whole if (lo is None or lo <= o.deadline)
                  and (hi is None or o.deadline < hi)]
        assert dl.rolled_counts(rolled, lo, hi) == {
            s: sum(o.status == s for o in inside) for s in dl.STATUSES}


class _Interrupted(BaseException):
    """Stands for a KeyboardInterrupt or a killed process in the middle of a backfill."""


class _StopsAfter(PostgresSlaRollup):
    """The PostgreSQL rollup, interrupted when a backfill goes to commit its chunk number
    ``stop`` (counting from 1); records the disputes each backfill chunk covered."""

    def __init__(self, engine: sa.Engine, stop: int | None) -> None:
        super().__init__(engine)
        self.stop = stop
        self.chunks: list[list[uuid.UUID]] = []

    def replace(self, ids: Any, rows: Any, backfill_after: uuid.UUID | None = None) -> None:
        if backfill_after is not None:
            if self.stop is not None and len(self.chunks) + 1 == self.stop:
                raise _Interrupted
            self.chunks.append(list(ids))
        super().replace(ids, rows, backfill_after)


def test_an_interrupted_backfill_keeps_its_chunks_and_the_next_refresh_continues(
    app: Any, tmp_path: Path,
) -> None:
    rng = random.Random(33)
    env = MigEnv.make(app, tmp_path)
    lookup = app.ladders.get
    for _ in range(25):
        _mix(app, env, rng)
    with app.engine.connect() as conn:
        every = [r[0] for r in conn.execute(sa.text(
            "SELECT dispute_id FROM escalation_state ORDER BY dispute_id"))]
    assert len(every) > 6
    first = _StopsAfter(app.engine, stop=2)
    with pytest.raises(_Interrupted):
        sla_rollup.refresh(sla_rollup.RefreshRollup(chunk=3, full=True),
                           sla_rollup.RollupPorts(first, app.calendars, lookup))
    assert first.chunks == [every[:3]]  # the first chunk committed, then the interruption
    state = first.state()
    assert state is not None and state[3] == every[2]  # its resume point, committed with it
    with app.engine.connect() as conn:
        kept = {r[0] for r in conn.execute(sa.text("SELECT dispute_id FROM sla_rollup"))}
    assert kept and kept <= set(every[:3])

    second = _StopsAfter(app.engine, stop=None)
    ports = sla_rollup.RollupPorts(second, app.calendars, lookup)
    done = sla_rollup.refresh(sla_rollup.RefreshRollup(chunk=3), ports)
    assert done.full  # it finished the backfill ...
    assert [d for c in second.chunks for d in c] == every[3:]  # ... after the kept chunk
    state = second.state()
    assert state is not None and state[3] is None
    assert not sla_rollup.refresh(sla_rollup.RefreshRollup(), ports).full

    reports = PostgresReports(app.engine)
    now = app.scheduler.time()
    # the backfill's chunks left the hour counts alone; its end recounted them
    _hour_counts_equal_the_rows(app.engine, second, now)
    for since, until in [(now - timedelta(days=100), now + timedelta(days=100)),
                         (now - timedelta(days=3), now + timedelta(days=40))]:
        rolled, at = sla_rollup.report(sla_rollup.RollupReport(since, until), ports)
        full = sla_report.build(sla_report.ReportSla(since, until, now=at), reports, app.calendars,
                                lookup)
        assert _figures(rolled) == _figures(full), (since, until)
        listed = list(sla_rollup.deadlines(sla_rollup.RollupDeadlines(since, until, at),
                                           ports))
        assert _listed(listed) == _listed(full.deadlines)
    assert any(_figures(full).values())


def test_report_sla_refresh_backfills_then_refreshes_incrementally(
    app: Any, cli_env: dict[str, str],
) -> None:
    enqueue(app, due_requests(3, app.scheduler.time(), tier="standard", past_s=-3600.0))
    first = run_cli(cli_env, "report", "sla-refresh", "--full", "--json")
    assert first.returncode == 0, first.stderr
    done = json.loads(first.stdout)
    with app.engine.connect() as conn:
        disputes = conn.execute(sa.text("SELECT count(*) FROM escalation_state")).scalar_one()
        rolled = conn.execute(sa.text("SELECT count(*) FROM sla_rollup")).scalar_one()
    assert done["full"] is True and done["disputes"] >= disputes >= 3 and rolled >= 3
    again = run_cli(cli_env, "report", "sla-refresh", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["full"] is False
