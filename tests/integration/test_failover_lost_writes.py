"""Writes lost in a Redis failover, then reconcile: every recorded decision is notified once.

A Sentinel or Cluster failover promotes a replica fed by *asynchronous* replication: the new
primary holds the old one's dataset as of some earlier moment (a prefix of its writes), and
in the worst case nothing at all (a replica promoted in the middle of a full resync, or one
that resynced from its crashed primary restarted empty). These tests produce exactly those
states on the single test Redis, without sentinel processes: the namespace's keys are
snapshotted with DUMP, more work is done, then every key is deleted and the snapshot RESTOREd
(``_rollback``) -- the promoted replica's view. PostgreSQL, committed before every apply,
keeps every decision. ``reconcile`` must then leave exactly one review-stream entry per
recorded decision (docs/reliability.md "Failover"):

* the apply lost, payload and stream entry with it (payload BEHIND);
* the escalation enqueued *and* decided in the lost suffix (payload MISSING);
* everything lost (every payload MISSING, the streams gone);
* a terminal decision's apply lost (member and payload back, PostgreSQL says terminal);
* and the converse: a payload lost while its stream entry survived is not notified twice.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from escalation.service_layer.core import CorePorts
from escalation.service_layer.fire import FireDue, fire_due
from escalation.service_layer.reconcile import FullReconcile, ReconcilePorts, reconcile
from tests.e2e.helpers import due_requests, enqueue
from tests.integration import reliability_support as support
from tests.integration.reliability_support import delete_namespace, reliability_redis

own_database_url = support.own_database_url  # fixtures
own_app = support.own_app

Snapshot = dict[bytes, tuple[bytes, int]]


def _keys(app: Any) -> list[bytes]:
    return list(app.redis.scan_iter(match=f"*{{{app.settings.namespace}:*", count=1000))


def _snapshot(app: Any) -> Snapshot:
    """DUMP and PTTL of every key of the app's namespace: what a replica holds right now."""
    raw = app.redis.connection_pool.get_encoder()
    out: Snapshot = {}
    for key in _keys(app):
        dumped = app.redis.execute_command("DUMP", key, NEVER_DECODE=True)
        if dumped is not None:
            out[raw.encode(key)] = (dumped, max(int(app.redis.pttl(key)), 0))
    return out


def _rollback(app: Any, snap: Snapshot) -> None:
    """The failover: the namespace becomes exactly ``snap`` (later writes are lost)."""
    delete_namespace(app.redis, app.settings.namespace)
    for key, (dumped, ttl) in snap.items():
        app.redis.execute_command("RESTORE", key, ttl, dumped)


def _fire_all(app: Any) -> None:
    while fire_due(
        FireDue(batch_size=100, lease_ms=5000, worker_id="w"),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
    ).claimed:
        pass


def _notes(app: Any) -> Counter[str]:
    """Review-stream entries by idempotency key, over every shard."""
    out: Counter[str] = Counter()
    for keys in app.scheduler.shard_keys():
        out.update(f["idempotency_key"] for _, f in app.redis.xrange(keys.review))
    return out


def _decisions(app: Any, ids: list[Any]) -> Counter[str]:
    keys: Counter[str] = Counter()
    for did in ids:
        for row in app.store.trail(did):
            if row.event in ("PROMOTED", "TERMINAL"):
                keys[f"{row.dispute_id}:{row.seq}"] += 1
    return keys


def _reconcile(app: Any) -> Any:
    report = reconcile(FullReconcile(),
                       ReconcilePorts(app.scheduler, app.store, reliability_redis(app)))
    assert not report.errors, report.as_dict()
    return report


def _assert_each_decision_notified_once(app: Any, ids: list[Any]) -> None:
    decided = _decisions(app, ids)
    assert len(decided) == len(ids)
    notes = _notes(app)
    assert {k: notes[k] for k in decided} == dict.fromkeys(decided, 1), (
        f"{sum(1 for k in decided if notes[k] == 0)} of {len(decided)} decisions not notified")
    assert set(notes) == set(decided)  # nothing else was sent
    # a second reconcile, and workers (nothing is due), send nothing more
    assert _reconcile(app).count(repaired=True) == 0
    _fire_all(app)
    assert _notes(app) == notes


def test_apply_lost_in_the_failover_is_notified_by_reconcile(own_app: Any) -> None:
    ids = enqueue(own_app, due_requests(30, own_app.scheduler.time()))
    replica = _snapshot(own_app)
    _fire_all(own_app)
    assert _notes(own_app) == _decisions(own_app, ids)
    _rollback(own_app, replica)  # payloads back at seq 1, stream entries gone
    assert _notes(own_app) == Counter()
    _reconcile(own_app)
    _assert_each_decision_notified_once(own_app, ids)


def test_escalation_enqueued_and_decided_in_the_lost_writes_is_notified(own_app: Any) -> None:
    early = enqueue(own_app, due_requests(10, own_app.scheduler.time()))
    replica = _snapshot(own_app)  # the replica has the first 10 escalations, undecided
    late = enqueue(own_app, due_requests(20, own_app.scheduler.time()))
    _fire_all(own_app)
    _rollback(own_app, replica)  # the 20 late ones: no payload, no member, no entry
    assert all(own_app.scheduler.payload(d) is None for d in late)
    _reconcile(own_app)
    _assert_each_decision_notified_once(own_app, early + late)


def test_every_key_lost_in_the_failover_each_decision_notified_once(own_app: Any) -> None:
    """The promoted replica is empty (promoted mid full resync, or resynced from its
    crashed primary restarted without data)."""
    ids = enqueue(own_app, due_requests(30, own_app.scheduler.time()))
    _fire_all(own_app)
    _rollback(own_app, {})
    _reconcile(own_app)
    assert all(own_app.scheduler.payload(d) is not None for d in ids)
    _assert_each_decision_notified_once(own_app, ids)


def test_terminal_decision_whose_apply_was_lost_is_notified(own_app: Any) -> None:
    ids = enqueue(own_app, due_requests(15, own_app.scheduler.time(), tier="compliance"))
    replica = _snapshot(own_app)
    _fire_all(own_app)  # terminal: member and payload removed, entry sent
    assert all(own_app.scheduler.payload(d) is None for d in ids)
    _rollback(own_app, replica)  # member and payload back at seq 1, entry gone
    _reconcile(own_app)  # PostgreSQL says terminal: the member goes, the entry is sent
    assert all(own_app.scheduler.payload(d) is None for d in ids)
    _assert_each_decision_notified_once(own_app, ids)


def test_payload_lost_but_stream_entry_kept_is_not_notified_twice(own_app: Any) -> None:
    ids = enqueue(own_app, due_requests(20, own_app.scheduler.time()))
    _fire_all(own_app)
    for did in ids:  # only the payloads go (e.g. deleted by hand); the entries stay
        own_app.redis.delete(own_app.scheduler.keys_for(did).payload(did))
    report = _reconcile(own_app)
    assert report.count(repaired=True) == len(ids)
    _assert_each_decision_notified_once(own_app, ids)


def _lose_payloads_and_entries(app: Any, ids: list[Any]) -> None:
    """Decide ``ids``, then lose the decisions' writes *and* the payloads, keeping the ZSET
    members (due again): a member without payload whose latest decision has no entry."""
    before = _notes(app)
    replica = _snapshot(app)  # members due, payloads at seq 1, no entry of theirs
    _fire_all(app)
    assert _notes(app) - before == _decisions(app, ids)
    _rollback(app, replica)
    for did in ids:
        app.redis.delete(app.scheduler.keys_for(did).payload(did))
    assert _notes(app) == before
    assert all(app.scheduler.payload(d) is None for d in ids)


class _Hooked:
    """A scheduler or reliability adapter whose ``notified`` runs ``then`` right after its
    stream read: the other repair runs between this one's read and its restore."""

    def __init__(self, inner: Any, then: Any) -> None:
        self._inner, self._then, self.calls = inner, then, 0

    def notified(self, wanted: Any, count: int = 1000) -> set[str]:
        found: set[str] = self._inner.notified(wanted, count)
        self.calls += 1
        if self.calls == 1:
            self._then()
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _fire_with(app: Any, scheduler: Any) -> Any:
    return fire_due(
        FireDue(batch_size=100, lease_ms=5000, worker_id="w"),
        CorePorts(scheduler=scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
    )


def test_worker_repair_of_member_without_payload_sends_the_lost_entry(own_app: Any) -> None:
    ids = enqueue(own_app, due_requests(20, own_app.scheduler.time()))
    _lose_payloads_and_entries(own_app, ids)
    report = _fire_with(own_app, own_app.scheduler)  # the worker meets them first
    assert (report.stuck, report.claimed) == (len(ids), 0)
    assert all(own_app.scheduler.payload(d) is not None for d in ids)
    assert all("STUCK_MEMBER" in [r.event for r in own_app.store.trail(d)] for d in ids)
    _assert_each_decision_notified_once(own_app, ids)  # + reconcile and workers after it


def test_worker_repair_does_not_resend_an_entry_the_stream_still_holds(own_app: Any) -> None:
    ids = enqueue(own_app, due_requests(20, own_app.scheduler.time()))
    replica = _snapshot(own_app)
    _fire_all(own_app)
    kept = {k: v for k, v in _snapshot(own_app).items() if b":review" in k}
    assert kept
    _rollback(own_app, {**replica, **kept})  # members due, payloads lost below; entries kept
    for did in ids:
        own_app.redis.delete(own_app.scheduler.keys_for(did).payload(did))
    assert _fire_with(own_app, own_app.scheduler).stuck == len(ids)
    _assert_each_decision_notified_once(own_app, ids)


def test_reconcile_reads_the_stream_then_the_worker_repairs_then_reconcile_restores(
    own_app: Any,
) -> None:
    """Reconcile found the payloads MISSING and no entry; the worker repairs them before
    reconcile's restore lands: one entry each (today's worker sent none, and reconcile's
    restore then found the payloads already back)."""
    ids = enqueue(own_app, due_requests(20, own_app.scheduler.time()))
    _lose_payloads_and_entries(own_app, ids)
    stuck: list[int] = []
    side = _Hooked(reliability_redis(own_app),
                   lambda: stuck.append(_fire_with(own_app, own_app.scheduler).stuck))
    report = reconcile(FullReconcile(), ReconcilePorts(own_app.scheduler, own_app.store, side))
    assert not report.errors, report.as_dict()
    assert side.calls >= 1 and stuck == [len(ids)]
    _assert_each_decision_notified_once(own_app, ids)


def test_worker_reads_the_stream_then_reconcile_repairs_then_the_worker_restores(
    own_app: Any,
) -> None:
    """The converse interleaving: the worker found no entry, reconcile re-creates payloads
    and entries, then the worker's restore lands (its entry refused by the seq guard)."""
    ids = enqueue(own_app, due_requests(20, own_app.scheduler.time()))
    _lose_payloads_and_entries(own_app, ids)
    sched = _Hooked(own_app.scheduler, lambda: _reconcile(own_app))
    assert _fire_with(own_app, sched).stuck == len(ids)
    assert sched.calls == 1
    _assert_each_decision_notified_once(own_app, ids)


def test_worker_repair_then_reconcile_and_reconcile_then_worker_one_entry(own_app: Any) -> None:
    """Sequential, both orders: worker first (then reconcile finds nothing to send), and
    reconcile first on a member the worker had already claimed as stuck (then the worker's
    repair finds the entry in the stream)."""
    first = enqueue(own_app, due_requests(10, own_app.scheduler.time()))
    _lose_payloads_and_entries(own_app, first)
    assert _fire_with(own_app, own_app.scheduler).stuck == len(first)
    _reconcile(own_app)
    _assert_each_decision_notified_once(own_app, first)

    second = enqueue(own_app, due_requests(10, own_app.scheduler.time()))
    _lose_payloads_and_entries(own_app, second)
    claim = own_app.scheduler.claim(100, 5000, "w")  # the worker's claim: stuck members
    assert sorted(claim.stuck) == sorted(str(d) for d in second)
    _reconcile(own_app)  # re-creates payloads with their entries
    sched = _Hooked(own_app.scheduler, lambda: None)
    from escalation.service_layer.fire import _repair_stuck
    _repair_stuck(claim.stuck, CorePorts(sched, own_app.store, own_app.ladders,
                                         own_app.calendars),
                  "w", claim.now, lambda event, **kw: None)
    assert sched.calls == 1
    _assert_each_decision_notified_once(own_app, first + second)
