"""Wiring of the commands that build no :class:`~escalation.bootstrap.App`: the ledger alone
(no Redis), the ladder directory alone, the signing key files, the embedded servers, the
schema upgrade, the API tokens.

A command module (``entrypoints/cli_*.py``) never imports an adapter: what an ``App`` carries
it reaches through the ``*_for(app)`` functions of ``bootstrap``; what it needs before (or
without) an ``App`` it reaches here. Every function returns a port, a domain value or a
plain value, so the command modules stay free of adapters (docs/architecture.md, "Layers").
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from escalation.bootstrap import (
    App,
    check_identity_before_upgrade,
    ensure_schema,
    resolve_urls,
    retired_figures_for,
)
from escalation.domain.calendars import CalendarRegistry
from escalation.domain.ladder import Ladder
from escalation.ports import TokenStore
from escalation.settings import Settings

if TYPE_CHECKING:  # the adapters are imported by the functions that use them (CLI start-up)
    from escalation.adapters.ladder_history import LadderHistoryStore
    from escalation.adapters.partitions import DropResult, Partition

SIGNING_KEY_FILE_ENV = "ESCALATION_CHECKPOINT_KEY_FILE"
"""The variable naming the checkpoint signing key file (``adapters.signing.KEY_FILE_ENV``)."""
SIGNING_KEY_ENV = "ESCALATION_CHECKPOINT_KEY"
"""The variable holding the checkpoint signing key itself (``adapters.signing.KEY_ENV``)."""


# --------------------------------------------------------------------------- the ledger alone
@contextlib.contextmanager
def ledger_engine(settings: Settings) -> Iterator[sa.Engine]:
    """An engine on the configured database at the Alembic head (the embedded database is
    migrated, a configured one behind the head refused: ``bootstrap.ensure_schema``);
    disposed on exit."""
    from escalation.adapters.db import make_engine

    urls = resolve_urls(settings)
    engine = make_engine(urls.database_url)
    try:
        ensure_schema(engine, urls)
        yield engine
    finally:
        engine.dispose()


@contextlib.contextmanager
def token_store(settings: Settings) -> Iterator[TokenStore]:
    """The API tokens (``ports.TokenStore``) on the configured database at the head; its
    engine is disposed on exit."""
    from escalation.adapters.token_store import PostgresTokenStore

    with ledger_engine(settings) as engine:
        yield PostgresTokenStore(engine)


def maintenance_rows(app: App) -> list[dict[str, Any]]:
    """The last run of each maintenance job (``maintenance status``)."""
    from escalation.adapters.maintenance_runs import runs

    return runs(app.engine)


def ensure_ledger_partitions(engine: sa.Engine, now: datetime,
                             ahead_months: int) -> list[str]:
    """Create this month's and the next ``ahead_months`` months' ledger partitions; returns
    the names created."""
    from escalation.adapters.partitions import ensure_partitions

    return ensure_partitions(engine, now, ahead_months)


def ledger_partitions(engine: sa.Engine) -> list[Partition]:
    """Every monthly ledger partition, oldest first."""
    from escalation.adapters.partitions import list_partitions

    return list_partitions(engine)


@dataclass(frozen=True, slots=True)
class DropExpired:
    """One ``audit partitions drop-expired`` run: the time it runs at, the retention in
    days, who runs it, detach only or drop, and the partitions named (None = every expired
    one)."""

    now: datetime
    retention_days: int
    actor: str
    detach_only: bool = False
    names: list[str] | None = None


def drop_expired_partitions(app: App, run: DropExpired) -> DropResult:
    """Detach or drop the partitions entirely older than retention; each one's decision
    figures are saved in Redis first (``bootstrap.retired_figures_for``)."""
    from escalation.adapters.partitions import ExpiryRun, drop_expired

    return drop_expired(app.engine, ExpiryRun(run.now, run.retention_days, run.actor,
                                              run.detach_only, run.names),
                        retired_figures_for(app).save)


# --------------------------------------------------------------------------- ladder files
def deployment_calendars(settings: Settings) -> CalendarRegistry:
    """The deployment's calendars: built-in plus ``ESCALATION_CALENDARS_FILE``, with the
    institution's calendar and zone."""
    from escalation.adapters.calendar_files import load_institution_calendars

    return load_institution_calendars(settings.calendars_file, settings.institution_calendar,
                                      settings.institution_timezone)


def ladder_versions(settings: Settings) -> list[Ladder]:
    """Every valid ladder version of ``ESCALATION_LADDERS_DIR`` (invalid files skipped)."""
    from escalation.adapters.ladder_files import LadderCatalog

    return LadderCatalog.from_dir(settings.ladders_dir, strict=False).all()


def ladder_lookup(settings: Settings,
                  calendars: CalendarRegistry) -> Callable[[str, int], Ladder]:
    """``(name, version) -> Ladder`` over ``ESCALATION_LADDERS_DIR`` (LadderError when
    unknown; invalid files skipped)."""
    from escalation.adapters.ladder_files import LadderCatalog

    return LadderCatalog.from_dir(settings.ladders_dir, strict=False, calendars=calendars).get


@dataclass(frozen=True, slots=True)
class LadderCheck:
    """What ``ladder check`` found: the problems (empty = valid) and where the applied
    checksums came from, or why they were not compared."""

    errors: list[str]
    note: str


def _history_for_check(settings: Settings) -> tuple[LadderHistoryStore | None, str]:
    """(the ladder history or None, where the checksums came from / why not). Never starts
    the embedded servers: uses the embedded PostgreSQL only when it already runs."""
    from escalation.adapters.db import make_engine
    from escalation.adapters.ladder_history import LadderHistoryStore

    url = settings.database_url
    if not url:
        from escalation.adapters.embedded import services_status

        pg = services_status(settings.home)["postgres"]
        if not pg["running"]:
            return None, "no database configured: checked the files only (no applied checksums)"
        url = pg["url"]
    engine = make_engine(url, pool_size=1)
    try:
        if not sa.inspect(engine).has_table("ladder_history"):
            engine.dispose()
            return None, "database has no ladder_history table (run `escalation db upgrade`): "\
                "checked the files only"
    except Exception as exc:
        engine.dispose()
        return None, f"database not reachable ({type(exc).__name__}): checked the files only"
    return LadderHistoryStore(engine), "applied checksums compared with ladder_history"


def check_ladder_directory(settings: Settings, path: Path, *, own: bool) -> LadderCheck:
    """Every problem of the ladder files in ``path`` against the deployment's calendars and,
    when a database is reachable, the released checksums. ``own``: ``path`` is the configured
    directory (then a database bound to a namespace is this deployment's, and every release
    in it must be one of these files)."""
    from escalation.adapters.db import check_namespace
    from escalation.adapters.ladder_files import check_ladder_dir_with_history

    calendars = deployment_calendars(settings)
    history, note = _history_for_check(settings)
    try:
        if own and history is not None:
            # a bound database is one deployment's: every release in it is this directory's
            own = check_namespace(history._engine, settings.namespace) is not None
        errors = check_ladder_dir_with_history(path, history, calendars, deployment=own)
    finally:
        if history is not None:
            history._engine.dispose()
    return LadderCheck(list(errors), note)


# --------------------------------------------------------------------------- signing keys
def generate_signing_keypair(private_out: Path, public_out: Path) -> None:
    """Write a new Ed25519 checkpoint signing key pair (PEM; the private file 0600)."""
    from escalation.adapters import signing

    signing.generate_keypair(private_out, public_out)


def configured_public_pem() -> bytes | None:
    """The public key (PEM) of the configured checkpoint signing key; None when none is
    configured. Raises ConfigError for an unreadable key."""
    from escalation.adapters import signing

    key = signing.load_private_key()
    return None if key is None else signing.public_pem(key.public_key())


def configured_digest_checker(
        public_key: Path | None) -> Callable[[dict[str, Any]], str | None] | None:
    """A check of a digest's signature under ``public_key`` (PEM file) or, when None, the
    configured public key (``ESCALATION_CHECKPOINT_PUBLIC_KEY_FILE``, else the signing key's
    public half): ``digest -> why it does not verify, or None``. None when no key is
    configured. Raises InvalidInput / ConfigError for a key that cannot be read."""
    from escalation.adapters import signing

    key = signing.configured_public_key(path=public_key)
    if key is None:
        return None
    return lambda digest: signing.verify_signature(digest, key)


def digest_checker(public_key: Path) -> Callable[[dict[str, Any]], str | None]:
    """A check of a digest's signature under the Ed25519 public key in ``public_key`` (PEM):
    ``digest -> why it does not verify, or None``. Raises InvalidInput for a key file that
    cannot be read."""
    from escalation.adapters import signing

    key = signing.load_public_key(public_key)
    return lambda digest: signing.verify_signature(digest, key)


# --------------------------------------------------------------------------- servers
def webhook_key(secret: str) -> bytes:
    """The HMAC key of a webhook secret (``whsec_<base64>`` decoded, else UTF-8 bytes)."""
    from escalation.adapters.webhook import secret_key

    return secret_key(secret)


def embedded_status(home: Path) -> dict[str, Any]:
    """The embedded servers of ``home``: running or not, pid, port, URL."""
    from escalation.adapters.embedded import services_status

    return services_status(home)


def stop_embedded(home: Path) -> list[str]:
    """Stop the embedded servers of ``home``; returns the ones stopped."""
    from escalation.adapters.embedded import stop_services

    return stop_services(home)


def schema_head() -> str:
    """The head revision of the shipped migrations."""
    from escalation.adapters.db import head_revision

    return head_revision()


def upgrade_schema(settings: Settings, *, restored: bool = False) -> tuple[str, str, list[str]]:
    """Refuse a database bound to another namespace, or (unless ``restored``) one other than
    the database the namespace's Redis recorded (``bootstrap.check_identity_before_upgrade``),
    then run every pending migration. Returns (database URL, Redis URL, the revisions
    applied).

    Raises:
        ConfigError: either refusal, before anything is migrated.
    """
    from escalation.adapters.db import check_namespace, make_engine, upgrade_to_head

    urls = resolve_urls(settings)
    engine = make_engine(urls.database_url, pool_size=1)
    try:
        # refuse a mismatch before migrating; an older schema has no binding table yet
        with contextlib.suppress(sa.exc.ProgrammingError):
            check_namespace(engine, settings.namespace)
        if not restored:
            check_identity_before_upgrade(settings, urls.database_url, urls.redis_url)
        applied = upgrade_to_head(urls.database_url)
    finally:
        engine.dispose()
    return urls.database_url, urls.redis_url, applied


def upgrade_database_url(url: str) -> list[str]:
    """Run every pending migration on the database at ``url``; returns those applied."""
    from escalation.adapters.db import upgrade_to_head

    return upgrade_to_head(url)


# --------------------------------------------------------------------------- demo figures
def demo_figures(app: App) -> DemoFigures:
    """The demo's direct questions to the ledger on ``app``'s engine."""
    return DemoFigures(app.engine)


class DemoFigures:
    """What ``escalation demo`` reads back to show that every escalation fired once."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    def decision_counts(self, dispute_ids: list[Any],
                        since: datetime | None = None) -> dict[str, int]:
        """match_decision -> ledger rows over ``dispute_ids`` (decided at or after
        ``since`` when given)."""
        from escalation.adapters.report_queries import decision_counts

        return decision_counts(self._engine, dispute_ids, since=since)

    def duplicate_decisions(self, dispute_ids: list[Any]) -> int:
        """(dispute, from tier, ladder version) decided more than once."""
        from escalation.adapters.report_queries import duplicate_decisions

        return duplicate_decisions(self._engine, dispute_ids)

    def undecided_due(self, dispute_ids: list[Any], at: datetime) -> int:
        """How many of ``dispute_ids`` are pending with a due time <= ``at``."""
        from escalation.adapters.report_queries import undecided_due

        return undecided_due(self._engine, dispute_ids, at)
