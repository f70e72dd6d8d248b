"""The files of ``escalation/`` one API create and one worker pass execute, in the order each
is first entered: the tables of docs/architecture.md, "Following a request".

One run, on the real servers:

1. a scratch PostgreSQL database at the Alembic head (``upgrade_to_head``; dropped at the
   end) and a fresh Redis namespace on DB index 12 (its keys deleted at the end);
2. the App (``bootstrap.build``), a service token (``service_layer.tokens.create_token``),
   and the API (``entrypoints.api.app.create_app``) served in process by starlette's
   ``TestClient``;
3. one warm-up ``POST /v1/escalations``, then one more create recorded: ``sys.setprofile``
   on this thread and ``threading.setprofile`` on every thread started after it (the
   TestClient's event loop, the create batcher's writer thread), installed before the app
   starts and recording only while the recorded request is under way, on every thread but
   the client's own (which runs httpx only: its log line would enter ``logs.py``);
4. one escalation enqueued due now (``enqueue_on_breach``, warnings scheduled as the API
   schedules them), then the real worker loop (``entrypoints.worker.run_worker``, burst,
   one batch) with ``_fire_pass`` wrapped so that recording is on only inside it.

A file counts when a function of it runs (a profiler ``call`` event, generator and coroutine
resumptions included); a module whose only code run is its import (module body) is listed
apart, not counted. Printed: both numbered lists (the thread a file was first entered on),
their counts and the counts per layer; with ``--functions``, under each file the functions of
it that ran. Logs go to stderr.

Usage:
    python tests/benchmarks/request_walk.py
        [--redis-url redis://127.0.0.1:6379/12]
        [--admin-url postgresql://postgres@127.0.0.1:5432/postgres] [--functions]
        [--max-create N] [--max-firing N]

``--max-create`` / ``--max-firing``: exit 1 (after printing both walks) when a walk runs more
files than that (``tests/integration/test_request_walk.py`` holds the bounds of ADR 0039).

Other settings are the defaults (``ESCALATION_*`` variables in the environment apply), but
for two periodic re-reads held off (``HELD_OFF``: the ladder directory, a token's cache
entry) so that neither falls into a recorded request.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any
from unittest import mock

import redis
import sqlalchemy as sa

import escalation

PACKAGE = Path(escalation.__file__).resolve().parent
LAYERS = ("domain", "ports", "service_layer", "adapters", "entrypoints")
#: The periodic re-reads a process makes between requests, held off so that none falls into
#: a recorded request (a slow run would otherwise record one): the ladder directory and the
#: releases (every 5 s by default) and a token's cache entry (5 s).
HELD_OFF: dict[str, Any] = {"ladder_refresh_s": 3600.0, "api_token_cache_s": 300.0}


class Walk:
    """Profile hook recording the first entry of each ``escalation/`` file while ``on``.

    Installed for the whole run (every thread it should see must start after it is
    installed: ``threading.setprofile`` covers only threads started later); switched on
    only around what is measured.
    """

    def __init__(self, *, show_functions: bool = False) -> None:
        self.show_functions = show_functions  # report: the functions run under each file
        self.on = False
        self.files: dict[str, str] = {}  # package-relative path -> thread first seen on
        self.imported: dict[str, str] = {}  # module body run (an import), nothing else yet
        self.skip: int | None = None  # a thread not recorded (the test client's own)
        self.functions: dict[str, dict[str, None]] = {}  # file -> functions run, in order
        self._rel: dict[str, str | None] = {}  # co_filename -> package-relative path

    def _relative(self, filename: str) -> str | None:
        try:
            return self._rel[filename]
        except KeyError:
            path = Path(filename).resolve()
            rel = path.relative_to(PACKAGE).as_posix() if path.is_relative_to(PACKAGE) else None
            self._rel[filename] = rel
            return rel

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        """The ``sys.setprofile`` function: a Python ``call`` event of a package file."""
        if not self.on or event != "call" or threading.get_ident() == self.skip:
            return
        code = frame.f_code
        rel = self._relative(code.co_filename)
        if rel is None:
            return
        if code.co_name == "<module>":
            if rel not in self.files:
                self.imported.setdefault(rel, threading.current_thread().name)
            return
        if rel not in self.files:
            self.files[rel] = threading.current_thread().name
            self.imported.pop(rel, None)
            self.functions[rel] = {}
        self.functions[rel][code.co_qualname] = None

    @contextmanager
    def recording(self, *, skip_this_thread: bool = False) -> Iterator[None]:
        """Start from an empty record; record only inside the block (``skip_this_thread``:
        not on the calling thread)."""
        self.files, self.imported, self.functions = {}, {}, {}
        self.skip = threading.get_ident() if skip_this_thread else None
        self.on = True
        try:
            yield
        finally:
            self.on, self.skip = False, None

    def report(self, title: str) -> None:
        """Print the numbered list, its count and the counts per layer (with
        ``show_functions``, under each file the functions of it that ran, first entered
        first)."""
        print(f"\n{title}: {len(self.files)} files")
        width = max((len(f) for f in self.files), default=0)
        for i, (rel, thread) in enumerate(self.files.items(), 1):
            print(f"{i:3d}  {rel:<{width}}  [{thread}]")
            if self.show_functions:
                print("       " + ", ".join(self.functions[rel]))
        per = dict.fromkeys((*LAYERS, "other"), 0)
        for rel in self.files:
            top = rel.split("/", 1)[0]
            per[top if top in LAYERS else "other"] += 1
        print("by layer: " + ", ".join(f"{k} {v}" for k, v in per.items()))
        others = [rel for rel in self.files if rel.split("/", 1)[0] not in LAYERS]
        if others:
            print("  other: " + ", ".join(others))
        if self.imported:
            print("imported only (not counted): " + ", ".join(self.imported))


@contextmanager
def scratch_database(admin_url: str) -> Iterator[str]:
    """A database of its own at the Alembic head (as tests/conftest.py makes them); yields its
    URL and drops it afterwards."""
    from escalation.adapters.db import normalize_url, upgrade_to_head

    admin_url = normalize_url(admin_url)
    name = f"escalation_walk_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = sa.engine.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade_to_head(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@contextmanager
def redis_namespace(redis_url: str) -> Iterator[str]:
    """A fresh namespace; every key of it (``*{<namespace>:*``) is deleted afterwards."""
    namespace = f"walk{uuid.uuid4().hex[:10]}"
    try:
        yield namespace
    finally:
        client = redis.Redis.from_url(redis_url)
        try:
            keys = list(client.scan_iter(match=f"*{{{namespace}:*", count=1000))
            for i in range(0, len(keys), 500):
                client.delete(*keys[i:i + 500])
            print(f"\ncleanup: {len(keys)} Redis keys of namespace {namespace} deleted")
        finally:
            client.close()


def create_body() -> dict[str, str]:
    """A create of a fresh dispute, due in the future (nothing fires)."""
    return {"dispute_id": str(uuid.uuid4()), "source_hash": uuid.uuid4().hex,
            "materiality": "125.50", "due_at": "2030-01-01T00:00:00+00:00"}


def walk_create(walk: Walk, settings: Any, secret: str) -> int:
    """One warm-up create, then one recorded create. Returns its count of files."""
    from starlette.testclient import TestClient

    from escalation.entrypoints.api.app import create_app

    with TestClient(create_app(settings), headers={"Authorization": f"Bearer {secret}"}) as c:
        warm = c.post("/v1/escalations", json=create_body())
        if warm.status_code != 201:
            raise SystemExit(f"warm-up create: {warm.status_code} {warm.text}")
        # this thread runs the client only (httpx, whose own log line would pass through
        # logs.py); the app runs on the TestClient's event loop thread and the threads it uses
        with walk.recording(skip_this_thread=True):
            r = c.post("/v1/escalations", json=create_body())
        if r.status_code != 201:
            raise SystemExit(f"recorded create: {r.status_code} {r.text}")
    walk.report("One API create (POST /v1/escalations, single)")
    return len(walk.files)


def enqueue_due_now(app: Any) -> None:
    """One escalation due now, through the service layer as the API enqueues it."""
    from escalation.bootstrap import core_ports_for, schedule_for
    from escalation.service_layer.enqueue import EnqueueOne, EnqueueRequest, enqueue_on_breach

    did = uuid.uuid4()
    enqueue_on_breach(
        EnqueueOne(request=EnqueueRequest(dispute_id=did, materiality="125.50",
                                          source_hash=hashlib.sha256(did.bytes).hexdigest(),
                                          due_at=app.scheduler.time()),
                   actor="walk", default_ladder=app.settings.default_ladder),
        core_ports_for(app), schedule_for(app))


def walk_firing(walk: Walk, app: Any) -> int:
    """The worker loop, one batch, recording inside ``_fire_pass`` only. Returns its count
    of files."""
    from escalation.entrypoints import worker

    real: Callable[..., Any] = worker._fire_pass

    def recorded(ctx: Any) -> Any:
        with walk.recording():
            return real(ctx)

    enqueue_due_now(app)
    with mock.patch.object(worker, "_fire_pass", recorded):
        totals = worker.run_worker(app, burst=True, max_batches=1)
    if totals.recorded != 1:
        raise SystemExit(f"the worker pass recorded {totals.recorded} escalations, not 1")
    walk.report("One firing (a worker pass claiming one due escalation)")
    return len(walk.files)


def main() -> None:
    """Run both walks and print them."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/12")
    ap.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--functions", action="store_true",
                    help="under each file, the functions of it that ran")
    ap.add_argument("--max-create", type=int, default=None,
                    help="exit 1 when the API create runs more files than this")
    ap.add_argument("--max-firing", type=int, default=None,
                    help="exit 1 when the firing runs more files than this")
    args = ap.parse_args()

    from escalation.bootstrap import build, token_store_for
    from escalation.domain.access import Role
    from escalation.logs import configure_logging
    from escalation.service_layer.tokens import CreateToken, create_token
    from escalation.settings import get_settings

    walk = Walk(show_functions=args.functions)
    # before any thread of the app starts: threading.setprofile reaches only later threads
    threading.setprofile(walk.hook)
    sys.setprofile(walk.hook)
    try:
        with scratch_database(args.admin_url) as db_url, \
                redis_namespace(args.redis_url) as namespace:
            settings = get_settings(redis_url=args.redis_url, database_url=db_url,
                                    namespace=namespace, **HELD_OFF)
            configure_logging(settings.log_format, settings.log_level)  # as the API and worker
            app = build(settings, actor="walk-worker")
            try:
                secret, _ = create_token(CreateToken(f"walk-{namespace}", Role.SERVICE.value, 1),
                                         token_store_for(app))
                counts = {"create": walk_create(walk, settings, secret),
                          "firing": walk_firing(walk, app)}
            finally:
                app.close()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    over = [f"{name}: {counts[name]} files, more than {bound}"
            for name, bound in (("create", args.max_create), ("firing", args.max_firing))
            if bound is not None and counts[name] > bound]
    if over:
        raise SystemExit("over the bound: " + "; ".join(over))


if __name__ == "__main__":
    main()
