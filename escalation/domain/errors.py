"""The error hierarchy. Entry points map each class to a one-line message and an exit code.

``EscalationError`` is the root; ``InvalidInput`` (and its subclasses) and ``ConflictError``
are the caller's mistakes (CLI exit code 2, nothing written); ``NotFound`` is a name that
exists nowhere (exit code 3, so a script tells "no such dispute" from a mistyped command);
a read-only database (a standby, a failover in progress) is ``DatabaseReadOnly`` (exit code 4:
retry later); the others are operational (exit code 1). The table of every exit code is in
docs/cli.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum


class EscalationError(Exception):
    """Root of every error this package raises on purpose."""

    exit_code: int = 1


class InvalidInput(EscalationError, ValueError):
    """Bad input from a caller: naive datetime, float money, bad UUID, ... Nothing is written."""

    exit_code = 2


class InvalidParameter(InvalidInput):
    """Bad input about named parameters, whose spelling depends on the interface that took
    them: ``--from`` on the command line, ``from`` in an API query.

    A layer below the entry points does not know which interface it serves, so it must not
    write either spelling into its message. It gives a template whose ``{name}`` fields are
    the parameters (``"{from} ({since}) is after {to} ({until})"``), their plain names
    (``"from", "to"``) and the other values; each entry point renders the message with its own
    spelling (:meth:`render`): the CLI ``--from``, the API ``from``. ``str()`` uses the plain
    names. ``params[0]`` is the parameter the error is about (the API's ``errors[].field``).
    """

    def __init__(self, template: str, *params: str, **values: object) -> None:
        self.template = template
        self.params = params
        self.values = values
        super().__init__(self.render())

    def render(self, spell: Callable[[str], str] | None = None) -> str:
        """The message with each parameter spelled by ``spell`` (default: its plain name)."""
        if not self.params and not self.values:
            return self.template  # rebuilt from its message (a copy, a pickle): as is
        names = {p: spell(p) if spell is not None else p for p in self.params}
        return self.template.format(**self.values, **names)


class UnknownTier(InvalidInput):
    """A tier id that the escalation's pinned ladder version does not define."""


class LadderError(InvalidInput):
    """A ladder file that fails validation (the message names the file and the field)."""


RELEASE_BROKEN = "released ladder file broken"
"""Prefix of every :class:`LadderReleaseError` message; the dead-letter hook recognises it in
the reason string and dead-letters at once (retrying cannot repair a file)."""


class ReleaseFault(StrEnum):
    """Why a released ladder version cannot be read from the ladder directory."""

    MISSING = "missing"
    """No file ``<ladder>.v<version>.toml`` in the directory (e.g. released from a shell whose
    ``ESCALATION_LADDERS_DIR`` is another directory)."""
    INVALID = "invalid"
    """The file is there but no longer parses or validates."""
    EDITED = "edited"
    """The file's SHA-256 differs from the checksum recorded at release."""


@dataclass(frozen=True, slots=True)
class UnreadableRelease:
    """A released ladder version this process cannot read from its ladder directory.

    Attributes:
        ladder: the ladder's name.
        version: the released version.
        fault: why (:class:`ReleaseFault`).
        expected_checksum: SHA-256 (hex) recorded by ``ladder release``.
        found_checksum: SHA-256 (hex) of the file found, or None when there is no file.
        file: the file name the directory should hold (``<ladder>.v<version>.toml``).
    """

    ladder: str
    version: int
    fault: ReleaseFault
    expected_checksum: str
    found_checksum: str | None
    file: str

    def advice(self) -> str:
        """What an operator does about it, in one sentence (logs, API problems, console)."""
        if self.fault is ReleaseFault.MISSING:
            return (f"copy the released file {self.file} into this server's ladder directory "
                    "(ESCALATION_LADDERS_DIR), or release from that directory; it is read "
                    "again without a restart")
        if self.fault is ReleaseFault.INVALID:
            return (f"restore the released {self.file} (it no longer validates) in this "
                    "server's ladder directory (ESCALATION_LADDERS_DIR); it is read again "
                    "without a restart")
        return (f"restore the released {self.file} in this server's ladder directory "
                "(ESCALATION_LADDERS_DIR) and put the change in a new version; it is read "
                "again without a restart")


class LadderReleaseError(LadderError):
    """A released ladder version whose file is missing, invalid, or edited after release
    (its SHA-256 differs from the checksum recorded by ``ladder release``). Escalations pinned
    to it cannot be decided until the released file is restored; workers dead-letter them.

    ``release`` names the ladder, version and fault as values (None only where the caller
    had no release row at hand): entry points act on it, never on the message."""

    def __init__(self, message: str, release: UnreadableRelease | None = None) -> None:
        super().__init__(message)
        self.release = release


class UnknownPlanHash(InvalidInput):
    """``ladder apply --plan-hash`` names no plan of the requested change (a usage error: 2)."""


class LadderMigrationError(EscalationError):
    """A ladder migration that cannot be planned or applied (drift, demotion, missing map)."""


class LadderVersionSuperseded(LadderMigrationError):
    """``ladder plan``/``apply`` to a version below one already applied: a migration only
    moves escalations up to a version, never back (a rollback is a new version that restores
    the earlier tiers, released and applied). Nothing is planned or written (exit code 2)."""

    exit_code = 2


class LadderNotReleased(LadderMigrationError):
    """``ladder plan``/``apply`` asked for a ladder or version that is not released (unknown
    ladder, no file, an invalid file, or a valid file nobody released): the caller's
    mistake, nothing is planned or written (exit code 2)."""

    exit_code = 2


class ConfigError(InvalidInput):
    """A configuration value out of its documented range (the message names it and the range)."""


class SchemaNotAtHead(EscalationError):
    """The database is not at the Alembic head revision; run ``escalation db upgrade``
    (a setup step the operator must take, like a bad setting: exit code 2)."""

    exit_code = 2


class NotFound(EscalationError):
    """A dispute, dead letter or ladder version that does not exist (CLI exit code 3, distinct
    from a usage error's 2; nothing is written)."""

    exit_code = 3


class DatabaseReadOnly(EscalationError):
    """The database refused a write because it is read-only: a hot standby, or a primary in a
    failover's read-only window (PostgreSQL SQLSTATE 25006, ``read_only_sql_transaction``).
    Nothing was written; the same call succeeds once a writable primary answers (the adapter
    raises it; workers back off, the CLI exits 4, the API answers 503 with ``Retry-After``)."""

    exit_code = 4


class ConflictError(EscalationError):
    """A state transition that is not allowed now (e.g. pause a paused escalation): 2."""

    exit_code = 2


class DuplicateEvent(EscalationError):
    """An event the ledger already holds under a uniqueness rule (e.g. a WARNING for the same
    dispute, tier seq and fraction): nothing was written. The audit store raises it for a
    unique violation, so callers never see a database error type."""
