"""``audit verify --all`` verifies the evidence without sorting the ledger (ADR 0040): rows
hashed one by one in physical order, links, seq continuity and projection heads in SQL,
suspect chains walked in order. For every kind of tampering its broken-chain list is the
sorted walk's (the one-scan walk, and the parallel walk with the projection fold)."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import sqlalchemy as sa

from escalation.adapters.audit_store import PostgresAuditStore
from escalation.adapters.checkpoints import PostgresCheckpoints
from escalation.adapters.ledger_verify import row_canonical_bytes, select_list
from escalation.domain.audit_hash import decode_canonical_json
from escalation.service_layer.checkpoint import (
    PROJECTION_NOT_COMPARED,
    VerifyLedger,
    verify_ledger,
)
from tests.integration.audit_support import T0, claimed, make_escalation, promote

_TRIGGERS = ("trg_escalation_audit_no_mutation", "trg_escalation_audit_no_truncate")


def _chain(store: PostgresAuditStore, months_back: int, promotions: int):
    """A chain due ``months_back`` months before T0: enqueued, then promoted ``promotions``
    times (each a decision of its own rows)."""
    esc = make_escalation(due_at=T0 - timedelta(days=31 * months_back))
    state = store.record_enqueue(esc, "svc", esc.due_at - timedelta(days=1))[1]
    for tier in ("senior", "compliance", "executive", "board")[:promotions]:
        (o,) = store.record_decisions([(claimed(state), promote(state, tier))], "w")
        state = o.state
    return state


def _behind_the_triggers(engine: sa.Engine, *statements: tuple[str, dict]) -> None:
    """Run ``statements`` on the ledger with its triggers off (a superuser's tampering)."""
    with engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE escalation_audit DISABLE TRIGGER ALL"))
        for sql, params in statements:
            conn.execute(sa.text(sql), params)
        for trg in _TRIGGERS:
            conn.execute(sa.text(f"ALTER TABLE escalation_audit ENABLE ALWAYS TRIGGER {trg}"))


def _row_hash(engine: sa.Engine, dispute_id, seq: int, prev_hash: bytes) -> bytes:
    """The ``row_hash`` row ``seq`` would have on ``prev_hash`` (a forger's recomputation)."""
    with engine.connect() as conn:
        row = conn.execute(sa.text(
            f"SELECT {select_list()} FROM escalation_audit WHERE dispute_id = :d AND seq = :s"),
            {"d": dispute_id, "s": seq}).one()
    canonical = row_canonical_bytes(tuple(row), decode_canonical_json(row[-3]))
    return hashlib.sha256(prev_hash + canonical).digest()


def _move(engine: sa.Engine, dispute_id, months: int) -> None:
    """Move a chain and its projection row ``months`` months back (a partition of its own:
    the chain lives in the partition of its projection's ``created_at``)."""
    with engine.begin() as conn:
        conn.execute(sa.text(
            "SELECT escalation_audit_ensure_partition((date_trunc('month', created_at"
            " AT TIME ZONE 'UTC') - make_interval(months => :m))::date)"
            " FROM escalation_state WHERE dispute_id = :d"), {"d": dispute_id, "m": months})
    shift = "- make_interval(months => :m)"
    _behind_the_triggers(
        engine,
        (f"UPDATE escalation_audit SET chain_created_at = chain_created_at {shift}"
         " WHERE dispute_id = :d", {"d": dispute_id, "m": months}),
        (f"UPDATE escalation_state SET created_at = created_at {shift}"
         " WHERE dispute_id = :d", {"d": dispute_id, "m": months}),
    )


def _rows(engine: sa.Engine, dispute_id) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text(
            "SELECT count(*) FROM escalation_audit WHERE dispute_id = :d"),
            {"d": dispute_id}).scalar_one())


def test_the_evidence_walk_reports_what_the_sorted_walk_reports_for_every_tampering(scratch):
    engine = scratch
    store = PostgresAuditStore(engine)
    states = [_chain(store, months_back=0, promotions=4) for i in range(14)]
    for i, state in enumerate(states):  # chains in three partitions, walked in parallel
        if i % 3:
            _move(engine, state.dispute_id, i % 3)
    with engine.connect() as conn:
        assert conn.execute(sa.text(
            "SELECT count(DISTINCT tableoid) FROM escalation_audit")).scalar_one() == 3
    clean = store.check_ledger(projection=False)
    assert (clean.broken, clean.projection_mismatches, clean.projection_compared) == (
        [], [], False)
    n = _rows(engine, states[0].dispute_id)
    assert n >= 5
    assert (clean.disputes, clean.rows) == (14, sum(_rows(engine, s.dispute_id)
                                                    for s in states))
    d = [s.dispute_id for s in states]
    where = "WHERE dispute_id = :d AND seq = :s"
    forged = _row_hash(engine, d[5], 3, b"\x11" * 32)
    _behind_the_triggers(
        engine,
        # a hashed field changed: that row's hash fails
        (f"UPDATE escalation_audit SET actor = 'mallory' {where}", {"d": d[0], "s": 3}),
        # a row_hash changed: that row fails, and its successor's link
        (f"UPDATE escalation_audit SET row_hash = decode(repeat('cd', 32), 'hex') {where}",
         {"d": d[1], "s": 2}),
        # a middle row removed: its successor has no predecessor
        (f"DELETE FROM escalation_audit {where}", {"d": d[2], "s": 3}),
        # the first row removed
        (f"DELETE FROM escalation_audit {where}", {"d": d[3], "s": 1}),
        # two rows swapped (their seqs exchanged)
        ("UPDATE escalation_audit SET seq = seq + 1000 WHERE dispute_id = :d"
         " AND seq IN (2, 3)", {"d": d[4]}),
        ("UPDATE escalation_audit SET seq = CASE seq WHEN 1002 THEN 3 ELSE 2 END"
         " WHERE dispute_id = :d AND seq > 1000", {"d": d[4]}),
        # a forged prev_hash with its row_hash recomputed: the row hashes, the link fails
        (f"UPDATE escalation_audit SET prev_hash = :p, row_hash = :h {where}",
         {"d": d[5], "s": 3, "p": b"\x11" * 32, "h": forged}),
        # two consecutive middle rows removed: the first missing seq is reported
        ("DELETE FROM escalation_audit WHERE dispute_id = :d AND seq IN (2, 3)", {"d": d[6]}),
        # the last row removed: the projection head is ahead of the chain
        ("DELETE FROM escalation_audit WHERE dispute_id = :d AND seq = (SELECT max(seq)"
         " FROM escalation_audit WHERE dispute_id = :d)", {"d": d[7]}),
        # a row repeated in the same month (a microsecond later chain_created_at): seq 2
        # twice, the copy hashing as the original does
        ("CREATE TEMPORARY TABLE copied ON COMMIT DROP AS SELECT * FROM escalation_audit"
         " WHERE dispute_id = :d AND seq = 2", {"d": d[8]}),
        ("UPDATE copied SET chain_created_at = chain_created_at + interval '1 microsecond'",
         {}),
        ("INSERT INTO escalation_audit SELECT * FROM copied", {}),
        # the chain removed whole: its projection row has no chain
        ("DELETE FROM escalation_audit WHERE dispute_id = :d", {"d": d[9]}),
    )
    with engine.begin() as conn:  # the projection head rewritten
        conn.execute(sa.text("UPDATE escalation_state SET last_hash = decode(repeat('ab', 32),"
                             " 'hex') WHERE dispute_id = :d"), {"d": d[10]})
    evidence = store.check_ledger(projection=False)
    assert store.verify() == evidence.broken  # the default walk
    folded = store.check_ledger(projection=True)
    store.parallel_verify = False
    sorted_walk = store.verify()  # one ordered scan: the reference
    assert evidence.broken == folded.broken == sorted_walk
    assert (evidence.projection_mismatches, evidence.projection_compared) == ([], False)
    assert (evidence.disputes, evidence.rows) == (folded.disputes, folded.rows)
    assert dict(evidence.broken) == {
        d[0]: 3, d[1]: 2, d[2]: 3, d[3]: 1, d[4]: 2, d[5]: 3, d[6]: 2,
        d[7]: n, d[8]: 3, d[9]: 1, d[10]: n,
    }


def test_the_default_report_says_projection_rows_were_not_compared(scratch):
    engine = scratch
    store = PostgresAuditStore(engine)
    states = [_chain(store, months_back=0, promotions=1) for _ in range(3)]
    with engine.begin() as conn:  # a projected column rewritten: only the fold sees it
        conn.execute(sa.text("UPDATE escalation_state SET tier = 'compliance'"
                             " WHERE dispute_id = :d"), {"d": states[1].dispute_id})
    cps = PostgresCheckpoints(engine)
    evidence = verify_ledger(VerifyLedger(projection=False), cps)
    assert evidence.ok and not evidence.projection_compared
    assert PROJECTION_NOT_COMPARED in evidence.notes
    assert "--projection" in PROJECTION_NOT_COMPARED
    full = verify_ledger(VerifyLedger(projection=True), cps)
    assert not full.ok and full.projection_compared
    assert [d for d, _ in full.projection_mismatches] == [states[1].dispute_id]
    assert PROJECTION_NOT_COMPARED not in full.notes


def test_a_partition_without_a_range_is_verified_as_the_sorted_walk_verifies_it(scratch):
    """A DEFAULT partition has no range to prune by or to narrow projection rows by: its rows
    are selected by ``tableoid`` and its chains' heads compared after the walk."""
    engine = scratch
    store = PostgresAuditStore(engine)
    states = [_chain(store, months_back=0, promotions=2) for _ in range(5)]
    d = [s.dispute_id for s in states]
    with engine.begin() as conn:  # their month's rows move to a DEFAULT partition
        table = conn.execute(sa.text(
            "SELECT DISTINCT tableoid::regclass::text FROM escalation_audit"
            " WHERE dispute_id = :d"), {"d": d[2]}).scalar_one()
        schema = table.rsplit(".", 1)[0]
        conn.execute(sa.text(f"ALTER TABLE escalation_audit DETACH PARTITION {table}"))
        conn.execute(sa.text(f"CREATE TABLE {schema}.escalation_audit_default"
                             " PARTITION OF escalation_audit DEFAULT"))
        conn.execute(sa.text("ALTER TABLE escalation_audit DISABLE TRIGGER ALL"))
        conn.execute(sa.text(f"INSERT INTO escalation_audit SELECT * FROM {table}"))
        for trg in _TRIGGERS:
            conn.execute(sa.text(f"ALTER TABLE escalation_audit ENABLE ALWAYS TRIGGER {trg}"))
        conn.execute(sa.text(f"DROP TABLE {table}"))
        moved = conn.execute(sa.text(
            "SELECT count(DISTINCT dispute_id) FROM escalation_audit"
            " WHERE tableoid::regclass::text LIKE '%escalation_audit_default'")).scalar_one()
    assert moved == 5
    assert store.check_ledger(projection=False).broken == []
    _behind_the_triggers(
        engine,
        ("UPDATE escalation_audit SET actor = 'mallory' WHERE dispute_id = :d AND seq = 2",
         {"d": d[2]}),
        ("DELETE FROM escalation_audit WHERE dispute_id = :d AND seq = 3", {"d": d[3]}),
    )
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE escalation_state SET last_hash = decode(repeat('ab', 32),"
                             " 'hex') WHERE dispute_id = :d"), {"d": d[4]})
    evidence = store.check_ledger(projection=False)
    store.parallel_verify = False
    assert evidence.broken == store.verify() == store.check_ledger(projection=True).broken
    assert dict(evidence.broken) == {d[2]: 2, d[3]: 3, d[4]: 3}
