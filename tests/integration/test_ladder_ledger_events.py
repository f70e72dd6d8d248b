"""Ladder releases, first-use baselines and apply runs are ledger events on the version's own
hash chain (docs/adr/0012-ladder-events-on-the-ledger.md), on real PostgreSQL: one row each,
with who, when, why, the checksum and the plan hash; verify covers them; audit search, the
CLI and the API find them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from escalation.adapters.audit_search import PostgresLedgerSearch
from escalation.adapters.audit_store import PostgresAuditStore
from escalation.adapters.ladder_history import LadderHistoryStore
from escalation.adapters.tables import escalation_audit
from escalation.domain.audit_hash import verify_chain
from escalation.domain.errors import InvalidInput
from escalation.domain.ladder_ledger import ladder_chain_id
from escalation.ports import AuditFilter, NewRelease, NewRun
from escalation.service_layer.audit_export import check_filter
from tests.helpers import run_cli
from tests.integration.ladder_support import MigEnv, hours

_A = escalation_audit
T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def _chain(engine: sa.Engine, ladder: str, version: int) -> list[dict[str, Any]]:
    stmt = (sa.select(_A).where(_A.c.dispute_id == ladder_chain_id(ladder, version))
            .order_by(_A.c.seq))
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(stmt).mappings()]


@pytest.fixture()
def env(app: Any, tmp_path: Path) -> MigEnv:
    return MigEnv.make(app, tmp_path)


def test_a_baseline_release_and_apply_each_write_exactly_one_event(env: MigEnv) -> None:
    engine = env.app.engine
    # first use: v1 released as baseline -> one LADDER_BASELINE row, seq 1 of v1's chain
    [base] = _chain(engine, env.name, 1)
    assert (base["seq"], base["event"], base["match_decision"]) == (
        1, "LADDER_BASELINE", "LADDER_BASELINE")
    v1 = env.history.releases(env.name)[(env.name, 1)]
    assert base["actor"] == "baseline" and base["source_hash"] == v1.checksum
    assert base["details"] == {"reason": v1.reason, "checksum": v1.checksum}
    assert (base["ladder"], base["ladder_version"]) == (env.name, 1)
    assert v1.ledger is not None and v1.ledger.row_hash == bytes(base["row_hash"]).hex()

    ids = env.enqueue("standard", due_at=env.app.scheduler.time() + hours(2), n=3)
    env.add("inserted", release=False)
    released = env.release(2, actor="jane@ops", reason="CHG-9")
    assert released.new
    env.release(2, actor="jane@ops", reason="CHG-9")  # a repeated release is a no-op
    [rel] = _chain(engine, env.name, 2)
    assert (rel["seq"], rel["event"], rel["actor"]) == (1, "LADDER_RELEASED", "jane@ops")
    assert rel["details"] == {"reason": "CHG-9", "checksum": released.row.checksum}
    assert rel["decided_at"] == released.row.released_at

    plan = env.plan(2)
    report = env.apply(plan.plan_hash, actor="carol@ops", reason="CHG-10")
    assert report.migrated == 3
    rel_row, applied = _chain(engine, env.name, 2)
    assert rel_row == rel  # the release row is untouched; the apply appends seq 2
    assert (applied["seq"], applied["event"], applied["actor"]) == (
        2, "LADDER_APPLIED", "carol@ops")
    d = applied["details"]
    assert (d["plan_hash"], d["checksum"], d["reason"], d["status"]) == (
        plan.plan_hash, released.row.checksum, "CHG-10", "done")
    assert (d["migrated"], d["run_id"]) == (3, report.run_id)
    assert verify_chain([rel_row, applied]) is None
    # the same hash again: already applied, nothing written
    env.apply(plan.plan_hash, actor="carol@ops", reason="CHG-10")
    assert len(_chain(engine, env.name, 2)) == 2
    # each migrated dispute names the release event it migrated to
    for did in ids:
        [mig] = env.migrated_rows(did)
        release = mig["details"]["release"]
        assert release == {
            "version": 2, "event": "LADDER_RELEASED",
            "chain_id": str(ladder_chain_id(env.name, 2)), "seq": 1,
            "row_hash": bytes(rel["row_hash"]).hex(), "released_by": "jane@ops",
            "released_at": released.row.released_at.isoformat()}
        assert mig["details"]["reason"].startswith(f"CHG-10; migrated to {env.name}@2, "
                                                   "released as LADDER_RELEASED by jane@ops")


def test_a_failed_apply_run_is_a_ledger_event_too(env: MigEnv) -> None:
    env.enqueue("standard", due_at=env.app.scheduler.time() + hours(2), n=2)
    env.add("inserted")
    plan = env.plan(2)

    def boom(stage: str, index: int) -> None:
        raise RuntimeError("crash after the first batch")

    with pytest.raises(RuntimeError):
        env.apply(plan.plan_hash, hook=boom, batch_size=1)
    rows = _chain(env.app.engine, env.name, 2)
    assert [r["event"] for r in rows] == ["LADDER_RELEASED", "LADDER_APPLY_FAILED"]
    assert "crash after the first batch" in rows[1]["details"]["error"]
    env.apply(plan.plan_hash)  # resumed to the end
    assert [r["event"] for r in _chain(env.app.engine, env.name, 2)] == [
        "LADDER_RELEASED", "LADDER_APPLY_FAILED", "LADDER_APPLIED"]


def test_a_run_status_other_than_done_or_failed_is_refused_and_nothing_written(
        env: MigEnv) -> None:
    env.add("inserted")
    run = env.history.start(NewRun(ladder=env.name, version=2, checksum="c", plan_hash="p",
                                   applied_by="x", started_at=T0, planned=0))
    with pytest.raises(InvalidInput, match="status"):
        env.history.finish(run, "running", T0)
    assert [r.finished_at for r in env.history.history(env.name) if r.run_id == run] == [None]
    assert len(_chain(env.app.engine, env.name, 2)) == 1


def test_search_cli_and_api_find_ladder_events(env: MigEnv, cli_env: dict[str, str]) -> None:
    env.add("inserted", release=False)
    env.release(2, actor="jane@ops", reason="CHG-11")
    ledger = PostgresLedgerSearch(env.app.engine)
    flt = AuditFilter(decision="LADDER_RELEASED", ladder=env.name)
    # a known decision, though no ladder file produces it; the ladder filter names a
    # released ladder (an unknown one is refused: test_cli_config_and_input_errors)
    check_filter(ledger, flt, env.catalog.all())
    [row] = ledger.search(flt, 10)
    assert (row.ladder_version, row.actor, row.details["reason"]) == (2, "jane@ops", "CHG-11")
    res = run_cli({**cli_env, "ESCALATION_LADDERS_DIR": str(env.dir)}, "audit", "search",
                  "--decision", "LADDER_BASELINE", "--ladder", env.name, "--json")
    assert res.returncode == 0, res.stderr
    [found] = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
    assert (found["event"], found["ladder_version"]) == ("LADDER_BASELINE", 1)


# ----------------------------------------------------------------------- verify (own database)
def _history_on(scratch: sa.Engine) -> LadderHistoryStore:
    history = LadderHistoryStore(scratch)
    history.baseline({"lad": [(1, "a" * 64)]}, released_by="baseline", reason="first use",
                     released_at=T0)
    history.release(NewRelease(ladder="lad", version=2, checksum="b" * 64, released_by="jane",
                               reason="CHG-1", released_at=T0))
    run = history.start(NewRun(ladder="lad", version=2, checksum="b" * 64, plan_hash="p" * 64,
                               applied_by="carol", started_at=T0, planned=0))
    history.finish(run, "done", T0)
    return history


def _behind_the_triggers(engine: sa.Engine, sql: str, **params: Any) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE escalation_audit DISABLE TRIGGER ALL"))
        conn.execute(sa.text(sql), params)
        for trigger in ("trg_escalation_audit_no_mutation", "trg_escalation_audit_no_truncate"):
            conn.execute(sa.text(f"ALTER TABLE escalation_audit ENABLE ALWAYS TRIGGER {trigger}"))


def test_verify_passes_on_ladder_chains_and_catches_an_edited_row(scratch: sa.Engine) -> None:
    _history_on(scratch)
    store = PostgresAuditStore(scratch)
    assert store.verify() == []
    chain = ladder_chain_id("lad", 2)
    _behind_the_triggers(scratch, "UPDATE escalation_audit SET details = jsonb_set(details, "
                         "'{plan_hash}', '\"forged\"') WHERE dispute_id = :d AND seq = 2",
                         d=chain)
    assert store.verify() == [(chain, 2)]
    assert store.verify(chain) == [(chain, 2)]


def test_verify_catches_a_removed_ladder_event_through_the_head(scratch: sa.Engine) -> None:
    _history_on(scratch)
    chain = ladder_chain_id("lad", 2)
    _behind_the_triggers(scratch, "DELETE FROM escalation_audit WHERE dispute_id = :d "
                         "AND seq = 2", d=chain)
    assert PostgresAuditStore(scratch).verify() == [(chain, 2)]


def test_audit_verify_all_cli_passes_then_reports_an_edited_release(
        scratch: sa.Engine, cli_env: dict[str, str]) -> None:
    _history_on(scratch)
    env = {**cli_env, "ESCALATION_DATABASE_URL": scratch.url.render_as_string(
        hide_password=False)}
    ok = run_cli(env, "audit", "verify", "--all")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    chain = ladder_chain_id("lad", 1)
    _behind_the_triggers(scratch, "UPDATE escalation_audit SET actor = 'mallory' "
                         "WHERE dispute_id = :d AND seq = 1", d=chain)
    bad = run_cli(env, "audit", "verify", "--all")
    assert bad.returncode != 0
    assert str(chain) in bad.stdout + bad.stderr


def test_ladder_release_cli_names_its_ledger_event(env: MigEnv, cli_env: dict[str, str]) -> None:
    env.add("inserted", release=False)
    cli = {**cli_env, "ESCALATION_LADDERS_DIR": str(env.dir)}
    res = run_cli(cli, "ladder", "release", "--ladder", env.name, "--version", "2",
                  "--actor", "jane@ops", "--reason", "CHG-12")
    assert res.returncode == 0, res.stderr
    [rel] = _chain(env.app.engine, env.name, 2)
    assert (f"on the ledger: LADDER_RELEASED, chain {ladder_chain_id(env.name, 2)} #1, "
            f"row hash {bytes(rel['row_hash']).hex()[:16]}") in res.stdout
    again = run_cli(cli, "ladder", "release", "--ladder", env.name, "--version", "2", "--json")
    assert again.returncode == 0, again.stderr
    data = json.loads(again.stdout)
    assert data["new"] is False and data["ledger"]["event"] == "LADDER_RELEASED"
    assert data["ledger"]["row_hash"] == bytes(rel["row_hash"]).hex()
    assert len(_chain(env.app.engine, env.name, 2)) == 1  # a repeated release writes nothing


def test_a_checkpoint_seals_the_ladder_chain_heads(scratch: sa.Engine) -> None:
    from escalation.adapters.checkpoints import PostgresCheckpoints

    _history_on(scratch)
    cp = PostgresCheckpoints(scratch).seal("test")
    with scratch.connect() as conn:
        sealed = dict(conn.execute(sa.text(
            "SELECT dispute_id, last_seq FROM audit_checkpoint_head WHERE checkpoint_id = :c"),
            {"c": cp.checkpoint_id}).all())
    assert cp.head_count == 2
    assert sealed == {ladder_chain_id("lad", 1): 1, ladder_chain_id("lad", 2): 2}


def test_an_ended_apply_logs_its_ledger_event(env: MigEnv) -> None:
    from structlog.testing import capture_logs

    env.add("inserted")
    plan = env.plan(2)
    with capture_logs() as logs:
        env.apply(plan.plan_hash, actor="carol@ops")
    [line] = [e for e in logs if e["event"] == "ladder.apply_ended"]
    assert (line["match_decision"], line["status"], line["plan_hash"], line["actor"]) == (
        "LADDER_APPLIED", "done", plan.plan_hash, "carol@ops")
    assert line["source_hash"] == env.history.releases(env.name)[(env.name, 2)].checksum
    assert "trace_id" in line
