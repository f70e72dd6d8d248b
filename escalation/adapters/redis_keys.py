"""The one key-builder for the scheduler's Redis layout (docs/architecture.md, "Redis key layout").

Every key of one shard shares the hash tag ``{<namespace>:<shard>}`` so a Lua script's keys
all live in one Redis Cluster slot. Layout for shard ``s`` of namespace ``ns``::

    escalations:{ns:s}:pending        ZSET   member = dispute id, score = due (epoch ms)
    escalation:{ns:s}:payload:<id>    HASH   the escalation (see redis_scheduler.PAYLOAD_FIELDS)
    escalation:{ns:s}:lock:<id>       STRING "<fencing token>:<worker id>", PX = lease
    escalations:{ns:s}:dead           ZSET   dead letters, score = time dead-lettered (ms)
    escalations:{ns:s}:review         STREAM notifications for the next tier's review queue
    escalations:{ns:s}:fence          STRING fencing-token counter (INCR)
    escalations:{ns:s}:stats          HASH   counters (claimed, stuck, lock_contended, ...)
    escalations:{ns:s}:wake           LIST   wake-up marker for sleeping workers
    escalations:{ns:s}:warnings       ZSET   member "<id>:<seq>:<fraction>", score = warn time (ms)
    escalations:{ns:s}:dead_data      HASH   dead-letter member -> JSON record (docs/reliability.md)
    escalations:{ns:s}:notify_retry   ZSET   notifications to retry, score = retry time (ms)
    escalations:{ns:s}:notify_data    HASH   retry member -> JSON record
    escalations:{ns:s}:decision_failures HASH dispute id -> failed decision attempts
    escalations:{ns:s}:leader:<name>  STRING leader lease token (PX = lease)
    escalations:{ns:s}:ready          ZSET   DUE members, score = due - weight * aging (ADR 0006)
    escalations:{ns:s}:prio           HASH   member -> materiality weight (absent = 0)
    escalations:{ns:0}:retired_decisions HASH removed ledger partition -> its decision figures
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from uuid import UUID


@dataclass(frozen=True, slots=True)
class Keys:
    """Key names for one shard. ``Keys("esc", 0).pending == "escalations:{esc:0}:pending"``."""

    namespace: str = "esc"
    shard: int = 0

    @property
    def tag(self) -> str:
        """The hash tag shared by every key of this shard."""
        return f"{{{self.namespace}:{self.shard}}}"

    @property
    def pending(self) -> str:
        """ZSET of pending escalations, score = due time in epoch ms."""
        return f"escalations:{self.tag}:pending"

    @property
    def payload_prefix(self) -> str:
        """Prefix of payload hashes; ``payload_prefix + dispute_id``."""
        return f"escalation:{self.tag}:payload:"

    @property
    def lock_prefix(self) -> str:
        """Prefix of lock keys; ``lock_prefix + dispute_id``."""
        return f"escalation:{self.tag}:lock:"

    def payload(self, dispute_id: UUID | str) -> str:
        """HASH holding one escalation's payload."""
        return f"{self.payload_prefix}{dispute_id}"

    def lock(self, dispute_id: UUID | str) -> str:
        """Lock key of one escalation (value ``"<token>:<worker>"``)."""
        return f"{self.lock_prefix}{dispute_id}"

    @property
    def dead(self) -> str:
        """ZSET of dead letters, score = dead-lettered time (epoch ms)."""
        return f"escalations:{self.tag}:dead"

    @property
    def review(self) -> str:
        """STREAM of notifications for the next tier's review queue."""
        return f"escalations:{self.tag}:review"

    @property
    def fence(self) -> str:
        """Counter that issues fencing tokens (monotonic per shard)."""
        return f"escalations:{self.tag}:fence"

    @property
    def stats(self) -> str:
        """HASH of counters: claimed, stuck, lock_contended, stale_apply, ..."""
        return f"escalations:{self.tag}:stats"

    @property
    def retired_decisions(self) -> str:
        """HASH ledger partition name -> JSON decision figures of its rows, saved when
        retention removes the partition (kept on shard 0 only; docs/operations.md)."""
        return f"escalations:{self.tag}:retired_decisions"

    @property
    def wake(self) -> str:
        """LIST pushed when an escalation is enqueued earlier than anything pending."""
        return f"escalations:{self.tag}:wake"

    @property
    def warnings(self) -> str:
        """ZSET of pre-breach warnings: member ``"<id>:<seq>:<fraction>"``, score = warning
        time (epoch ms); ``seq`` is the ledger seq at which the tier was entered (docs/sla.md)."""
        return f"escalations:{self.tag}:warnings"

    # ---- reliability (docs/reliability.md): additive keys
    @property
    def dead_data(self) -> str:
        """HASH dead-letter member -> JSON record (kind, dispute id, reason, attempts, entry)."""
        return f"escalations:{self.tag}:dead_data"

    @property
    def notify_retry(self) -> str:
        """ZSET of notifications waiting for a retry, score = retry time (epoch ms)."""
        return f"escalations:{self.tag}:notify_retry"

    @property
    def notify_data(self) -> str:
        """HASH retry member -> JSON record (entry fields, attempts, last error)."""
        return f"escalations:{self.tag}:notify_data"

    @property
    def decision_failures(self) -> str:
        """HASH dispute id -> number of failed decision attempts (poison input)."""
        return f"escalations:{self.tag}:decision_failures"

    # ---- materiality priority, the ready set (docs/adr/0006-ready-set.md): additive keys
    @property
    def ready(self) -> str:
        """ZSET of due members moved out of ``pending`` by claim.lua, score = effective
        priority ``due_ms - weight * aging_ms`` (lower fires first)."""
        return f"escalations:{self.tag}:ready"

    @property
    def prio(self) -> str:
        """HASH member -> materiality weight (integer >= 0, absent = 0), set at enqueue."""
        return f"escalations:{self.tag}:prio"

    def leader(self, name: str) -> str:
        """STRING leader lease ``<token>`` of one role (PX = lease), e.g. ``maintenance``."""
        return f"escalations:{self.tag}:leader:{name}"


def shard_of(dispute_id: UUID | str, shards: int) -> int:
    """Stable shard number (0..shards-1) of a dispute: CRC32 of its id modulo ``shards``."""
    if shards <= 1:
        return 0
    return zlib.crc32(str(dispute_id).encode()) % shards
