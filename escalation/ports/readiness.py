"""The readiness probe (``/readyz``): whether Redis and PostgreSQL answer and the schema is at
the Alembic head, as codes. A driver's message travels beside the code for the log only: it
may name an internal address, and nothing acts on it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol


class ServerFault(StrEnum):
    """Why one backing server is not ready."""

    UNREACHABLE = "unreachable"
    """It did not answer (refused, reset, a failover, a read-only replica, ...)."""
    TIMEOUT = "timeout"
    """It did not answer within the client's I/O timeout (``Settings.io_timeout_s``)."""
    SCHEMA_NOT_AT_HEAD = "schema_not_at_head"
    """PostgreSQL answered, but its schema is not at the Alembic head this code expects."""


@dataclass(frozen=True, slots=True)
class ServerCheck:
    """One backing server's answer to the probe: ``fault`` None = ready."""

    fault: ServerFault | None = None
    error: str | None = None
    """The driver's error as ``Type: first line`` when it did not answer, for the log only;
    None when it answered."""

    @property
    def ok(self) -> bool:
        """True when the server is ready."""
        return self.fault is None


@dataclass(frozen=True, slots=True)
class BackingServers:
    """The probe's answer: Redis, then PostgreSQL (checked in that order)."""

    redis_check: ServerCheck
    postgres_check: ServerCheck

    @property
    def ok(self) -> bool:
        """True when both are ready."""
        return self.redis_check.ok and self.postgres_check.ok


class ReadinessProbe(Protocol):
    """Asks the process's Redis and PostgreSQL whether they serve it now."""

    def check(self) -> BackingServers:
        """PING Redis, then read PostgreSQL's Alembic revision; never raises for a server
        that does not answer (that is a :class:`ServerFault`)."""
        ...
