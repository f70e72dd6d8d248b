"""The error hierarchy. Entry points map each class to a one-line message and an exit code.

``EscalationError`` is the root; ``InvalidInput`` (and its subclasses) and ``ConflictError``
are the caller's mistakes (CLI exit code 2, nothing written); ``NotFound`` is a name that
exists nowhere (exit code 3, so a script tells "no such dispute" from a mistyped command);
a read-only database (a standby, a failover in progress) is ``DatabaseReadOnly`` (exit code 4:
retry later); the others are operational (exit code 1). The table of every exit code is in
docs/cli.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from copy import copy
from dataclasses import dataclass
from enum import StrEnum
from types import TracebackType
from typing import Literal


class ErrorCode(StrEnum):
    """What an error or a problem is, for the code that acts on it (ADR 0029).

    Code that decides something from an error (dead-letter at once, an HTTP status, a doctor
    verdict) reads its ``code``, never its message: messages are for people and may be
    reworded. Each :class:`EscalationError` class carries one; :func:`code_of` gives the code
    of any exception.
    """

    ERROR = "error"
    """An operational error with no more specific code."""
    INTERNAL = "internal"
    """Not an error this package raises on purpose (a bug, an overflow in a rule)."""
    INVALID_INPUT = "invalid_input"
    """The caller's bad value; nothing is written."""
    UNKNOWN_TIER = "unknown_tier"
    """A tier id the pinned ladder version does not define."""
    LADDER_INVALID = "ladder_invalid"
    """A ladder file that fails validation."""
    RELEASE_BROKEN = "release_broken"
    """A released ladder file missing, invalid or edited after release: retrying cannot
    repair it (workers dead-letter at the first failure; the API answers 503)."""
    UNKNOWN_PLAN_HASH = "unknown_plan_hash"
    """``ladder apply --plan-hash`` names no plan of the change."""
    CONFIG = "config"
    """A configuration value out of its documented range."""
    MIGRATION = "migration"
    """A ladder migration that cannot be planned or applied."""
    VERSION_SUPERSEDED = "version_superseded"
    """A migration to a version below one already applied."""
    NOT_RELEASED = "not_released"
    """A migration to a ladder or version that is not released."""
    SCHEMA_NOT_AT_HEAD = "schema_not_at_head"
    """The database is not at the Alembic head revision."""
    NOT_FOUND = "not_found"
    """A dispute, dead letter or ladder version that does not exist."""
    DATABASE_READ_ONLY = "database_read_only"
    """The database refused a write because it is read-only; retry later."""
    CONFLICT = "conflict"
    """A state transition not allowed now."""
    DUPLICATE_EVENT = "duplicate_event"
    """An event the ledger already holds under a uniqueness rule."""
    SLA_ROLLUP_NOT_BACKFILLED = "sla_rollup_not_backfilled"
    """The SLA rollup has not been folded from the whole ledger yet (no refresh, or its
    backfill unfinished): ``escalation report sla-refresh`` folds it (ADR 0033)."""


class EscalationError(Exception):
    """Root of every error this package raises on purpose."""

    exit_code: int = 1
    code: ErrorCode = ErrorCode.ERROR


def code_of(exc: BaseException) -> ErrorCode:
    """The :class:`ErrorCode` of ``exc``: its class's for an :class:`EscalationError`, else
    ``INTERNAL``."""
    return exc.code if isinstance(exc, EscalationError) else ErrorCode.INTERNAL


class InvalidInput(EscalationError, ValueError):
    """Bad input from a caller: naive datetime, float money, bad UUID, ... Nothing is written.

    ``field``: the input field the error is about (``due_at``, ``materiality``; the API's
    ``errors[].field``), as data, or None when it is about no one field. ``item``: the
    0-based position of the request in a batch (:meth:`in_item`), or None. ``detail``: the
    message without the batch position.
    """

    exit_code = 2
    code = ErrorCode.INVALID_INPUT

    def __init__(self, message: str = "", *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.item: int | None = None
        self.detail = message

    def in_item(self, index: int) -> InvalidInput:
        """A copy of this error about the ``index``-th (0-based) request of a batch: the
        message (for people) starts with ``request <index + 1>: ``; ``item`` is ``index``."""
        out = copy(self)
        out.item = index
        out.args = (f"request {index + 1}: {self.detail}",)
        return out


class InvalidItems(InvalidInput):
    """Several requests of one batch are bad (nothing is written): ``errors`` holds each
    one's :class:`InvalidInput`, its ``item`` set (:meth:`InvalidInput.in_item`), in batch
    order. Its own ``field``, ``item`` and ``detail`` are the first error's; its message (for
    people) is the first one's followed by how many more requests are bad. The API lists
    every one of ``errors`` (``errors[].field`` ``items[i].<field>``); build it with
    :func:`invalid_items`."""

    def __init__(self, errors: Sequence[InvalidInput]) -> None:
        if len(errors) < 2:  # one error is raised as itself
            raise ValueError("InvalidItems needs two errors or more")
        first = errors[0]
        more = len(errors) - 1
        super().__init__(f"{first} (and {more} more bad request{'s' if more > 1 else ''})",
                         field=first.field)
        self.item = first.item
        self.detail = first.detail
        self.errors: tuple[InvalidInput, ...] = tuple(errors)

    def __reduce__(self) -> tuple[type[InvalidItems], tuple[tuple[InvalidInput, ...]]]:
        """Copied and pickled from its errors (the message is derived from them)."""
        return (type(self), (self.errors,))


def invalid_items(errors: Sequence[InvalidInput]) -> InvalidInput:
    """The error to raise for the bad requests of a batch (``errors``, each with its
    ``item``, at least one): the one error itself, or :class:`InvalidItems` holding them
    all."""
    if not errors:
        raise ValueError("invalid_items needs an error")
    return errors[0] if len(errors) == 1 else InvalidItems(errors)


class _About:
    """The context manager of :func:`about` (a class: a generator-based one costs ten times
    as much on the enqueue path)."""

    __slots__ = ("field",)

    def __init__(self, field: str) -> None:
        self.field = field

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        if isinstance(exc, InvalidInput) and exc.field is None:
            exc.field = self.field
        return False  # never swallows


def about(field: str) -> _About:
    """A context that gives an :class:`InvalidInput` raised inside, that names no field,
    ``field`` (``with about("due_at"): ...``)."""
    return _About(field)


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
        super().__init__(self.render(), field=params[0] if params else None)

    def render(self, spell: Callable[[str], str] | None = None) -> str:
        """The message with each parameter spelled by ``spell`` (default: its plain name)."""
        if not self.params and not self.values:
            return self.template  # rebuilt from its message (a copy, a pickle): as is
        names = {p: spell(p) if spell is not None else p for p in self.params}
        return self.template.format(**self.values, **names)


class UnknownTier(InvalidInput):
    """A tier id that the escalation's pinned ladder version does not define."""

    code = ErrorCode.UNKNOWN_TIER


class LadderError(InvalidInput):
    """A ladder file that fails validation (the message names the file and the field)."""

    code = ErrorCode.LADDER_INVALID


@dataclass(frozen=True, slots=True)
class LadderProblem:
    """One problem of the ladder directory, as the doctor and workers act on it.

    Attributes:
        code: ``RELEASE_BROKEN`` for a released version whose file is missing, invalid or
            edited after release; ``LADDER_INVALID`` for any other problem.
        message: the line shown to people.
    """

    code: ErrorCode
    message: str

    def __str__(self) -> str:
        return self.message


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

    code = ErrorCode.RELEASE_BROKEN

    def __init__(self, message: str, release: UnreadableRelease | None = None) -> None:
        super().__init__(message)
        self.release = release


class UnknownPlanHash(InvalidInput):
    """``ladder apply --plan-hash`` names no plan of the requested change (a usage error: 2)."""

    code = ErrorCode.UNKNOWN_PLAN_HASH


class LadderMigrationError(EscalationError):
    """A ladder migration that cannot be planned or applied (drift, demotion, missing map)."""

    code = ErrorCode.MIGRATION


class LadderVersionSuperseded(LadderMigrationError):
    """``ladder plan``/``apply`` to a version below one already applied: a migration only
    moves escalations up to a version, never back (a rollback is a new version that restores
    the earlier tiers, released and applied). Nothing is planned or written (exit code 2)."""

    exit_code = 2
    code = ErrorCode.VERSION_SUPERSEDED


class LadderNotReleased(LadderMigrationError):
    """``ladder plan``/``apply`` asked for a ladder or version that is not released (unknown
    ladder, no file, an invalid file, or a valid file nobody released): the caller's
    mistake, nothing is planned or written (exit code 2)."""

    exit_code = 2
    code = ErrorCode.NOT_RELEASED


class ConfigError(InvalidInput):
    """A configuration value out of its documented range (the message names it and the range)."""

    code = ErrorCode.CONFIG


class SchemaNotAtHead(EscalationError):
    """The database is not at the Alembic head revision; run ``escalation db upgrade``
    (a setup step the operator must take, like a bad setting: exit code 2)."""

    exit_code = 2
    code = ErrorCode.SCHEMA_NOT_AT_HEAD


class NotFound(EscalationError):
    """A dispute, dead letter or ladder version that does not exist (CLI exit code 3, distinct
    from a usage error's 2; nothing is written)."""

    exit_code = 3
    code = ErrorCode.NOT_FOUND


class LadderVersionNotFound(NotFound):
    """A ladder version with no file in the ladder directory and no release: ``ladder
    release``, ``ladder plan`` and ``ladder apply`` name a version that does not exist (CLI
    exit code 3, docs/cli.md; code ``NOT_FOUND``). Nothing is written. A file that exists
    but fails validation is a :class:`LadderError` (exit 2), not this."""


class LadderNotFound(LadderError, NotFound):
    """A ladder name that no ladder file and no release has, where a command names a ladder
    to act on (``ladder plan/apply/history``, ``enqueue --ladder``, an import mapping's
    ladder, an audit search's ``--ladder`` filter): CLI exit code 3 like every name that
    does not exist (docs/cli.md), code ``NOT_FOUND``. Nothing is written. A malformed name
    (:func:`escalation.domain.ladder.unknown_ladder`) stays a :class:`LadderError` (exit 2).

    It is also an :class:`InvalidInput` (``field`` ``ladder``): in an HTTP request body or
    query the name is a field of a request the server cannot process, a 422 naming the
    field, as an unknown tier is."""

    exit_code = 3
    code = ErrorCode.NOT_FOUND


class RollupNotBackfilled(EscalationError):
    """The SLA rollup (ADR 0033) has not been folded from the whole ledger yet: no refresh
    has run, or its backfill was interrupted or is still running. A reader that does not
    write the backfill itself (the console's SLA page, ``GET /v1/reports/sla``) refuses
    rather than answer from a partial rollup; ``escalation report sla-refresh`` folds it
    (resumable; the API answers 503 with this code)."""

    code = ErrorCode.SLA_ROLLUP_NOT_BACKFILLED

    def __init__(self, message: str = "", *, why: str = "") -> None:
        super().__init__(message)
        self.why = why  # the reason alone (no refresh ran, backfill unfinished, ...)


class DatabaseReadOnly(EscalationError):
    """The database refused a write because it is read-only: a hot standby, or a primary in a
    failover's read-only window (PostgreSQL SQLSTATE 25006, ``read_only_sql_transaction``).
    Nothing was written; the same call succeeds once a writable primary answers (the adapter
    raises it; workers back off, the CLI exits 4, the API answers 503 with ``Retry-After``)."""

    exit_code = 4
    code = ErrorCode.DATABASE_READ_ONLY


class ConflictError(EscalationError):
    """A state transition that is not allowed now (e.g. pause a paused escalation): 2."""

    exit_code = 2
    code = ErrorCode.CONFLICT


class DuplicateEvent(EscalationError):
    """An event the ledger already holds under a uniqueness rule (e.g. a WARNING for the same
    dispute, tier seq and fraction): nothing was written. The audit store raises it for a
    unique violation, so callers never see a database error type."""

    code = ErrorCode.DUPLICATE_EVENT
