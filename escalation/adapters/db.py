"""PostgreSQL connection and schema helpers: URL normalisation, engine, Alembic from code.

Nothing here runs at import time. The Alembic scripts ship with the package
(``escalation.resources.migrations_dir()``: inside the wheel, or the checkout's
``migrations/`` for an editable install); the
database URL reaches ``migrations/env.py`` through ``Config.attributes["database_url"]``
(never through the ini file, so a ``%`` in a password needs no escaping).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import weakref
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

import sqlalchemy as sa
from psycopg.adapt import Loader
from psycopg.pq import Format

from escalation.domain.errors import ConfigError, DatabaseReadOnly, SchemaNotAtHead
from escalation.resources import migrations_dir

if TYPE_CHECKING:  # Alembic is imported only by the commands that migrate (CLI start-up)
    from alembic.config import Config

DRIVER = "postgresql+psycopg"
_ACCEPTED_DRIVERS = frozenset(
    {"postgres", "postgresql", "postgresql+psycopg", "postgresql+psycopg2", "postgresql+psycopg3"}
)


def normalize_url(url: str) -> str:
    """A SQLAlchemy psycopg 3 URL (``postgresql+psycopg://...``) for any PostgreSQL URL.

    Accepts ``postgresql://``, ``postgres://``, ``postgresql+psycopg://`` (and ``+psycopg2``,
    rewritten to psycopg 3), including socket-directory URLs such as
    ``postgresql://postgres:@/db?host=/tmp/x``. Query parameters and the password are kept.
    Both libpq multi-host forms are accepted, with ``target_session_attrs`` and the other
    libpq parameters passed through: ``postgresql://u@h1:5432,h2:5433/db`` is rewritten to
    the equivalent ``postgresql://u@/db?host=h1,h2&port=5432,5433``, which is kept as is.

    Raises:
        ConfigError: empty, unparsable, or not a PostgreSQL URL (the message names the part).
    """
    text = (url or "").strip()
    if not text:
        raise ConfigError("database URL is empty (set ESCALATION_DATABASE_URL)")
    text = _multihost_to_query(text)
    try:
        parsed = sa.engine.make_url(text)
    except sa.exc.ArgumentError as exc:
        raise ConfigError(f"database URL is not a valid URL: {exc}") from None
    if parsed.drivername not in _ACCEPTED_DRIVERS:
        raise ConfigError(f"database URL must be postgresql:// (got scheme {parsed.drivername!r})")
    return parsed.set(drivername=DRIVER).render_as_string(hide_password=False)


def _multihost_to_query(text: str) -> str:
    """``scheme://[user@]h1[:p1],h2[:p2]/db?q`` -> ``scheme://[user@]/db?host=h1,h2&port=p1,p2&q``
    (libpq's two spellings of one host list; SQLAlchemy's URL parser reads only the second).
    Any other URL is returned unchanged. A host without a port gets libpq's 5432.

    Raises:
        ConfigError: a host entry of the list is empty or its port is not a number.
    """
    scheme, sep, rest = text.partition("://")
    if not sep:
        return text
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    netloc, tail = rest[:cut], rest[cut:]
    userinfo, at, hostlist = netloc.rpartition("@")
    if "," not in hostlist:
        return text
    hosts: list[str] = []
    ports: list[str] = []
    for entry in hostlist.split(","):
        if entry.startswith("["):  # [IPv6]:port
            host, _, port = entry[1:].partition("]")
            port = port.removeprefix(":")
        else:
            host, _, port = entry.partition(":")
        if not host:
            raise ConfigError(f"database URL: empty host in the host list {hostlist!r}")
        if port and not port.isdigit():
            raise ConfigError(f"database URL: port {port!r} of host {unquote(host)!r} in the "
                              f"host list is not a number")
        hosts.append(quote(unquote(host), safe=":"))
        ports.append(port or "5432")
    path, q, query = tail.partition("?")
    params = f"host={','.join(hosts)}&port={','.join(ports)}"
    return f"{scheme}://{userinfo}{at}{path or '/'}?{params}{'&' + query if q and query else ''}"


_UTC_LOADERS: dict[Format, type[Loader]] = {}


def _utc_loader(fmt: Format) -> type[Loader]:
    """A ``timestamptz`` loader that returns every value in UTC (``datetime.UTC``) whatever
    the session's ``TimeZone``: psycopg's own loader (the C one when installed) does the
    parsing, the instant is only moved to UTC when the session zone is another one."""
    if fmt not in _UTC_LOADERS:
        import psycopg

        inner_cls = psycopg.adapters.get_loader(
            psycopg.adapters.types["timestamptz"].oid, fmt)
        if inner_cls is None:  # pragma: no cover - psycopg always ships both
            raise RuntimeError("psycopg has no timestamptz loader")

        class UtcTimestamptzLoader(Loader):
            format = fmt

            def __init__(self, oid: int, context: Any = None) -> None:
                super().__init__(oid, context)
                self._inner = inner_cls(oid, context)  # type: ignore[misc]

            def load(self, data: Any) -> datetime:
                value: datetime = self._inner.load(data)
                return value if value.tzinfo is UTC else value.astimezone(UTC)

        _UTC_LOADERS[fmt] = UtcTimestamptzLoader
    return _UTC_LOADERS[fmt]


def _read_timestamps_in_utc(dbapi_connection: Any, _record: Any) -> None:
    """SQLAlchemy ``connect`` hook: every ``timestamptz`` this connection reads comes back in
    UTC, without setting the session's ``TimeZone`` (session state a transaction-pooling
    pooler would hand to another client or lose; docs/postgresql.md, "Poolers")."""
    for fmt in (Format.TEXT, Format.BINARY):
        dbapi_connection.adapters.register_loader("timestamptz", _utc_loader(fmt))


READ_ONLY_SQLSTATE = "25006"
"""PostgreSQL's ``read_only_sql_transaction``: a write on a hot standby, or on a primary
in a read-only window (``default_transaction_read_only``, a failover being prepared)."""


def _read_only_as_domain_error(context: Any) -> None:
    """SQLAlchemy ``handle_error`` hook: a write refused because the server is read-only
    (SQLSTATE 25006, by code, never by message) becomes :class:`DatabaseReadOnly`, and the
    connection is dropped with every pooled one (``is_disconnect``): the next connection
    goes through libpq's host selection again, so a multi-host URL with
    ``target_session_attrs=read-write`` finds the writable primary."""
    original = context.original_exception
    if getattr(original, "sqlstate", None) != READ_ONLY_SQLSTATE:
        return
    context.is_disconnect = True
    raise DatabaseReadOnly(
        "the database is read-only (a hot standby, or a failover in progress): nothing was "
        "written; retry once a writable primary answers") from original


@contextlib.contextmanager
def driver_errors() -> Iterator[None]:
    """Around statements run on the psycopg connection itself (the COPY paths), which
    SQLAlchemy's ``handle_error`` never sees: a read-only refusal (SQLSTATE 25006) becomes
    :class:`DatabaseReadOnly` there too. Other errors pass unchanged."""
    import psycopg

    try:
        yield
    except psycopg.Error as exc:
        if exc.sqlstate == READ_ONLY_SQLSTATE:
            raise DatabaseReadOnly(
                "the database is read-only (a hot standby, or a failover in progress): "
                "nothing was written; retry once a writable primary answers") from exc
        raise


def database_writable(engine: sa.Engine) -> bool:
    """True when the server the engine reaches accepts writes (not in recovery, and not
    read-only by default): one round trip, nothing written.

    Raises:
        sqlalchemy.exc.OperationalError / InterfaceError: the server does not answer.
    """
    with engine.connect() as conn:
        writable = conn.execute(sa.text(
            "SELECT NOT pg_is_in_recovery() "
            "AND current_setting('default_transaction_read_only') = 'off'")).scalar_one()
    if not writable:
        engine.dispose()  # the next connection picks its host again (multi-host URLs)
    return bool(writable)


def no_jit(conn: sa.Connection) -> None:
    """No JIT compilation for the rest of ``conn``'s transaction (``SET LOCAL``: safe behind
    a transaction pooler). For reads that aggregate or stream many rows in a few hundred
    ms, where compiling the plan's expressions costs more than it saves: 60-140 ms of the
    SLA rollup's window aggregates on 800,000 rows, 70-200 ms of the overview's count of
    220,000 pending escalations, 1-2 s before a streamed export's first row."""
    conn.execute(sa.text("SET LOCAL jit = off"))


def make_engine(url: str, pool_size: int = 5, io_timeout_s: float | None = None,
                pre_ping: bool = True) -> sa.Engine:
    """A SQLAlchemy engine on psycopg 3 with ``pool_pre_ping`` (connections checked on checkout).

    Args:
        url: any URL :func:`normalize_url` accepts.
        pool_size: connections kept open; up to ``pool_size`` more overflow under load.
        io_timeout_s: bound network waits (seconds): libpq ``connect_timeout``, TCP keepalives
            (idle 5 s, interval 2 s, 3 probes: a dead peer is noticed in ~11 s) and
            ``tcp_user_timeout`` (data unacknowledged this long, x2, drops the connection),
            and the wait for a pooled connection. None: libpq defaults (unbounded).
            libpq has no client-side read timeout: a query whose reply never comes on a
            TCP path that still acknowledges packets is bounded by the keepalives only.
        pre_ping: check each connection with a round trip on checkout. False for a hot path
            that retries once on a dropped connection itself (the pool replaces a connection
            that failed with a disconnect error).

    Every connection works through a transaction-pooling pooler (pgbouncer
    ``pool_mode = transaction``) as well as directly: no server-side prepared statements
    (psycopg's ``prepare_threshold=None``: a pooler hands the next transaction to a server
    connection that does not have them) and no session settings (no ``options`` startup
    parameter; ``timestamptz`` values are read in UTC by the client whatever the server's
    ``TimeZone``, and no SQL of the product depends on the session zone).

    A write the server refuses as read-only (SQLSTATE 25006) raises
    :class:`~escalation.domain.errors.DatabaseReadOnly` (not a driver error), and drops the
    pooled connections.

    Raises:
        ConfigError: the URL is not a PostgreSQL URL.
    """
    connect_args: dict[str, object] = {
        "application_name": "escalation",
        "prepare_threshold": None,  # transaction pooling: no server-side prepared statements
    }
    extra: dict[str, object] = {}
    if io_timeout_s is not None:
        connect_args.update(
            connect_timeout=max(2, math.ceil(io_timeout_s)),  # libpq: whole seconds, >= 2
            keepalives=1, keepalives_idle=5, keepalives_interval=2, keepalives_count=3,
            tcp_user_timeout=int(io_timeout_s * 2000),
        )
        extra["pool_timeout"] = max(5.0, io_timeout_s * 2)
    engine = sa.create_engine(
        normalize_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=pre_ping,
        connect_args=connect_args,
        **extra,
    )
    sa.event.listen(engine, "connect", _read_timestamps_in_utc)
    sa.event.listen(engine, "handle_error", _read_only_as_domain_error)
    _ENGINES.add(engine)
    return engine


_ENGINES: weakref.WeakSet[sa.Engine] = weakref.WeakSet()
"""Every engine :func:`make_engine` made that is still alive."""


def _fresh_pools_in_child() -> None:
    """In a forked child, give every engine a new, empty pool without closing the parent's
    connections (SQLAlchemy's ``dispose(close=False)``, its documented answer to
    ``os.fork``): a child that queries opens connections of its own instead of writing on
    sockets its parent is using (the CSV import's two-process pass 1)."""
    for engine in list(_ENGINES):
        engine.dispose(close=False)


os.register_at_fork(after_in_child=_fresh_pools_in_child)


def alembic_config(url: str | None = None) -> Config:
    """An Alembic ``Config`` pointing at ``migrations/``; ``url`` goes into its attributes.

    With ``url`` None, ``migrations/env.py`` falls back to ``ESCALATION_DATABASE_URL``.
    """
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    if url is not None:
        cfg.attributes["database_url"] = normalize_url(url)
    return cfg


def upgrade_to_head(url: str) -> list[str]:
    """Run every pending Alembic revision on the database at ``url`` (idempotent).

    Returns:
        The revisions applied, oldest first, as ``"<id> (<message>)"``; empty when the
        database was already at head.

    Raises:
        ConfigError: bad URL. Database errors propagate (sqlalchemy.exc.*).
    """
    engine = make_engine(url, pool_size=1)
    try:
        before = current_revision(engine)
    finally:
        engine.dispose()
    from alembic import command
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory(str(migrations_dir()))
    pending = [
        f"{rev.revision} ({rev.doc})"
        for rev in scripts.iterate_revisions("head", before or "base")
        if rev.revision != before
    ]
    command.upgrade(alembic_config(url), "head")
    return list(reversed(pending))


def downgrade(url: str, rev: str) -> None:
    """Downgrade the database at ``url`` to revision ``rev`` (``"base"`` drops everything).

    Dropping the ledger destroys the audit record: only for tests and fresh installs.
    """
    from alembic import command

    command.downgrade(alembic_config(url), rev)


def current_revision(engine: sa.Engine) -> str | None:
    """The Alembic revision the database is at, or None if it was never migrated.

    Read from Alembic's ``alembic_version`` table with one query (what
    ``MigrationContext.get_current_revision`` reads), so a command's schema check does not
    import Alembic.
    """
    with engine.connect() as conn:
        if conn.execute(sa.text("SELECT to_regclass('alembic_version')")).scalar() is None:
            return None
        return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()


_REVISION_LINE = re.compile(r'^(revision|down_revision)\b[^=]*=\s*["\']([^"\']+)["\']', re.M)
_head_cache: dict[str, str] = {}


def head_revision() -> str:
    """The head revision of the scripts shipped in ``migrations/versions``: the revision no
    other revision names as its ``down_revision``.

    Read from the files' ``revision`` / ``down_revision`` lines without importing Alembic or
    the scripts (every command checks the schema at start-up; ``tests/unit/test_db_head.py``
    checks it against Alembic's ``ScriptDirectory``).

    Raises:
        SchemaNotAtHead: no revision, or not exactly one head.
    """
    folder = migrations_dir()
    cached = _head_cache.get(str(folder))
    if cached is not None:
        return cached
    revisions: set[str] = set()
    downs: set[str] = set()
    for path in (folder / "versions").glob("*.py"):
        for kind, rev in _REVISION_LINE.findall(path.read_text(encoding="utf-8")):
            (revisions if kind == "revision" else downs).add(rev)
    heads = revisions - downs
    if len(heads) != 1:  # pragma: no cover - the repository ships one linear history
        raise SchemaNotAtHead(f"expected one Alembic head under {folder}, found "
                              f"{sorted(heads) or 'none'}")
    _head_cache[str(folder)] = head = heads.pop()
    return head


def check_at_head(engine: sa.Engine) -> None:
    """Refuse to run against a database whose schema is not the one this code expects.

    Raises:
        SchemaNotAtHead: with the current and expected revisions and the command to run.
    """
    current = current_revision(engine)
    expected = head_revision()
    if current != expected:
        shown = current or "none (never migrated)"
        raise SchemaNotAtHead(
            f"database is at revision {shown}, code expects {expected}: run `escalation db upgrade`"
        )


def bind_namespace(engine: sa.Engine, namespace: str) -> str:
    """Bind the database to ``namespace`` unless it is bound already; return the binding.

    Raises:
        ConfigError: the database is bound to another namespace (two deployments must not
            share one database: reconcile, maintenance and the ledger queries are
            database-wide).
    """
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO deployment_binding (id, namespace) VALUES (1, :ns) "
            "ON CONFLICT (id) DO NOTHING"), {"ns": namespace})
        bound = str(conn.execute(sa.text(
            "SELECT namespace FROM deployment_binding WHERE id = 1")).scalar_one())
    if bound != namespace:
        raise ConfigError(_mismatch(engine, bound, namespace))
    return bound


def check_namespace(engine: sa.Engine, namespace: str) -> str | None:
    """The namespace the database is bound to (None = not bound yet: ``db upgrade`` binds it).

    Raises:
        ConfigError: bound to a namespace other than ``namespace``.
    """
    with engine.connect() as conn:
        bound = conn.execute(sa.text(
            "SELECT namespace FROM deployment_binding WHERE id = 1")).scalar_one_or_none()
    if bound is not None and bound != namespace:
        raise ConfigError(_mismatch(engine, str(bound), namespace))
    return None if bound is None else str(bound)


def _mismatch(engine: sa.Engine, bound: str, namespace: str) -> str:
    return (f"database {engine.url.database!r} belongs to namespace {bound!r}, not "
            f"{namespace!r}: one database serves one deployment; give this deployment its own "
            "database (or set ESCALATION_NAMESPACE to the bound one)")


_IDENTITY_SQL = sa.text(
    "SELECT b.stamp, d.oid FROM deployment_binding b "
    "JOIN pg_database d ON d.datname = current_database() WHERE b.id = 1")


def database_identity(engine: sa.Engine) -> str | None:
    """The identity stamp of this database: ``<binding stamp>/<database OID>``, or None when
    the database is not bound, or was bound before stamps existed (``db upgrade`` stamps it).

    A dump restored into another database (or server) keeps the binding's stamp but gets
    another OID, so its identity differs from the one the namespace's Redis recorded
    (docs/adr/0014-redis-ahead-of-the-ledger.md). A physical replica promoted by a failover
    keeps both: same identity.
    """
    with engine.connect() as conn:
        row = conn.execute(_IDENTITY_SQL).first()
    if row is None or row[0] is None:
        return None
    return f"{row[0]}/{row[1]}"


def stamp_binding(engine: sa.Engine, *, renew: bool = False) -> str:
    """Give the bound database a stamp (a random UUID) unless it has one, or a new one with
    ``renew`` (a planned restore: the copy becomes a database of its own). Returns
    :func:`database_identity`.

    Raises:
        ConfigError: the database is not bound (``bind_namespace`` first).
    """
    with engine.begin() as conn:
        conn.execute(sa.text(
            "UPDATE deployment_binding SET stamp = gen_random_uuid()::text "
            "WHERE id = 1 AND (stamp IS NULL OR :renew)"), {"renew": renew})
    identity = database_identity(engine)
    if identity is None:
        raise ConfigError(f"database {engine.url.database!r} is not bound to a namespace: "
                          "run `escalation db upgrade`")
    return identity
