"""Which database a Redis namespace belongs to, and the namespace's resync mark (ADR 0014).

Two keys beside the shard-count record (``redis_layout``), under the same hash tag
``{<namespace>:layout}`` (one Redis Cluster slot, whatever the shard count):

- ``escalations:{<namespace>:layout}:database``: the identity stamp of the database the
  namespace was bound with (``adapters.db.database_identity``: the binding's random stamp and
  the database's OID). ``escalation db upgrade`` writes it at binding and refuses a database
  whose identity differs (a restore into a new database, a fresh database) unless told the
  restore is planned (``--restored``).
- ``escalations:{<namespace>:layout}:resync``: set while Redis may be *ahead* of the ledger
  (a restore to an earlier point, a failover that lost commits): its value says why and
  since when. Workers refuse to fire the namespace while it is set; ``doctor`` fails;
  ``escalation reconcile`` resets Redis to the ledger's state and clears it.

Neither key expires. Implements ``escalation.ports.ResyncMark``.
"""

from __future__ import annotations

import json
from typing import Any, cast

import redis


def identity_key(namespace: str) -> str:
    """Key holding the identity stamp of the namespace's database."""
    return f"escalations:{{{namespace}:layout}}:database"


def resync_key(namespace: str) -> str:
    """Key holding the namespace's resync mark (JSON: reason, since_ms, detail)."""
    return f"escalations:{{{namespace}:layout}}:resync"


class NamespaceBinding:
    """The identity stamp and resync mark of one namespace.

    Args:
        client: ``redis.Redis`` (or a cluster / Sentinel client) with
            ``decode_responses=True``.
        namespace: the deployment's ``ESCALATION_NAMESPACE``.
    """

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self._client = client
        self.namespace = namespace

    def database_identity(self) -> str | None:
        """The identity stamp written at binding, or None (never bound by this version)."""
        raw = self._client.get(identity_key(self.namespace))
        return None if raw is None else str(raw)

    def stamp(self, identity: str) -> None:
        """Write ``identity`` as the namespace's database (overwrites)."""
        self._client.set(identity_key(self.namespace), identity)

    def resync(self) -> dict[str, Any] | None:
        """The resync mark (``{"reason", "since_ms", "detail"}``), or None when not set."""
        raw = self._client.get(resync_key(self.namespace))
        if raw is None:
            return None
        try:
            value = json.loads(str(raw))
        except ValueError:
            return {"reason": "unreadable mark", "since_ms": 0, "detail": str(raw)[:200]}
        return cast(dict[str, Any], value) if isinstance(value, dict) else {
            "reason": str(value), "since_ms": 0, "detail": ""}

    def mark_resync(self, reason: str, detail: str = "") -> None:
        """Set the resync mark unless it is set already (the first cause is kept).

        Args:
            reason: a code (``restored``, ``ahead_on_claim``, ``ahead_in_reconcile``).
            detail: free text for the operator (e.g. the dispute ids found ahead).
        """
        seconds, micros = self._client.time()
        body = json.dumps({"reason": reason, "detail": detail[:500],
                           "since_ms": int(seconds) * 1000 + int(micros) // 1000})
        self._client.set(resync_key(self.namespace), body, nx=True)

    def clear_resync(self) -> bool:
        """Delete the resync mark; True when one was set."""
        return bool(self._client.delete(resync_key(self.namespace)))
