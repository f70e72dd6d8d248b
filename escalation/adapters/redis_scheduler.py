"""The Redis sorted-set scheduler (seed 000 layout, seed 002 safety rules; DESIGN.md).

One Lua script per atomic operation lives in ``adapters/lua/`` (``claim.lua`` <->
``RedisScheduler.claim``); each opens with a header giving its KEYS, ARGV and returns.
Scripts are read through the installed package (``importlib.resources``) and registered per
client with ``register_script`` (which re-sends a script on NOSCRIPT). Every key a script
touches is passed in KEYS, so every call addresses one shard (one Redis Cluster slot).

Times: scores and payload times are epoch **milliseconds** UTC; the only clock consulted for
"is it due" is Redis ``TIME`` (inside the scripts, or via ``time()``), never the host clock.
"""

from __future__ import annotations

import json
import random
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from importlib import resources
from json.encoder import encode_basestring_ascii as _json_str
from typing import Any, cast
from uuid import UUID

import redis
import structlog
from redis.commands.core import Script

from escalation.adapters.redis_keys import Keys, shard_of
from escalation.adapters.redis_payload import (
    PAYLOAD_FIELDS,
    escalation_to_payload,
    payload_to_escalation,
)
from escalation.domain.errors import ConflictError, InvalidInput
from escalation.domain.escalation import Escalation, Status
from escalation.domain.timeutil import from_ms
from escalation.ports import ApplyAction, ApplyOp, ApplyOutcome, ClaimedItem, ClaimResult

__all__ = [
    "PAYLOAD_FIELDS",
    "SCRIPT_NAMES",
    "RedisScheduler",
    "escalation_to_payload",
    "packaged_scripts",
    "payload_to_escalation",
    "script_source",
]

SCRIPT_NAMES: tuple[str, ...] = (
    "enqueue",
    "pop_if_due",
    "release_lock",
    "claim",
    "apply",
    "cancel",
    "warn_claim",  # issue 4: used by adapters.redis_warnings.RedisWarnings
)
MAX_BATCH = 500  # seed 000 config table: batch_size 1-500
MAX_LEASE_MS = 86_400_000  # claim.lua refuses longer leases
MAX_CLAIM_ROUNDS = 4  # candidate windows tried per shard before giving up on contention
REVIEW_MAXLEN = 100_000  # approximate MAXLEN of the review stream
PROMOTE_MAX = 1000  # claim.lua moves at most this many due members pending -> ready per call
DEFAULT_AGING_MS = 300_000  # one materiality weight = 5 minutes of waiting (docs/sla.md)
_WAKE_GRACE_S = 1.0  # socket guard beyond the BLPOP timeout
WAKE_MARGIN_S = 0.15  # last part of a wait slept locally (Redis hz 10 = 100 ms timer steps)
CLOCK_RESYNC_S = 60.0  # an idle claim re-reads Redis TIME at most this often (see claim)
CLOCK_SLACK_MS = 10  # a member due within this of the estimated Redis time gets a script call

log = structlog.get_logger(__name__)


@cache
def script_source(name: str) -> str:
    """Text of ``adapters/lua/<name>.lua`` read through the installed package.

    Raises:
        FileNotFoundError: the package data is missing (a packaging bug).
    """
    return (
        resources.files("escalation.adapters")
        .joinpath("lua", f"{name}.lua")
        .read_text(encoding="utf-8")
    )


def packaged_scripts() -> list[str]:
    """Names (without ``.lua``) of the Lua files shipped in the installed package, sorted."""
    folder = resources.files("escalation.adapters").joinpath("lua")
    return sorted(p.name[:-4] for p in folder.iterdir() if p.name.endswith(".lua"))


def _pairs(mapping: dict[str, str]) -> list[str]:
    flat: list[str] = []
    for key, value in mapping.items():
        flat += [str(key), str(value)]
    return flat


def _json_pairs(mapping: Mapping[str, str]) -> str:
    """``json.dumps(_pairs(mapping))``: a JSON array ``[k1, v1, ...]`` of strings."""
    return "[" + ", ".join(_json_str(str(k)) + ", " + _json_str(str(v))
                           for k, v in mapping.items()) + "]"


def _as_dict(flat: Sequence[str]) -> dict[str, str]:
    pairs = len(flat) // 2 * 2  # a trailing odd element is ignored, as before
    return dict(zip(flat[0:pairs:2], flat[1:pairs:2], strict=True))


def _check_range(name: str, value: int, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(f"{name} must be an integer in {low}..{high}, got {value!r}")
    return value


@dataclass
class _ShardClaim:
    now_ms: int
    items: list[ClaimedItem] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    contended: int = 0
    next_due_ms: int | None = None


class RedisScheduler:
    """Scheduler port on Redis: pending ZSET + payload HASH + lock per escalation, N shards.

    Args:
        client: a ``redis.Redis`` created with ``decode_responses=True``.
        namespace: key namespace (hash tag ``{<namespace>:<shard>}``, see ``Keys``).
        shards: number of shards (>= 1); a dispute lives in ``shard_of(dispute_id, shards)``.

    Raises:
        InvalidInput: ``shards`` < 1 or an empty namespace.
    """

    def __init__(self, client: redis.Redis, namespace: str = "esc", shards: int = 1) -> None:
        if not namespace:
            raise InvalidInput("namespace must not be empty")
        _check_range("shards", shards, 1, 1_000_000)
        self._client = client
        self.namespace = namespace
        self.shards = shards
        # issue 4: materiality priority under backlog (None = plain due order); set by the
        # worker to ``service_layer.priority.weight_fn(ladders)``.
        self.priority: Callable[[str, str], int] | None = None
        self.aging_ms: int = DEFAULT_AGING_MS
        self._scripts: dict[str, Script] = {
            name: client.register_script(script_source(name)) for name in SCRIPT_NAMES
        }
        # Idle-cost state (issue 6): shards whose ``ready`` ZSET may hold members (True until a
        # claim script reports it empty, again after a wake), and the last Redis TIME seen
        # with the host monotonic instant it was seen at (an estimate of Redis time).
        self._ready_maybe: dict[int, bool] = {}
        self._clock: tuple[int, float] | None = None

    # ------------------------------------------------------------------ helpers
    def keys_for(self, dispute_id: UUID | str) -> Keys:
        """The ``Keys`` of the shard holding ``dispute_id``."""
        return Keys(self.namespace, shard_of(str(dispute_id), self.shards))

    def shard_keys(self) -> list[Keys]:
        """``Keys`` of every shard, shard 0 first."""
        return [Keys(self.namespace, s) for s in range(self.shards)]

    def _run(self, name: str, keys: Sequence[str], args: Sequence[str | int]) -> Any:
        return self._scripts[name](keys=list(keys), args=list(args))

    # ------------------------------------------------------------------ clock
    def time(self) -> datetime:
        """Redis ``TIME`` as an aware UTC datetime (millisecond precision): the one clock."""
        return from_ms(self._now_ms())

    def _now_ms(self) -> int:
        seconds, micros = self._client.time()
        return self._synced(int(seconds) * 1000 + int(micros) // 1000)

    def _synced(self, redis_ms: int) -> int:
        """Remember ``redis_ms`` (a Redis TIME just read) for :meth:`_estimated_now_ms`."""
        self._clock = (redis_ms, time.monotonic())
        return redis_ms

    def _estimated_now_ms(self) -> int:
        """Redis time estimated from the last TIME seen plus the host *monotonic* time since
        (no wall-clock comparison); re-reads TIME when the last sync is older than
        ``CLOCK_RESYNC_S`` (or none exists). Used only to decide whether a claim script call
        is worth making: the script itself decides what is due, on Redis TIME."""
        clock = self._clock
        mono = time.monotonic()
        if clock is None or mono - clock[1] > CLOCK_RESYNC_S:
            return self._now_ms()
        return clock[0] + int((mono - clock[1]) * 1000)

    # ------------------------------------------------------------------ enqueue
    def enqueue(self, esc: Escalation) -> bool:
        """Write payload + score atomically unless a payload exists (enqueue.lua).

        Returns:
            True if scheduled now; False if the dispute was already scheduled (nothing changed).

        Raises:
            ConflictError: ``esc.status`` is not PENDING (terminal escalations never ZADD).
            InvalidInput: negative ``seq``.
        """
        return self.enqueue_many([esc])[0]

    def enqueue_many(self, escs: Sequence[Escalation]) -> list[bool]:
        """``enqueue`` for many escalations: one enqueue.lua call per shard per 500 items.

        Returns:
            one bool per input, in input order (a repeated dispute id: the later one is False).

        Raises:
            ConflictError / InvalidInput: as ``enqueue``; raised before anything is written.
        """
        for esc in escs:
            if esc.status is not Status.PENDING:
                raise ConflictError(f"cannot enqueue {esc.dispute_id}: status {esc.status}")
            if esc.seq < 0:
                raise InvalidInput(f"seq of {esc.dispute_id} must be >= 0")
        results: list[bool] = [False] * len(escs)
        for shard, idxs in self._by_shard([e.dispute_id for e in escs]).items():
            keys = Keys(self.namespace, shard)
            for start in range(0, len(idxs), MAX_BATCH):
                chunk = idxs[start : start + MAX_BATCH]
                kargs: list[str] = [keys.pending, keys.wake, keys.stats]
                argv: list[str | int] = []
                for i in chunk:
                    esc = escs[i]
                    fields = escalation_to_payload(esc)
                    kargs.append(keys.payload(esc.dispute_id))
                    argv += [str(esc.dispute_id), fields["due_ms"], len(fields), *_pairs(fields)]
                self._write_weights(keys, [escs[i] for i in chunk])
                raw = self._run("enqueue", kargs, argv)
                for i, flag in zip(chunk, raw, strict=True):
                    results[i] = int(flag) == 1
        return results

    def _write_weights(self, keys: Keys, escs: Sequence[Escalation]) -> None:
        """HSET prio member -> materiality weight (issue 4 C) before the members enter
        pending; weight 0 is not stored (absent = 0). No-op without ``self.priority``."""
        if self.priority is None:
            return
        weights = {str(e.dispute_id): self.priority(e.ladder_key, str(e.materiality))
                   for e in escs}
        heavy: dict[str | bytes, str | bytes] = {m: str(w) for m, w in weights.items() if w > 0}
        if heavy:
            self._client.hset(keys.prio, mapping=heavy)  # type: ignore[arg-type]

    def _by_shard(self, ids: Sequence[UUID | str]) -> dict[int, list[int]]:
        groups: dict[int, list[int]] = defaultdict(list)
        for i, dispute_id in enumerate(ids):
            groups[shard_of(str(dispute_id), self.shards)].append(i)
        return groups

    # ------------------------------------------------------------------ seed step 2
    def fetch_due(self, batch_size: int) -> list[tuple[str, int]]:
        """Non-destructive read of up to ``batch_size`` due members (score <= Redis TIME).

        Returns:
            ``(dispute id, score epoch ms)`` pairs, earliest first (across shards).
        """
        _check_range("batch_size", batch_size, 1, MAX_BATCH)
        now = self._now_ms()
        found: list[tuple[str, int]] = []
        for keys in self.shard_keys():
            rows = self._client.zrangebyscore(
                keys.pending, "-inf", now, start=0, num=batch_size, withscores=True
            )
            found += [(str(m), int(s)) for m, s in cast(list[tuple[str, float]], rows)]
        return sorted(found, key=lambda pair: pair[1])[:batch_size]

    def pop_if_due(self) -> tuple[str, int] | None:
        """Atomically pop the earliest member if it is due (pop_if_due.lua), else None.

        Shards are tried in order; a future member is never removed. The payload is kept.
        """
        for keys in self.shard_keys():
            raw = self._run("pop_if_due", [keys.pending], [])
            if raw:
                return str(raw[0]), int(float(raw[1]))
        return None

    # ------------------------------------------------------------------ seed step 3
    def try_acquire_lock(self, dispute_id: UUID | str, ttl_ms: int, owner: str) -> bool:
        """``SET lock owner NX PX ttl_ms``: True if acquired, False if someone holds it."""
        _check_range("ttl_ms", ttl_ms, 1, MAX_LEASE_MS)
        if not owner:
            raise InvalidInput("owner must not be empty")
        key = self.keys_for(dispute_id).lock(dispute_id)
        return bool(self._client.set(key, owner, nx=True, px=ttl_ms))

    def release_lock(self, dispute_id: UUID | str, owner: str) -> bool:
        """Compare-and-delete (release_lock.lua): True only if ``owner`` held the lock."""
        if not owner:
            raise InvalidInput("owner must not be empty")
        key = self.keys_for(dispute_id).lock(dispute_id)
        return int(self._run("release_lock", [key], [owner])) == 1

    # ------------------------------------------------------------------ claim
    def claim(self, batch_size: int, lease_ms: int, worker_id: str) -> ClaimResult:
        """Claim up to ``batch_size`` due members (claim.lua; DESIGN.md firing protocol step 1).

        Shards are visited round-robin from a random one. Per shard: read a window of the
        earliest members (by rank, no client clock), run claim.lua on it; if the window was all
        contended / taken by other workers, try the next window (at most ``MAX_CLAIM_ROUNDS``).

        Args:
            batch_size: 1..500 members.
            lease_ms: lock TTL and visibility timeout, milliseconds (1..86 400 000).
            worker_id: non-empty, at most 200 characters; stored as ``"<token>:<worker_id>"``.

        Returns:
            ClaimResult (now = the latest Redis TIME seen over the shards visited: a script's
            clock, or when no script ran the estimate described in ``_claim_shard``;
            next_due_ms = minimum over the shards visited).

        Raises:
            InvalidInput: an argument out of range.
        """
        _check_range("batch_size", batch_size, 1, MAX_BATCH)
        _check_range("lease_ms", lease_ms, 1, MAX_LEASE_MS)
        if not worker_id or len(worker_id) > 200:
            raise InvalidInput("worker_id must be 1..200 characters")
        start = random.randrange(self.shards)
        order = [(start + i) % self.shards for i in range(self.shards)]
        total: _ShardClaim | None = None
        for shard in order:
            need = batch_size - (len(total.items) if total else 0)
            if need <= 0:
                break
            part = self._claim_shard(Keys(self.namespace, shard), need, lease_ms, worker_id)
            if total is None:
                total = part
                continue
            total.now_ms = max(total.now_ms, part.now_ms)  # the latest clock seen
            total.items += part.items
            total.stuck += part.stuck
            total.contended += part.contended
            if part.next_due_ms is not None and (
                total.next_due_ms is None or part.next_due_ms < total.next_due_ms
            ):
                total.next_due_ms = part.next_due_ms
        assert total is not None  # noqa: S101 -- shards >= 1 and batch_size >= 1
        return ClaimResult(
            now=from_ms(total.now_ms),
            items=total.items,
            stuck=total.stuck,
            contended=total.contended,
            next_due_ms=total.next_due_ms,
        )

    def _claim_shard(self, keys: Keys, need: int, lease_ms: int, worker_id: str) -> _ShardClaim:
        """claim.lua on one shard (issue 4 C: pending -> ready by effective priority, then
        claim the head of ready). Candidates are read from ``ready`` before each call; the
        script only claims those still in the head, so the order is exact.

        Idle cost (issue 6): when nothing is claimable this makes exactly one Redis command,
        ``ZRANGE pending 0 0 WITHSCORES``, and no script call:

        * the ``ready`` read is skipped while this scheduler's last claim script on the shard
          reported ``ready`` empty. Only claim.lua puts members into ``ready``, and a claim
          that leaves members there returned a full batch (the worker loops again at once)
          and pushes the wake marker (:meth:`_nudge`) so that other workers, whose flag may
          say "empty", wake up and look at ``ready`` too (a wake sets the flag again).
        * "is the first pending member due" is answered with an *estimate* of Redis time
          (last TIME seen + host monotonic time since, re-read every ``CLOCK_RESYNC_S``).
          The estimate (which lags Redis by up to a millisecond or two: truncation and the
          reply's trip) only decides whether to call the script: a first member due within
          ``CLOCK_SLACK_MS`` of it gets the call, and the script re-checks every member
          against Redis TIME, so nothing is ever claimed early, and a member made due
          "now" by another client a moment ago is not missed.
        """
        shard = keys.shard
        if not self._ready_maybe.get(shard, True):
            cheap = self._idle_check(keys)
            if cheap is not None:
                return cheap
        result: _ShardClaim | None = None
        offset = 0  # locked members seen at the top of ready
        for _ in range(MAX_CLAIM_ROUNDS):
            window = cast(list[str], self._client.zrange(keys.ready, offset, offset + need - 1))
            if not window and result is None:
                cheap = self._idle_check(keys)
                if cheap is not None:
                    self._ready_maybe[shard] = False
                    return cheap
            kargs = [keys.pending, keys.fence, keys.stats, keys.ready, keys.prio]
            for member in window:
                kargs += [keys.payload(member), keys.lock(member)]
            raw = self._run("claim", kargs, [lease_ms, worker_id, need, self.aging_ms,
                                             PROMOTE_MAX, offset, *window])
            now_ms, next_due, contended, more, stuck, items, _promoted = raw
            if result is None:
                result = _ShardClaim(now_ms=int(now_ms))
            result.now_ms = self._synced(int(now_ms))  # the latest script clock
            result.next_due_ms = None if int(float(next_due)) < 0 else int(float(next_due))
            result.contended += int(contended)
            result.stuck += [str(s) for s in stuck]
            self._parse_items(items, result)
            need -= len(items)
            offset += int(contended)
            if need <= 0 or (not int(more) and not int(contended)):
                break
        assert result is not None  # noqa: S101 -- MAX_CLAIM_ROUNDS >= 1
        # claim.lua reports next_due = now while ready still holds members.
        left = result.next_due_ms is not None and result.next_due_ms <= result.now_ms
        if left:
            self._nudge(keys)
        self._ready_maybe[shard] = left
        return result

    def _idle_check(self, keys: Keys) -> _ShardClaim | None:
        """One ``ZRANGE pending 0 0 WITHSCORES``: a ``_ShardClaim`` saying "nothing due"
        (now = estimated Redis time), or None when the first member looks due (call the
        script)."""
        first = cast(list[tuple[str, float]],
                     self._client.zrange(keys.pending, 0, 0, withscores=True))
        now_ms = self._estimated_now_ms()
        if first and int(first[0][1]) <= now_ms + CLOCK_SLACK_MS:
            return None  # due, or nearly: the script decides on Redis TIME
        return _ShardClaim(now_ms=now_ms, next_due_ms=int(first[0][1]) if first else None)

    def _nudge(self, keys: Keys) -> None:
        """Push the shard's wake marker (LPUSH + LTRIM to one element, like enqueue.lua):
        members were left in ``ready``; other workers must look at it."""
        pipe = self._client.pipeline(transaction=False)
        pipe.lpush(keys.wake, "1")
        pipe.ltrim(keys.wake, 0, 0)
        pipe.execute()

    @staticmethod
    def _parse_items(items: Sequence[Any], result: _ShardClaim) -> None:
        for member, token, score, flat in items:
            try:
                esc = payload_to_escalation(member, _as_dict(flat))
            except InvalidInput as exc:
                # Left locked and re-scored: it comes due again after the lease; reconcile
                # (restore from PostgreSQL) is the repair. One bad payload must not cost
                # the batch.
                log.error("escalation.payload_corrupt", dispute_id=member, error=str(exc))
                continue
            result.items.append(ClaimedItem(esc, int(token), int(float(score))))

    # ------------------------------------------------------------------ apply / restore
    def apply(self, ops: Sequence[ApplyOp]) -> list[ApplyOutcome]:
        """Apply recorded decisions (apply.lua): one script call per shard per 500 ops.

        Per op, in order: MISSING (no payload: cancelled, never brought back); STALE_SEQ
        (payload seq >= op seq: nothing changes, a re-sent apply lands here; a lock owned by
        ``op.token`` is released and an equal-seq RESCHEDULE by that owner puts the member back
        at its payload due time); NOT_OWNER (``op.token`` given and the lock holds another
        token, or none: a stale worker is refused); else APPLIED: RESCHEDULE replaces the
        payload and ZADDs at due; REMOVE = ZREM + DEL (never ZADD); PARK = ZREM, payload kept
        with the new seq. ``op.notify`` is XADDed to the review stream (MAXLEN ~100 000) and
        the lock released if ``op.token`` owns it. Ops with ``token=None`` are owner-less
        repairs, guarded by seq only.

        Returns:
            one outcome per op, in input order.

        Raises:
            InvalidInput: negative seq/token (raised before anything is written).
        """
        return self._apply(ops, create=False)

    def restore(self, escalations: Sequence[Escalation],
                notifications: Mapping[UUID, dict[str, str]] | None = None,
                ) -> list[ApplyOutcome]:
        """Owner-less repair from PostgreSQL state (reconcile / stuck repair).

        Status PENDING -> reschedule, PAUSED -> park, TERMINAL / CANCELLED -> remove. Creates a
        missing payload (+ score if pending); updates when the payload's seq < ``esc.seq``;
        re-adds a pending member whose payload is at the same seq but whose score vanished
        (ZSET drift). Never touches a member whose lock is held (NOT_OWNER); never creates
        anything for a terminal / cancelled escalation (MISSING).

        ``notifications`` (by dispute id): the review-stream entry of a decision recorded but
        maybe never applied; sent with the repair, at most once (apply.lua's notify seq guard).

        Returns:
            one outcome per escalation, in input order.
        """
        notes = notifications or {}
        actions = {
            Status.PENDING: ApplyAction.RESCHEDULE,
            Status.PAUSED: ApplyAction.PARK,
            Status.TERMINAL: ApplyAction.REMOVE,
            Status.CANCELLED: ApplyAction.REMOVE,
        }
        ops = [ApplyOp(escalation=e, action=actions[e.status], notify=notes.get(e.dispute_id))
               for e in escalations]
        return self._apply(ops, create=True)

    def _apply(self, ops: Sequence[ApplyOp], *, create: bool) -> list[ApplyOutcome]:
        encoded = [self._encode_op(op, create) for op in ops]
        results: list[ApplyOutcome] = [ApplyOutcome.MISSING] * len(ops)
        for shard, idxs in self._by_shard([op.escalation.dispute_id for op in ops]).items():
            keys = Keys(self.namespace, shard)
            for start in range(0, len(idxs), MAX_BATCH):
                chunk = idxs[start : start + MAX_BATCH]
                kargs = [keys.pending, keys.review, keys.stats]
                for i in chunk:
                    dispute_id = ops[i].escalation.dispute_id
                    kargs += [keys.payload(dispute_id), keys.lock(dispute_id)]
                kargs += [keys.ready, keys.prio]  # issue 4 C
                raw = self._run("apply", kargs, [REVIEW_MAXLEN, *(encoded[i] for i in chunk)])
                for i, outcome in zip(chunk, raw, strict=True):
                    results[i] = ApplyOutcome(outcome)
        return results

    @staticmethod
    def _encode_op(op: ApplyOp, create: bool) -> str:
        """One apply.lua op as a JSON object (see the script header), built by hand: the
        same object ``json.dumps`` would give (strings escaped by the C encoder), without
        the generic encoder's per-item overhead (issue 6 drain profile)."""
        esc = op.escalation
        if esc.seq < 0 or (op.token is not None and op.token < 0):
            raise InvalidInput(f"apply for {esc.dispute_id}: seq and token must be >= 0")
        fields = escalation_to_payload(esc)
        token = "" if op.token is None else str(op.token)
        return "".join((
            '{"id": ', _json_str(str(esc.dispute_id)),
            ', "action": ', _json_str(ApplyAction(op.action).value),
            ', "token": ', _json_str(token),
            ', "seq": ', _json_str(str(esc.seq)),
            ', "due_ms": ', _json_str(fields["due_ms"]),
            ', "fields": ', _json_pairs(fields),
            ', "notify": ', _json_pairs(op.notify or {}),
            ', "create": ', '"1"' if create else '"0"', "}",
        ))

    # ------------------------------------------------------------------ cancel
    def cancel(self, dispute_id: UUID | str, notify: dict[str, str] | None = None) -> bool:
        """Remove member, payload and lock atomically (cancel.lua).

        Args:
            notify: review-stream entry (with its ``seq``) of a decision recorded before the
                cancel and maybe never applied; XADDed in the same script only if the
                payload's seq is still below it (see cancel.lua).

        Returns:
            True if something was scheduled. A worker still holding the claim then gets
            MISSING from ``apply``: a cancelled dispute never comes back.
        """
        keys = self.keys_for(dispute_id)
        kargs = [keys.pending, keys.payload(dispute_id), keys.lock(dispute_id), keys.stats,
                 keys.ready, keys.prio]
        args = [str(dispute_id)]
        if notify:
            kargs.append(keys.review)
            flat = [x for kv in notify.items() for x in kv]
            args += [notify["seq"], json.dumps(flat), str(REVIEW_MAXLEN)]
        return int(self._run("cancel", kargs, args)) == 1

    # ------------------------------------------------------------------ wake-ups
    def wait_for_wake(self, timeout_s: float) -> bool:
        """Block until an enqueue pushed a wake marker, or ``timeout_s`` passed.

        Precision: Redis expires blocking timeouts from its event loop, which runs every
        ``1000 / hz`` ms on an idle server (100 ms at the default ``hz 10``), so a BLPOP
        timeout can end up to ~100 ms late. The BLPOP therefore covers only
        ``timeout_s - WAKE_MARGIN_S`` and the rest is slept locally (``time.sleep``, host
        monotonic clock, relative to now: no clock comparison), so a wait for the next due
        time ends within a millisecond or two of it. A marker pushed during the final local
        sleep (at most ``WAKE_MARGIN_S``) is seen on the next wait. Timeouts are sent in
        whole milliseconds and never as ``0`` (which would mean "block forever").

        Args:
            timeout_s: longest wait in seconds (0 or less = just check, no blocking).

        Returns:
            True if a marker was taken, False on timeout. The socket read is bounded by
            the BLPOP timeout + 1 s so a lost server cannot hang the worker.
        """
        wake_keys = [k.wake for k in self.shard_keys()]
        if timeout_s <= 0:
            woken = any(self._client.lpop(key) is not None for key in wake_keys)
            if woken:
                self._ready_maybe.clear()  # a wake: look at every shard's ready set again
            return woken
        deadline = time.monotonic() + timeout_s
        block_s = timeout_s - WAKE_MARGIN_S
        if block_s >= 0.001 and self._blpop(wake_keys, block_s):
            self._ready_maybe.clear()
            return True
        rest = deadline - time.monotonic()
        if rest > 0:
            time.sleep(rest)
        return False

    def _blpop(self, wake_keys: list[str], block_s: float) -> bool:
        pool = self._client.connection_pool
        conn = pool.get_connection()
        try:
            conn.send_command("BLPOP", *wake_keys, f"{max(block_s, 0.001):.3f}")  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
            reply = conn.read_response(timeout=block_s + _WAKE_GRACE_S)
        except (redis.TimeoutError, redis.ConnectionError):
            conn.disconnect()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
            return False
        finally:
            pool.release(conn)
        return reply is not None

    # ------------------------------------------------------------------ inspection
    def earliest_due_ms(self) -> int | None:
        """Lowest score over all shards (epoch ms), or None when nothing is pending."""
        best: int | None = None
        for keys in self.shard_keys():
            if int(self._client.zcard(keys.ready)):  # issue 4 C: due members waiting
                return self._now_ms()
            rows = cast(
                list[tuple[str, float]], self._client.zrange(keys.pending, 0, 0, withscores=True)
            )
            if rows and (best is None or int(rows[0][1]) < best):
                best = int(rows[0][1])
        return best

    def _earliest_due_incl_ready(self) -> int | None:
        """Earliest *due time* over pending and ready (a ready member's due = score + weight *
        aging_ms), looking at the 1000 best-scored ready members of each shard."""
        best: int | None = None
        for keys in self.shard_keys():
            rows = cast(list[tuple[str, float]],
                        self._client.zrange(keys.ready, 0, 999, withscores=True))
            first = cast(list[tuple[str, float]],
                         self._client.zrange(keys.pending, 0, 0, withscores=True))
            dues = [int(first[0][1])] if first else []
            if rows:
                weights = cast(list[str | None],
                               self._client.hmget(keys.prio, [m for m, _ in rows]))
                dues += [int(sc) + int(w or 0) * self.aging_ms
                         for (_, sc), w in zip(rows, weights, strict=True)]
            if dues and (best is None or min(dues) < best):
                best = min(dues)
        return best

    def payload(self, dispute_id: UUID | str) -> dict[str, str] | None:
        """The payload HASH of ``dispute_id`` (str -> str), or None if there is none."""
        fields = cast(
            dict[str, str], self._client.hgetall(self.keys_for(dispute_id).payload(dispute_id))
        )
        return fields or None

    def pending_members(self, shard: int) -> Iterator[tuple[str, int]]:
        """ZSCAN of one shard's pending and ready ZSETs: ``(dispute id, due epoch ms)`` (for
        reconcile). A ready member's due is its ready score + weight * aging_ms."""
        _check_range("shard", shard, 0, self.shards - 1)
        keys = Keys(self.namespace, shard)
        for member, score in self._client.zscan_iter(keys.pending):
            yield str(member), int(score)
        for member, score in self._client.zscan_iter(keys.ready):
            weight = int(cast(str, self._client.hget(keys.prio, member) or "0"))
            yield str(member), int(score) + weight * self.aging_ms

    def stats(self) -> dict[str, int | None]:
        """Numbers for ``escalation status`` summed over shards.

        Keys: pending (ZCARD pending + ZCARD ready), due_now (pending score <= Redis TIME, plus
        every ready member), oldest_overdue_ms (now - earliest
        due score, None when nothing is due), locked (lock keys, counted with SCAN), dead
        (ZCARD dead), plus every counter of the stats hashes (claimed, stuck, lock_contended,
        applied, stale_apply, not_owner, missing, enqueued, cancelled).
        """
        now = self._now_ms()
        out: dict[str, int | None] = {"pending": 0, "due_now": 0, "locked": 0, "dead": 0}
        counters: dict[str, int] = defaultdict(int)
        for keys in self.shard_keys():
            ready = int(self._client.zcard(keys.ready))  # issue 4 C: due, waiting for a claim
            in_pending = int(self._client.zcard(keys.pending))
            out["pending"] = int(out["pending"] or 0) + in_pending + ready
            out["due_now"] = int(out["due_now"] or 0) + ready + int(
                self._client.zcount(keys.pending, "-inf", now)
            )
            out["dead"] = int(out["dead"] or 0) + int(self._client.zcard(keys.dead))
            locks = self._client.scan_iter(match=f"{keys.lock_prefix}*", count=1000)
            out["locked"] = int(out["locked"] or 0) + sum(1 for _ in locks)
            for name, value in cast(dict[str, str], self._client.hgetall(keys.stats)).items():
                counters[name] += int(value)
        earliest = self._earliest_due_incl_ready()
        out["oldest_overdue_ms"] = (
            now - earliest if earliest is not None and earliest <= now else None
        )
        out.update(counters)
        return out
