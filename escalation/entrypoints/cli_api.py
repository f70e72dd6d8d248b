"""``escalation serve`` (the HTTP API on uvicorn) and ``escalation token create|list|revoke``.

Token secrets are shown once by ``token create`` and stored only as SHA-256 digests.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from escalation.entrypoints.cli_common import _print_json, _settings, err, out

if TYPE_CHECKING:
    from escalation.ports import TokenStore

app = typer.Typer()  # top-level commands (serve), merged into the root by cli.py
token_app = typer.Typer(help="HTTP API bearer tokens (stored hashed).", no_args_is_help=True)


@contextmanager
def _store() -> Iterator[TokenStore]:
    """The API tokens on the configured database at the head (closed on exit)."""
    from escalation.composition_cli import token_store

    with token_store(_settings()) as store:
        yield store


@token_app.command("create")
def token_create(  # noqa: PLR0913 - a typer command: one parameter per option (ADR 0036)
    name: Annotated[str, typer.Option(help="Token name; the actor on ledger rows it causes.")],
    role: Annotated[str, typer.Option(help="service, compliance or admin.")],
    ttl_days: Annotated[int, typer.Option(help="Valid for N days (1-3660).")] = 365,
    source: Annotated[list[str] | None, typer.Option(
        "--source", help="Limit a service token to the disputes of this source system "
        "(repeat for several; default: unscoped, every dispute).")] = None,
    read_only: Annotated[bool, typer.Option(
        "--read-only", help="The token may read but never write (no create, cancel, pause, "
        "resume, action, resolve).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Create a token and print its secret once (it cannot be shown again): the secret alone
    on the first line of stdout (`TOKEN=$(escalation token create ... | head -n 1)`), what it
    is on the next; --json prints both as one object."""
    from escalation.domain.access import check_name, check_scope, parse_role
    from escalation.service_layer.tokens import CreateToken, create_token

    check_name(name)
    check_scope(parse_role(role), source)
    with _store() as store:
        secret, info = create_token(CreateToken(name, role, ttl_days, sources=source,
                                                read_only=read_only), store)
    if as_json:
        _print_json({"name": info.name, "role": info.role.value, "token": secret,
                     "expires_at": info.expires_at.isoformat(),
                     "sources": None if info.sources is None else list(info.sources),
                     "read_only": info.read_only, "scope": info.scope_text()})
        return
    out.print(secret, markup=False, highlight=False)
    out.print(f"^ token {info.name} (role {info.role.value}, {info.scope_text()}, expires "
              f"{info.expires_at.isoformat()}): shown once, store it now", markup=False,
              highlight=False)


@token_app.command("list")
def token_list(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False
               ) -> None:
    """Every token: name, role, scope (sources or unscoped; read-only or read-write),
    created, expires, revoked, state (never the secret)."""
    with _store() as store:
        tokens = store.all()
        now = store.now()
    rows = [{"name": t.name, "role": t.role.value, "scope": t.scope_text(),
             "sources": None if t.sources is None else list(t.sources),
             "read_only": t.read_only, "created_at": t.created_at.isoformat(),
             "expires_at": t.expires_at.isoformat(),
             "revoked_at": t.revoked_at.isoformat() if t.revoked_at else None,
             "state": t.state(now)} for t in tokens]
    if as_json:
        _print_json(rows)
        return
    table = Table(title=f"{len(rows)} token(s)")
    cols = ("name", "role", "scope", "created_at", "expires_at", "revoked_at", "state")
    for col in cols:
        table.add_column(col)
    for r in rows:
        table.add_row(*[str(r[c] or "") for c in cols])
    out.print(table)


@token_app.command("revoke")
def token_revoke(
    name: Annotated[str, typer.Argument(help="Token name.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Revoke a token now and end its console sessions (API workers stop accepting it within
    api_token_cache_s)."""
    from escalation.domain.errors import ConflictError
    from escalation.service_layer.tokens import revoke_token

    with _store() as store:
        try:
            info = revoke_token(store, name)
        except ConflictError as exc:  # one rule with cancel/pause/resume: "already ...", exit 0
            if as_json:
                _print_json({"name": name, "revoked": False, "detail": str(exc)})
            else:
                out.print(str(exc), highlight=False)
            return
    assert info.revoked_at is not None  # noqa: S101 - revoke_token sets it
    if as_json:
        _print_json({"name": info.name, "revoked": True,
                     "revoked_at": info.revoked_at.isoformat()})
        return
    out.print(f"revoked {info.name} at {info.revoked_at.isoformat()}", highlight=False)


def _check_can_listen(host: str, port: int) -> None:
    """Bind ``host:port`` once, as uvicorn will (``SO_REUSEADDR``), and let it go.

    Raises:
        ConfigError: the address is taken or cannot be bound here (exit 2, one line):
            uvicorn itself printed the listen banner, then the error, and exited 3.
    """
    import socket

    from escalation.domain.errors import ConfigError

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConfigError(f"--host {host!r}: {exc.strerror or exc}") from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc} "
                              "(choose another --port, or stop what listens there)") from None


@app.command("serve")
def serve(
    host: Annotated[str, typer.Option(help="Listen address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Listen port (1-65535).")] = 8080,
    workers: Annotated[int, typer.Option(help="uvicorn worker processes (1-64).")] = 1,
) -> None:
    """Serve the HTTP API (docs/api.md) with uvicorn until SIGTERM/SIGINT: then stop
    accepting, let the requests in flight finish (at most api_shutdown_grace_s) and exit 0
    (130 after Ctrl-C)."""
    import os
    import shutil
    import signal
    import tempfile

    import uvicorn

    from escalation.domain.errors import InvalidInput
    from escalation.logs import configure_logging

    # edge.MULTIPROC_ENV, not imported here: importing that module would give this
    # process (which serves nothing) figures of its own in the shared directory
    multiproc_env = "PROMETHEUS_MULTIPROC_DIR"

    if not 1 <= port <= 65535:
        raise InvalidInput(f"--port must be 1-65535, got {port}")
    if not 1 <= workers <= 64:
        raise InvalidInput(f"--workers must be 1-64, got {workers}")
    _check_can_listen(host, port)
    s = _settings()
    if not (s.redis_url and s.database_url):
        from escalation.bootstrap import resolve_urls

        resolve_urls(s)  # start the embedded servers once, before the workers fork
    # uvicorn's own records (start-up errors, a worker that died) go through the one log
    # configuration (JSON when ESCALATION_LOG_FORMAT=json), not uvicorn's plain-text handlers;
    # each request has one access line of ours (entrypoints/api/edge.py), not uvicorn's
    configure_logging(s.log_format, s.log_level)
    # say once where the API listens; a port that is taken is still reported by uvicorn as an
    # error right after this line
    shown = f"[{host}]" if ":" in host else host
    err.print(f"escalation serve: http://{shown}:{port} (API under /v1, console at /console, "
              f"probes /livez /readyz; {workers} worker process(es)); Ctrl-C or SIGTERM stops "
              "it", markup=False, highlight=False)
    metrics_dir = None
    if workers > 1 and not os.environ.get(multiproc_env):
        # every worker process writes its HTTP metrics there; a scrape reads them all
        metrics_dir = tempfile.mkdtemp(prefix="escalation-http-metrics-")
        os.environ[multiproc_env] = metrics_dir
    # uvicorn stops on SIGTERM/SIGINT after draining, then raises the signal again for the
    # handler that was there before it: ours notes it, so a stop is a normal exit (a service
    # manager reads exit 0 as "stopped cleanly", -15 as "killed")
    stops: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _frame: stops.append(signum))
                for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        uvicorn.run("escalation.entrypoints.api.app:factory", factory=True, host=host,
                    port=port, workers=workers, log_level="warning", access_log=False,
                    log_config=None, timeout_graceful_shutdown=s.api_shutdown_grace_s)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if metrics_dir is not None:
            os.environ.pop(multiproc_env, None)
            shutil.rmtree(metrics_dir, ignore_errors=True)
    if signal.SIGINT in stops and signal.SIGTERM not in stops:
        raise typer.Exit(130)
