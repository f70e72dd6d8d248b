"""The maintenance leader lease on Redis (implements ``escalation.ports.Lease``).

``SET leader <token> NX PX ttl``; the holder renews it with one ``GETEX leader PX ttl``
(reset the expiry and read the token back: renewed when the token is its own) and releases
it with compare-and-delete (``release_lock.lua``). The holder acts only while ``monotonic() <
last successful acquire/renew start + ttl * (1 - margin)``: a leader that fails to renew
(Redis down, process paused) stops acting *before* its lease can expire and another worker
takes over. Every poll is one Redis command (``SET NX`` or ``GETEX``), which keeps an idle
worker's Redis traffic low (docs/performance.md, "Idle worker").

Why ``GETEX`` and not a compare-and-pexpire script: a script costs three commands on the
server (``EVALSHA`` + ``GET`` + ``PEXPIRE``), ``GETEX`` one. The price: a former leader
whose lease was taken over resets the new holder's expiry once before it learns (from the
token it reads back) that it lost the lease; that delays a takeover after the *new* holder
dies by at most one ``ttl``, never lets two processes act (each acts only on its own
successful renewals), and maintenance occurrences are claimed in PostgreSQL anyway. See
``service_layer.maintenance`` for what the leader does.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import redis

from escalation.adapters.redis_keys import Keys
from escalation.adapters.redis_reconcile_notify import ReliabilityRedis

LEADER_NAME = "maintenance"


@dataclass(frozen=True, slots=True)
class LeaseTerms:
    """What a :class:`LeaderLease` contends for and how.

    ``name``: the lease's name in the namespace; ``ttl_ms``: lease, milliseconds (>= 100);
    ``margin``: fraction of the lease kept as safety (the leader stops acting after
    ``ttl * (1 - margin)`` without a successful renewal); ``token``: unique token of this
    contender (None: random).
    """

    name: str = LEADER_NAME
    ttl_ms: int = 30_000
    margin: float = 0.2
    token: str | None = None


DEFAULT_TERMS = LeaseTerms()


class LeaderLease:
    """A leader lease on Redis (shard 0 of the namespace).

    Args:
        rel: reliability Redis access.
        terms: name, lease, safety margin and token (:class:`LeaseTerms`).
        clock: monotonic seconds (tests may inject one).
        redis_ms: the Redis clock for :meth:`now_ms` (epoch ms); default one ``TIME`` per
            call. The worker passes the scheduler's estimate (last TIME seen + host monotonic
            time since, re-read at most every 60 s), so maintenance adds no ``TIME`` of its
            own to an idle worker.
    """

    def __init__(self, rel: ReliabilityRedis, terms: LeaseTerms = DEFAULT_TERMS, *,
                 clock: Callable[[], float] = time.monotonic,
                 redis_ms: Callable[[], int] | None = None) -> None:
        self.rel, self.ttl_ms, self.margin, self.clock = rel, terms.ttl_ms, terms.margin, clock
        self._redis_ms = redis_ms if redis_ms is not None else rel.now_ms
        self.token = terms.token or uuid.uuid4().hex
        self.key = Keys(rel.namespace, 0).leader(terms.name)
        self._valid_until = 0.0

    def _grant(self, started: float) -> None:
        self._valid_until = started + self.ttl_ms / 1000.0 * (1.0 - self.margin)

    def is_leader(self) -> bool:
        """True while the last acquire/renew succeeded recently enough (see the class doc)."""
        return self.clock() < self._valid_until

    def poll(self) -> bool:
        """Renew when leading (``GETEX``), else try to acquire (``SET NX``). Returns
        is_leader().

        One Redis command, or two when a leader finds its lease expired and unheld (it then
        tries ``SET NX`` at once rather than waiting a poll).
        """
        started = self.clock()
        try:
            if self._valid_until > 0:
                held = self.rel.client.getex(self.key, px=self.ttl_ms)
                if isinstance(held, bytes):
                    held = held.decode("utf-8", "replace")
                ok = held == self.token
                if held is None:  # expired and nobody took it: take it back now
                    ok = bool(self.rel.client.set(self.key, self.token, nx=True,
                                                  px=self.ttl_ms))
            else:
                ok = bool(self.rel.client.set(self.key, self.token, nx=True, px=self.ttl_ms))
        except (redis.ConnectionError, redis.TimeoutError):
            return self.is_leader()  # no renewal: the grant runs out by itself
        if ok:
            self._grant(started)
        else:
            self._valid_until = 0.0
        return self.is_leader()

    def release(self) -> bool:
        """Compare-and-delete: True if this token held the lease."""
        self._valid_until = 0.0
        try:
            reply = self.rel.run("release_lock", [self.key], [self.token])
        except (redis.ConnectionError, redis.TimeoutError):
            return False
        return isinstance(reply, int) and reply == 1  # anything else: not released

    def now_ms(self) -> int:
        """Redis time, epoch milliseconds (the clock of maintenance occurrences): ``TIME``,
        or the ``redis_ms`` clock given at construction."""
        return self._redis_ms()
