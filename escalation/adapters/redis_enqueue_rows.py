"""Rendered Redis enqueues of the CSV import's bulk path: :class:`PayloadTemplate` renders
what ``RedisScheduler.enqueue_many`` sends for an escalation (the enqueue.lua ARGV group,
payload key and shard) from a template per request shape; ``RedisScheduler.enqueue_encoded``
sends the rendered rows."""

from __future__ import annotations

from dataclasses import replace
from uuid import UUID

from escalation.adapters.redis_keys import Keys, shard_of
from escalation.adapters.redis_payload import escalation_to_payload
from escalation.domain.escalation import Escalation

EncodedPayload = tuple[int, str, list[str], str | None]
"""One escalation ready for :meth:`RedisScheduler.enqueue_encoded`: (shard, payload key,
its enqueue.lua ARGV group, its priority weight or None)."""


class PayloadTemplate:
    """The enqueue.lua arguments (``escalation_to_payload``) of every escalation that
    differs from a prototype only in its dispute id, external id, source hash and trace id
    (the CSV import renders each row from the template of its shape).

    The fields around the per-row ones are rendered once from the prototype; :meth:`render`
    yields the same ARGV group, key and shard ``enqueue_many`` would send for the escalation
    (checked against :func:`escalation_to_payload` when the template is made: ``ok``).
    """

    def __init__(self, proto: Escalation, namespace: str, shards: int,
                 weight: str | None) -> None:
        """``proto``: a pending escalation (its state as recorded: seq 1 for an import);
        ``weight``: its stored priority weight (None = not stored). Until :meth:`prepare`
        has run, rows are rendered through ``escalation_to_payload`` itself."""
        self._shards = shards
        self._prefix = [Keys(namespace, n).payload_prefix for n in range(max(shards, 1))]
        self._weight = weight
        self._proto = proto
        self._before: list[str] = []
        self._after: list[str] = []
        self._count = 0
        self._due = ""
        self.ok = False

    def prepare(self) -> None:
        """Render the template's fixed parts once and check them; sets ``ok``."""
        proto = self._proto
        fields = escalation_to_payload(proto)
        names = list(fields)
        h = names.index("h")
        self._before = [v for item in list(fields.items())[:h] for v in item]
        after = [k for k in names[h:] if k not in ("h", "r", "x")]
        self._after = [v for k in after for v in (k, fields[k])]
        self._count = len(names) - (1 if "x" in fields else 0)
        self._due = fields["due_ms"]
        did = str(proto.dispute_id)
        self.ok = True  # render() fills the template itself while it is checked
        self.ok = all(
            self.render(did, ext, proto.source_hash, proto.trace_id)
            == self._reference(did, ext, proto.source_hash, proto.trace_id)
            for ext in (proto.external_id, None, "x\t\\y\"z\u00e9"))

    def _reference(self, dispute_id: str, external_id: str | None, source_hash: str,
                   trace_id: str) -> EncodedPayload:
        """What ``enqueue_many`` sends for the prototype with these per-row values."""
        esc = replace(self._proto, dispute_id=UUID(dispute_id), external_id=external_id,
                      source_hash=source_hash, trace_id=trace_id)
        fields = escalation_to_payload(esc)
        args = [dispute_id, fields["due_ms"], str(len(fields))]
        for item in fields.items():
            args += item
        shard = shard_of(dispute_id, self._shards)
        return (shard, self._prefix[shard] + dispute_id, args, self._weight)

    def render(self, dispute_id: str, external_id: str | None, source_hash: str,
               trace_id: str) -> EncodedPayload:
        """(shard, payload key, ARGV group, weight) of the prototype with these values;
        ``dispute_id`` is the canonical UUID string."""
        if not self.ok:
            return self._reference(dispute_id, external_id, source_hash, trace_id)
        shard = shard_of(dispute_id, self._shards) if self._shards > 1 else 0
        args = [dispute_id, self._due]
        if external_id is None:
            args.append(str(self._count))
            args += self._before
            args += ("h", source_hash, "r", trace_id)
        else:
            args.append(str(self._count + 1))
            args += self._before
            args += ("h", source_hash, "r", trace_id, "x", external_id)
        args += self._after
        return (shard, self._prefix[shard] + dispute_id, args, self._weight)
