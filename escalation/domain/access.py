"""Access to the HTTP API: roles, what each may do, and a stored token's description.

Roles (checked by :func:`allowed`):

* ``service``: create, cancel, pause, resume, read an escalation's status;
* ``compliance``: read audit trails, audit search, ladders, the SLA report and metrics;
* ``admin``: everything, tokens included.

A token may be narrowed (docs/adr/0011-http-hardening.md): ``read_only`` takes the write
permission away (any role); ``sources`` (service tokens only) limits the disputes it may
name to those of the listed source systems. A token with neither is *unscoped*.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from escalation.domain.errors import InvalidInput

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
"""A token name. No ``@`` and no ``:``: the actors the product writes itself have one
(``user@host`` for ladder releases and applies, ``host:pid:hex`` for workers)."""

RESERVED_NAMES = frozenset({"api", "baseline", "cli", "demo", "doctor", "import",
                            "maintenance-cli", "reconcile", "admin", "worker", "system"})
"""Actors the CLI, the API process and the workers write on ledger rows themselves
(compared case-insensitively): a token of that name would make an API caller's rows
indistinguishable from an operator's."""


class Role(StrEnum):
    """A token's role."""

    SERVICE = "service"
    COMPLIANCE = "compliance"
    ADMIN = "admin"


class Permission(StrEnum):
    """What a route needs."""

    WRITE = "write"  # create, cancel, pause, resume
    STATUS = "status"  # read one escalation's state
    AUDIT = "audit"  # audit trail, search, ladders, SLA report, metrics
    TOKENS = "tokens"  # manage tokens


GRANTS: dict[Role, frozenset[Permission]] = {
    Role.SERVICE: frozenset({Permission.WRITE, Permission.STATUS}),
    Role.COMPLIANCE: frozenset({Permission.AUDIT}),
    Role.ADMIN: frozenset(Permission),
}


def allowed(role: Role, permission: Permission) -> bool:
    """Whether ``role`` holds ``permission`` (see the module docstring)."""
    return permission in GRANTS[role]


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """One stored token (never the secret). Times are aware UTC."""

    name: str
    role: Role
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    sources: tuple[str, ...] | None = None
    """The source systems whose disputes the token may name; None = every dispute."""
    read_only: bool = False
    """True: the token never holds ``Permission.WRITE``."""

    def permits(self, permission: Permission) -> bool:
        """Whether the token holds ``permission``: its role's, less WRITE if read-only."""
        if self.read_only and permission is Permission.WRITE:
            return False
        return allowed(self.role, permission)

    @property
    def scoped(self) -> bool:
        """Whether the token is limited to some sources (its disputes are checked)."""
        return self.sources is not None

    def scope_text(self) -> str:
        """``"unscoped (every source), read-write"`` or ``"sources: a, b; read-only"``."""
        where = ("unscoped (every source)" if self.sources is None
                 else "sources: " + ", ".join(self.sources))
        return f"{where}; {'read-only' if self.read_only else 'read-write'}"

    def state(self, now: datetime) -> str:
        """``"revoked"``, ``"expired"`` or ``"active"`` at ``now``."""
        if self.revoked_at is not None:
            return "revoked"
        return "expired" if now >= self.expires_at else "active"


def parse_role(value: str) -> Role:
    """``Role`` from text. Raises InvalidInput naming the known roles."""
    try:
        return Role(value)
    except ValueError:
        raise InvalidInput(
            f"role must be one of {', '.join(r.value for r in Role)}, got {value!r}"
        ) from None


SOURCE_SCOPE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
"""A source name in a token's scope (the rule of ``service_layer.disputes.check_source``)."""
MAX_SOURCES = 32


def check_scope(role: Role, sources: list[str] | tuple[str, ...] | None
                ) -> tuple[str, ...] | None:
    """A token's source scope: None (unscoped) or 1-32 distinct source names.

    Raises:
        InvalidInput: a bad source name, more than 32, or a scope on a compliance or admin
            token (they read the whole ledger by design; only service tokens name disputes
            on behalf of one system).
    """
    if sources is None or len(sources) == 0:
        return None
    if role is not Role.SERVICE:
        raise InvalidInput(f"source: only a service token can be limited to sources; a "
                           f"{role.value} token reads every dispute by design")
    out = tuple(dict.fromkeys(sources))
    if len(out) > MAX_SOURCES:
        raise InvalidInput(f"source: at most {MAX_SOURCES} sources per token, got {len(out)}")
    for s in out:
        if not SOURCE_SCOPE_RE.match(s):
            raise InvalidInput(f"source must be 1-64 letters, digits or _.- starting with a "
                               f"letter or digit, got {s[:80]!r}")
    return out


def check_name(name: str) -> str:
    """A token name: 1-64 of letters, digits and ``_.-``, starting alphanumeric, and not one
    of :data:`RESERVED_NAMES`.

    Raises:
        InvalidInput: anything else (the name is written as the actor of ledger rows, so it
            must not pass for an actor the product writes itself).
    """
    if not NAME_RE.match(name):
        raise InvalidInput(
            f"token name must be 1-64 characters of letters, digits and _.- "
            f"starting with a letter or digit, got {name!r}"
        )
    if name.lower() in RESERVED_NAMES:
        raise InvalidInput(
            f"token name {name!r} is reserved: the CLI, the API or the workers record it as "
            "the actor of their own ledger rows; name the caller (e.g. disputes-svc)")
    return name
