"""``GET /v1/reports/sla`` answers from the SLA rollup (ADR 0033), on a real server: a 503
problem naming what to run while the rollup is not backfilled (nothing written), then,
after a mix of decisions made after the backfill, the figures of a full recount from the
ledger and of ``escalation report sla --json``, window by window."""

from __future__ import annotations

import json
import random
import uuid
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from escalation.adapters.report_queries import PostgresReports
from escalation.adapters.sla_rollup import PostgresSlaRollup
from escalation.domain.errors import EscalationError
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

REG_E = "reg_e_error_resolution"
REG_E_ATTRS = {"new_account": False, "point_of_sale": False, "foreign_initiated": False}


def _rows(ladders: dict[str, list[dict[str, Any]]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The JSON rows by (ladder, tier), without all-zero rows (the full recount also lists,
    at zero, the tier of a stay that ended outside the window; the rollup does not)."""
    out = {}
    for ladder, rows in ladders.items():
        for row in rows:
            if any(v not in (0, None) for k, v in row.items() if k not in ("ladder", "tier")):
                out[(ladder, row["tier"])] = row
    return out


def _step(app: Any, rng: random.Random) -> None:
    """One random decision on the test's disputes (the shipped ladders only: the server
    reads the same ladder directory)."""
    kw = {"scheduler": app.scheduler, "store": app.store, "ladders": app.ladders,
          "calendars": app.calendars}
    now = app.scheduler.time()
    step = rng.choice(["enqueue", "reg_e", "fire", "fire", "cancel", "pause", "resume",
                       "action", "resolve"])
    with app.engine.connect() as conn:
        pending = [r[0] for r in conn.execute(sa.text(
            "SELECT dispute_id FROM escalation_state WHERE status IN ('pending', 'paused') "
            "ORDER BY dispute_id"))]
    if step == "enqueue":
        enqueue(app, due_requests(rng.randint(1, 4), now,
                                  tier=rng.choice(["standard", "senior", "compliance"]),
                                  past_s=rng.choice([5.0, -3600.0, 86_400.0])))
    elif step == "reg_e":
        back = timedelta(days=rng.choice([1, 12, 50, 70]))
        enqueue(app, [EnqueueRequest(uuid.uuid4(), "125.00", "ab" * 32, opened_at=now - back,
                                     anchor_at=now - back, ladder=REG_E,
                                     attributes=REG_E_ATTRS)])
    elif step == "fire":
        fire_due(FireDue(batch_size=100, lease_ms=30_000, worker_id="w"),
                 CorePorts(app.scheduler, app.store, app.ladders, app.calendars))
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


def test_the_api_reports_from_the_rollup_with_the_recount_s_and_the_cli_s_figures(
    app: Any, api_server: Any, compliance: Any, cli_env: dict[str, str],
) -> None:
    store = PostgresSlaRollup(app.engine)
    now = app.scheduler.time()
    whole = {"from": (now - timedelta(days=100)).isoformat(),
             "to": (now + timedelta(days=100)).isoformat()}
    for _ in range(8):  # something in the ledger before the backfill
        _step(app, random.Random(5))
    with app.engine.begin() as conn:  # as on a database where no refresh ever ran
        conn.execute(sa.text("DELETE FROM sla_rollup_state"))
    try:
        r = compliance.get("/v1/reports/sla", params=whole)
        assert r.status_code == 503, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        doc = r.json()
        assert doc["code"] == "sla_rollup_not_backfilled", doc
        assert doc["action"] == "escalation report sla-refresh"
        assert "escalation report sla-refresh" in doc["detail"], doc
        assert "Retry-After" in r.headers
        assert store.state() is None  # the request did not start a backfill
    finally:
        assert sla_rollup.refresh(sla_rollup.RefreshRollup(), sla_rollup.RollupPorts(
            store, app.calendars, app.ladders.get)).full  # the backfill
    rng = random.Random(20261207)
    for i in range(36):  # decisions after the backfill: the API's refresh must see them
        _step(app, rng)
        if i == 18:  # one API read in between: the next one refreshes from its watermark
            assert compliance.get("/v1/reports/sla", params=whole).status_code == 200
    reports = PostgresReports(app.engine)
    now = app.scheduler.time()
    compared = 0
    for since, until in [(now - timedelta(days=100), now + timedelta(days=100)),
                         (now - timedelta(days=60), now - timedelta(days=5)),
                         (now - timedelta(hours=2), now + timedelta(hours=1)),
                         (now - timedelta(days=3), now + timedelta(days=40))]:
        params = {"from": since.isoformat(), "to": until.isoformat()}
        r = compliance.get("/v1/reports/sla", params=params)
        assert r.status_code == 200, r.text
        api = _rows(r.json()["ladders"])
        state = store.state()
        assert state is not None
        recount = sla_report.build(sla_report.ReportSla(since, until, now=state[1]), reports,
                                   app.calendars, app.ladders.get)
        assert api == _rows(sla_report.grouped(recount)), (since, until)
        cli = run_cli(cli_env, "report", "sla", "--from", params["from"], "--to",
                      params["to"], "--json")
        assert cli.returncode == 0, cli.stderr
        cli_doc = json.loads(cli.stdout)
        assert _rows(cli_doc["ladders"]) == api, (since, until)
        # the same document: the CLI adds only its deadlines list
        assert {k: v for k, v in cli_doc.items() if k != "deadlines"} == r.json()
        compared += len(api)
    assert compared  # the mix produced figures to compare
    # another grace is the full recount, as report sla --grace-s
    r = compliance.get("/v1/reports/sla", params={**whole, "grace_s": 61})
    assert r.status_code == 200, r.text
