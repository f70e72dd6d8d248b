"""The projection (``escalation_state``) against the ledger on real PostgreSQL and Redis.

The application role ``escalation_app`` may UPDATE the projection (the application writes
it): a tier, due time, deadline, obligation or status edited that way is reported by
``audit verify`` and by ``reconcile`` with the column's name and both values, the edited
dispute is left out of reconcile's Redis repair, and ``reconcile --repair-projection`` sets
the row from its ledger. A clean ledger passes all of them.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from escalation.adapters.checkpoints import PostgresCheckpoints
from escalation.bootstrap import projection_ledger_for
from escalation.service_layer.checkpoint import verify
from escalation.service_layer.core import CorePorts
from escalation.service_layer.enqueue import EnqueueOne, EnqueueRequest, enqueue_on_breach
from escalation.service_layer.obligations import ObligationPorts, RecordAction, record_action
from escalation.service_layer.reconcile import DiffKind, FullReconcile, ReconcilePorts, reconcile
from tests.helpers import run_cli
from tests.integration import reliability_support as support
from tests.integration.reliability_support import reliability_redis

own_database_url = support.own_database_url  # fixtures
own_app = support.own_app

REG_E = "reg_e_error_resolution"
NO = {"new_account": False, "point_of_sale": False, "foreign_initiated": False}


def _kw(app: Any) -> dict[str, Any]:
    return {"scheduler": app.scheduler, "store": app.store, "ladders": app.ladders,
            "calendars": app.calendars}


def _dispute(app: Any, *, act: bool = True) -> uuid.UUID:
    """A Reg E dispute in the senior tier, opened two days ago (regulatory deadlines), with
    a provisional credit on record (obligations) when ``act``."""
    did = uuid.uuid4()
    now = app.scheduler.time()
    anchor = now - timedelta(days=2)
    enqueue_on_breach(EnqueueOne(
        EnqueueRequest(dispute_id=did, materiality="125.00",
                       source_hash=hashlib.sha256(did.bytes).hexdigest(), tier="senior",
                       opened_at=anchor, anchor_at=anchor, ladder=REG_E,
                       timezone="America/New_York", calendar="us_federal_reserve",
                       attributes=NO),
        "svc", REG_E), CorePorts(**_kw(app)))
    if act:
        record_action(RecordAction(did, "provisional_credit", now - timedelta(hours=1),
                                   "ops.alice", f"pc-{did}", amount="125.00", currency="USD"),
                      ObligationPorts(**_kw(app)))
    return did


def _as_app(app: Any, sql: str, did: uuid.UUID) -> None:
    with app.engine.connect() as conn, conn.begin():
        conn.execute(sa.text("SET LOCAL ROLE escalation_app"))
        conn.execute(sa.text(sql), {"d": did})


def _reconcile(app: Any, *, dry_run: bool = True, repair: bool = False) -> Any:
    return reconcile(FullReconcile(dry_run, repair_projection=repair),
                     ReconcilePorts(app.scheduler, app.store, reliability_redis(app),
                                    projection_ledger_for(app)))


def _cli_env(app: Any, database_url: str, redis_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env.update(ESCALATION_REDIS_URL=redis_url, ESCALATION_DATABASE_URL=database_url,
               ESCALATION_NAMESPACE=app.settings.namespace, ESCALATION_LOG_FORMAT="json")
    return env


def test_a_clean_ledger_passes_verify_and_reconcile(own_app: Any) -> None:
    ids = [_dispute(own_app), _dispute(own_app, act=False)]
    report = verify(PostgresCheckpoints(own_app.engine))
    assert report.ok, report
    assert report.projection_mismatches == []
    rep = _reconcile(own_app, dry_run=False)
    assert rep.count(DiffKind.PROJECTION) == 0 and not rep.errors
    assert {m for m, _ in own_app.scheduler.pending_members(0)} == {str(d) for d in ids}


TAMPERING = [
    ("UPDATE escalation_state SET tier = 'compliance' WHERE dispute_id = :d",
     ["tier (projection 'compliance', ledger 'senior')"]),
    ("UPDATE escalation_state SET due_at = due_at + interval '30 days' WHERE dispute_id = :d",
     ["due_at (projection "]),
    ("UPDATE escalation_state SET deadlines = '[]' WHERE dispute_id = :d",
     ["deadlines (projection {}, ledger {"]),
    ("UPDATE escalation_state SET obligations = '[]' WHERE dispute_id = :d",
     ["obligations (projection {}, ledger {"]),
    ("UPDATE escalation_state SET status = 'cancelled', due_at = NULL WHERE dispute_id = :d",
     ["status (projection 'cancelled', ledger 'pending')", "due_at (projection none, "]),
    ("UPDATE escalation_state SET status = 'paused', due_at = NULL, remaining_ms = 1000 "
     "WHERE dispute_id = :d",
     ["status (projection 'paused', ledger 'pending')", "due_at (projection none, "]),
]


@pytest.mark.parametrize(("sql", "expected"), TAMPERING,
                         ids=["tier", "due_at", "deadlines", "obligations", "status-cancelled",
                              "status-paused"])
def test_a_projection_edit_as_the_application_role_is_reported_by_column(
    own_app: Any, sql: str, expected: list[str],
) -> None:
    victim, clean = _dispute(own_app), _dispute(own_app)
    _as_app(own_app, sql, victim)
    report = verify(PostgresCheckpoints(own_app.engine))
    assert not report.ok
    assert [d for d, _ in report.projection_mismatches] == [victim]
    text = report.projection_mismatches[0][1]
    assert [part.split(" (")[0] for part in text.split("), ")] == [
        e.split(" (")[0] for e in expected]
    assert all(e in text for e in expected), text
    assert verify(PostgresCheckpoints(own_app.engine), clean).ok
    rep = _reconcile(own_app)  # dry run
    drift = [d for d in rep.diffs if d.kind is DiffKind.PROJECTION]
    assert [(d.dispute_id, d.repaired) for d in drift] == [(str(victim), False)] * len(expected)
    assert all(any(d.detail.startswith(e) for d in drift) for e in expected)


def test_reconcile_leaves_an_edited_dispute_out_of_the_redis_repair(own_app: Any) -> None:
    """A status forged to 'cancelled' would have reconcile remove the dispute from Redis
    (TERMINAL_MEMBER): it is reported instead, and Redis keeps it."""
    victim, clean = _dispute(own_app), _dispute(own_app)
    _as_app(own_app, "UPDATE escalation_state SET status = 'cancelled', due_at = NULL "
                     "WHERE dispute_id = :d", victim)
    rep = _reconcile(own_app, dry_run=False)
    assert rep.count(DiffKind.PROJECTION, repaired=False) == 2
    assert rep.count(DiffKind.TERMINAL_MEMBER) == 0
    assert {m for m, _ in own_app.scheduler.pending_members(0)} == {str(victim), str(clean)}


def test_repair_sets_the_projection_from_the_ledger(own_app: Any) -> None:
    victim = _dispute(own_app)
    with own_app.engine.connect() as conn:
        before = conn.execute(sa.text("SELECT tier, due_at, deadlines, obligations FROM "
                                      "escalation_state WHERE dispute_id = :d"),
                              {"d": victim}).one()
    _as_app(own_app, "UPDATE escalation_state SET tier = 'compliance', deadlines = '[]', "
                     "due_at = due_at + interval '30 days' WHERE dispute_id = :d", victim)
    rep = _reconcile(own_app, dry_run=False, repair=True)
    assert rep.count(DiffKind.PROJECTION, repaired=True) == 3 and not rep.errors
    with own_app.engine.connect() as conn:
        after = conn.execute(sa.text("SELECT tier, due_at, deadlines, obligations FROM "
                                     "escalation_state WHERE dispute_id = :d"),
                             {"d": victim}).one()
    assert after.tier == before.tier and after.due_at == before.due_at
    assert sorted(map(tuple, after.deadlines)) == sorted(map(tuple, before.deadlines))
    assert verify(PostgresCheckpoints(own_app.engine)).ok


def test_repair_refuses_a_chain_that_does_not_verify(own_app: Any) -> None:
    victim = _dispute(own_app)
    _as_app(own_app, "UPDATE escalation_state SET tier = 'compliance', "
                     "last_hash = sha256(last_hash) WHERE dispute_id = :d", victim)
    rep = _reconcile(own_app, dry_run=False, repair=True)
    assert rep.count(DiffKind.PROJECTION, repaired=False) == 1
    assert [i for i, _ in rep.errors] == [str(victim)]
    assert "does not verify" in rep.errors[0][1]


def test_the_cli_names_the_column_and_repairs_on_request(
    own_app: Any, own_database_url: str, redis_url: str,
) -> None:
    victim = _dispute(own_app)
    _as_app(own_app, "UPDATE escalation_state SET tier = 'compliance' WHERE dispute_id = :d",
            victim)
    env = _cli_env(own_app, own_database_url, redis_url)
    res = run_cli(env, "audit", "verify", "--all")  # the evidence holds: the fold is asked for
    assert res.returncode == 0, res.stderr
    assert "projection rows NOT compared with their chains (add --projection)" in res.stdout
    res = run_cli(env, "audit", "verify", "--all", "--projection")
    assert res.returncode == 1, res.stderr
    assert (f"projection mismatch: dispute {victim}: escalation_state differs from the ledger "
            "in tier (projection 'compliance', ledger 'senior')") in res.stderr
    res = run_cli(env, "reconcile", "--dry-run")
    assert res.returncode == 1, res.stderr
    assert '"PROJECTION": 1' in res.stdout
    assert (f"projection differs from the ledger: dispute {victim}: tier (projection "
            "'compliance', ledger 'senior')") in res.stderr
    res = run_cli(env, "reconcile", "--repair-projection")
    assert res.returncode == 0, res.stderr
    res = run_cli(env, "audit", "verify", "--all", "--projection")
    assert res.returncode == 0, res.stderr
