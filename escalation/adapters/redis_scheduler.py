"""The Redis sorted-set scheduler: the ``Scheduler`` port on Redis (docs/architecture.md).

``RedisScheduler`` is assembled from cohesive parts: ``redis_scheduler_base`` (constructor,
keys, script runner, Redis TIME clock), ``redis_claim`` (claim), ``redis_inspection``
(inspection, wake-ups, single-step seed operations) and this module (enqueue, apply,
restore, cancel). Lua scripts: ``adapters/lua/`` via ``redis_scripts``. Every key a script
touches is passed in KEYS, so every call addresses one shard (one Redis Cluster slot).

Times: scores and payload times are epoch **milliseconds** UTC; the only clock consulted for
"is it due" is Redis ``TIME`` (inside the scripts, or via ``time()``), never the host clock.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring_ascii as _json_str
from uuid import UUID

import orjson

from escalation.adapters.redis_claim import ClaimMixin
from escalation.adapters.redis_enqueue_rows import EncodedPayload, PayloadTemplate
from escalation.adapters.redis_inspection import InspectionMixin
from escalation.adapters.redis_keys import Keys
from escalation.adapters.redis_payload import (
    PAYLOAD_FIELDS,
    escalation_to_payload,
    payload_pairs,
    payload_to_escalation,
)
from escalation.adapters.redis_scheduler_base import (
    DEFAULT_AGING_MS,
    MAX_BATCH,
    REVIEW_MAXLEN,
    SCRIPT_NAMES,
)
from escalation.adapters.redis_scripts import (
    packaged_scripts,
    script_source,
)
from escalation.domain.errors import ConflictError, InvalidInput
from escalation.domain.escalation import Escalation, Status
from escalation.ports import MAX_OP_WARNINGS, ApplyAction, ApplyOp, ApplyOutcome

__all__ = [
    "DEFAULT_AGING_MS",
    "PAYLOAD_FIELDS",
    "SCRIPT_NAMES",
    "RedisScheduler",
    "escalation_to_payload",
    "packaged_scripts",
    "payload_to_escalation",
    "script_source",
]


WarningPoints = tuple[tuple[str, int], ...]
"""Pre-breach warnings of one escalation as ``(member suffix after the dispute id, due epoch
ms)`` pairs: ``WarningMember(id, seq, fraction, ms)`` is ``f"{id}{suffix}"`` at ``ms``."""


def _warnings_table(entries: Sequence[WarningPoints | None]) -> tuple[bytes | str, bytes | str]:
    """enqueue.lua's ARGV[1] and ARGV[2] for one call's items: each distinct warnings tuple
    once (its suffixes without the leading ``:``, times as decimal strings) and one 1-based
    reference per item (0 = none); ``("", "")`` when no item has warnings.

    Raises:
        InvalidInput: a suffix that does not start with ``:``.
    """
    index: dict[WarningPoints, int] = {}
    refs: list[int] = []
    for entry in entries:
        if not entry:
            refs.append(0)
            continue
        ref = index.get(entry)
        if ref is None:
            if not all(suffix.startswith(":") for suffix, _ in entry):
                raise InvalidInput(f"warning member suffixes must start with ':', got {entry}")
            ref = index[entry] = len(index) + 1
        refs.append(ref)
    if not index:
        return "", ""
    table = [[part for suffix, ms in entry for part in (suffix[1:], str(ms))] for entry in index]
    return orjson.dumps(table), orjson.dumps(refs)


def _json_strings(flat: Sequence[str]) -> bytes | str:
    """The JSON array of the strings ``flat``, for apply.lua's ``cjson.decode``.

    orjson writes UTF-8 (no ``\\u`` escapes) in about a quarter of the time of the
    ASCII-escaping encoder; both decode to the same byte strings in Redis (cjson turns the
    escapes into UTF-8). What orjson refuses (a lone surrogate, a value it cannot serialise)
    takes the ASCII-escaping form of each element's ``str``.
    """
    try:
        return orjson.dumps(flat)
    except (orjson.JSONEncodeError, TypeError):
        return "[" + ", ".join(_json_str(str(x)) for x in flat) + "]"


def _json_pairs(mapping: Mapping[str, str]) -> bytes | str:
    """The JSON array ``[k1, v1, ...]`` of a str -> str mapping (:func:`_json_strings`)."""
    flat: list[str] = []
    for kv in mapping.items():
        flat += kv
    return _json_strings(flat)


def _json_lists(lists: Sequence[Sequence[str]]) -> bytes | str:
    """apply.lua's ARGV[2]: the JSON array of the ops' string lists, in one ``cjson.decode``
    per call. Each list is encoded as :func:`_json_strings` encodes it alone (one orjson
    call for the whole array when orjson takes every list)."""
    try:
        return orjson.dumps(lists)
    except (orjson.JSONEncodeError, TypeError):
        parts = [_json_strings(x) for x in lists]
        return "[" + ",".join(p.decode() if isinstance(p, bytes) else p for p in parts) + "]"


EncodedOp = tuple[list[str], list[str], list[str]]
"""One apply.lua op: its 6 ARGV strings (id, action, token, seq, due_ms, create flag), its
payload fields ``[f1, v1, ...]`` and its review-stream entry ``[f1, v1, ...]`` (empty: none)."""

_OUTCOMES: dict[str, ApplyOutcome] = {
    "a": ApplyOutcome.APPLIED,
    "s": ApplyOutcome.STALE_SEQ,
    "o": ApplyOutcome.NOT_OWNER,
    "m": ApplyOutcome.MISSING,
}
"""apply.lua's outcome codes (its reply holds one character per op)."""


class RedisScheduler(ClaimMixin, InspectionMixin):
    """Scheduler port on Redis: pending ZSET + payload HASH + lock per escalation, N shards.

    Constructor arguments and errors: :class:`SchedulerBase` (client, namespace, shards,
    priority, aging_ms); claim and inspection come from the mixins.
    """

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
                kargs: list[str] = [keys.pending, keys.wake, keys.stats, keys.warnings]
                argv: list[str | int] = ["", ""]  # no warnings (enqueue.lua header)
                for i in chunk:
                    esc = escs[i]
                    fields = escalation_to_payload(esc)
                    kargs.append(keys.payload(esc.dispute_id))
                    argv += [str(esc.dispute_id), fields["due_ms"], len(fields)]
                    for item in fields.items():  # the values are str already
                        argv += item
                self._write_weights(keys, [escs[i] for i in chunk])
                raw = self._run("enqueue", kargs, argv)
                for i, flag in zip(chunk, raw, strict=True):
                    results[i] = int(flag) == 1
        return results

    def payload_template(self, proto: Escalation) -> PayloadTemplate:
        """A :class:`PayloadTemplate` of ``proto`` (pending) for :meth:`enqueue_encoded`.

        Raises:
            ConflictError / InvalidInput: as :meth:`enqueue_many` for ``proto``.
        """
        if proto.status is not Status.PENDING:
            raise ConflictError(f"cannot enqueue {proto.dispute_id}: status {proto.status}")
        if proto.seq < 0:
            raise InvalidInput(f"seq of {proto.dispute_id} must be >= 0")
        weight = None
        if self.priority is not None:
            w = self.priority(proto.ladder_key, str(proto.materiality))
            weight = str(w) if w > 0 else None
        return PayloadTemplate(proto, self.namespace, self.shards, weight)

    def enqueue_encoded(self, items: Sequence[EncodedPayload],
                        warnings: Sequence[WarningPoints | None] | None = None) -> list[bool]:
        """:meth:`enqueue_many` of rows rendered by :meth:`PayloadTemplate.render`: the same
        script calls with the same keys and arguments (one per shard per 500 items, the
        priority weights first), without building an ``Escalation`` per row.

        ``warnings`` (optional, one entry per item): the item's pre-breach warnings as
        ``(member suffix after "<id>", due epoch ms)`` pairs (``":<seq>:<fraction>"``, at most
        16), or None. The enqueue script adds them, for the items it newly schedules only, to
        the warnings ZSET of this scheduler's namespace and shard, in the same call: what
        ``RedisWarnings(client, namespace, shards).schedule`` would add, wake marker included.
        Items of one request shape pass the same tuple: it is sent once per call.

        Returns:
            one bool per input, in input order (False: a payload already existed).

        Raises:
            InvalidInput: ``warnings`` not one entry per item, or an entry with more than 16
                warnings (raised before anything is written).
        """
        if warnings is not None and len(warnings) != len(items):
            raise InvalidInput(f"warnings: {len(warnings)} entries for {len(items)} items")
        if warnings is not None and any(w and len(w) > MAX_OP_WARNINGS for w in warnings):
            raise InvalidInput(f"at most {MAX_OP_WARNINGS} warnings per item")
        results: list[bool] = [False] * len(items)
        by_shard: dict[int, list[int]] = {}
        for i, item in enumerate(items):
            by_shard.setdefault(item[0], []).append(i)
        for shard, idxs in by_shard.items():
            keys = Keys(self.namespace, shard)
            for start in range(0, len(idxs), MAX_BATCH):
                chunk = idxs[start : start + MAX_BATCH]
                kargs: list[str] = [keys.pending, keys.wake, keys.stats, keys.warnings]
                argv: list[str | bytes | int] = ["", ""]
                if warnings is not None:
                    argv[0], argv[1] = _warnings_table([warnings[i] for i in chunk])
                heavy: dict[str | bytes, str | bytes] = {}
                for i in chunk:
                    _, key, args, weight = items[i]
                    kargs.append(key)
                    argv += args
                    if weight is not None:
                        heavy[args[0]] = weight
                if heavy:
                    self._client.hset(keys.prio, mapping=heavy)  # type: ignore[arg-type]
                raw = self._run("enqueue", kargs, argv)
                for i, flag in zip(chunk, raw, strict=True):
                    results[i] = int(flag) == 1
        return results

    def _write_weights(self, keys: Keys, escs: Sequence[Escalation]) -> None:
        """HSET prio member -> materiality weight (ready-set priority, ADR 0006) before
        the members enter pending; weight 0 is not stored (absent = 0). No-op without
        ``self.priority``."""
        if self.priority is None:
            return
        weights = {str(e.dispute_id): self.priority(e.ladder_key, str(e.materiality))
                   for e in escs}
        heavy: dict[str | bytes, str | bytes] = {m: str(w) for m, w in weights.items() if w > 0}
        if heavy:
            self._client.hset(keys.prio, mapping=heavy)  # type: ignore[arg-type]

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
        repairs, guarded by seq only. ``op.warnings`` of an APPLIED op are added to the
        shard's warnings ZSET in the same script call (ZADD NX, wake marker when one becomes
        the earliest: what ``RedisWarnings.schedule`` does), at most 16 per op.

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
            Status.RESOLVED: ApplyAction.REMOVE,
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
                argv: list[str | bytes | int] = [REVIEW_MAXLEN, ""]
                lists: list[list[str]] = []
                for i in chunk:
                    scalars, fields, notify = encoded[i]
                    member = scalars[0]  # the dispute id
                    kargs += [keys.payload(member), keys.lock(member)]
                    argv += scalars
                    lists += (fields, notify)
                argv[1] = _json_lists(lists)  # every op's pair lists, one JSON array
                kargs += [keys.ready, keys.prio]  # ready set and weights (ADR 0006)
                # op position, "<seq>:<fraction>", ms: the script prefixes the op's id
                warns: list[int | str] = []
                for pos, i in enumerate(chunk, 1):
                    for w in ops[i].warnings:
                        warns += (pos, f"{w.seq}:{w.fraction}", w.due_ms)
                if warns:  # scheduled by the script for the applied ops (apply.lua header)
                    kargs += [keys.warnings, keys.wake]
                    argv.append(orjson.dumps(warns))
                codes = self._run("apply", kargs, argv)  # one character per op
                if isinstance(codes, bytes):
                    codes = codes.decode()
                for i, code in zip(chunk, codes, strict=True):
                    results[i] = _OUTCOMES[code]
        return results

    @staticmethod
    def _encode_op(op: ApplyOp, create: bool) -> EncodedOp:
        """One apply.lua op (see the script header): its 6 ARGV strings id, action, token,
        seq, due_ms, create flag, then its payload fields and its review-stream entry as flat
        ``[f1, v1, ...]`` lists. ``_apply`` sends the lists of all ops of a call as one JSON
        array (one ``cjson.decode`` per call in Redis): the scalars travel as plain
        arguments, the pairs as JSON, since every extra argument costs the client more
        (redis-py packs argument by argument) than decoding costs Redis (CHANGELOG.md,
        "Firing path CPU (fourth pass)" and the seventh).

        Raises:
            InvalidInput: negative seq or token, more than ``MAX_OP_WARNINGS`` warnings or a
                warning of another dispute.
        """
        esc = op.escalation
        if esc.seq < 0 or (op.token is not None and op.token < 0):
            raise InvalidInput(f"apply for {esc.dispute_id}: seq and token must be >= 0")
        if op.warnings and (len(op.warnings) > MAX_OP_WARNINGS or any(
                w.dispute_id != esc.dispute_id for w in op.warnings)):
            raise InvalidInput(f"apply for {esc.dispute_id}: at most {MAX_OP_WARNINGS} "
                               "warnings, all of this dispute")
        flat = payload_pairs(esc)  # seq and due_ms are its 6th and 8th strings
        notify: list[str] = []
        if op.notify:
            for kv in op.notify.items():
                notify += kv
        return ([str(esc.dispute_id), ApplyAction(op.action).value,
                 "" if op.token is None else str(op.token), flat[5], flat[7],
                 "1" if create else "0"], flat, notify)

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
