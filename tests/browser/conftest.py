"""A real uvicorn server (``escalation serve``) with the console, a seeded data set with
known answers, and Debian's chromium driven by Playwright (its own browser download is not
reachable here: the executable is /usr/bin/chromium, or ESCALATION_TEST_CHROMIUM)."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.api.conftest import make_tokens, start_server, stop_server

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM = os.environ.get("ESCALATION_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
LADDERS = Path(__file__).resolve().parents[2] / "ladders"
DEADLINE = "determine_or_provisionally_credit"


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass
class Seeded:
    """The disputes created for the run: external id -> dispute UUID; the external-id prefix."""

    prefix: str
    ids: dict[str, uuid.UUID]


# Reg E disputes, deadline 2024-02-15 17:00 EST (22:00Z) unless said otherwise; the
# institution calendar is the Federal Reserve's (Monday 2024-02-19, Washington's Birthday,
# is a holiday). (external id suffix, start tier, deadline, resolved at)
CASES = [
    ("A", "standard", "2024-02-15T22:00:00Z", "2024-02-14T15:00:00Z"),  # met
    ("B", "standard", "2024-02-15T22:00:00Z", "2024-02-20T15:00:00Z"),  # missed: 2 bd, 113 h
    ("C", "senior", "2024-02-15T22:00:00Z", "2024-02-16T21:00:00Z"),    # missed: 1 bd, 23 h
    ("D", "standard", "2024-02-27T22:00:00Z", "2024-03-01T15:00:00Z"),  # missed: 3 bd, 65 h
]


def seed(engine: sa.Engine, prefix: str) -> Seeded:
    """Record the CASES through the audit store (ENQUEUED then CANCELLED rows)."""
    from escalation.adapters.audit_store import PostgresAuditStore
    from escalation.adapters.ladder_files import load_ladder_file
    from escalation.domain.escalation import Escalation, NewEscalation

    ladder = load_ladder_file(LADDERS / "reg_e_error_resolution.v1.toml")
    store = PostgresAuditStore(engine)
    ids: dict[str, uuid.UUID] = {}
    for suffix, tier, deadline, resolved in CASES:
        ext = f"{prefix}-{suffix}"
        did = uuid.uuid4()
        ids[ext] = did
        entered = utc("2024-02-01T14:00:00Z") if suffix != "D" else utc("2024-02-13T14:00:00Z")
        esc = Escalation.new(NewEscalation(
            dispute_id=did,
            tier=tier,
            due_at=utc(deadline),
            materiality="125.00",
            source_hash="ab" * 32,
            entered_tier_at=entered,
            trace_id=f"t-{ext}",
            external_id=ext,
            regulatory_deadline=utc(deadline),
            deadlines=((DEADLINE, utc(deadline)),)),
            ladder)
        store.record_enqueue_many([esc], "seed-import", entered)
        # C's resolver is named like a spreadsheet formula: the CSV export must defuse it
        actor = "=SUM(1+1)" if suffix == "C" else "ops.jane"
        store.record_cancel(did, actor, utc(resolved), f"resolved {ext}: credited")
    # Two open escalations relative to now: E overdue in its tier with its deadline at risk
    # (24 h ahead), F due in 30 min with its deadline 10 days ahead (pending).
    with engine.connect() as conn:
        now = conn.execute(sa.text("SELECT clock_timestamp()")).scalar_one()
    for suffix, tier, due, deadline in (
        ("E", "standard", now - timedelta(hours=1), now + timedelta(hours=24)),
        ("F", "senior", now + timedelta(minutes=30), now + timedelta(days=10)),
    ):
        ext = f"{prefix}-{suffix}"
        did = uuid.uuid4()
        ids[ext] = did
        esc = Escalation.new(NewEscalation(
            dispute_id=did,
            tier=tier,
            due_at=due,
            materiality="80.00",
            source_hash="cd" * 32,
            entered_tier_at=now - timedelta(days=2),
            trace_id=f"t-{ext}",
            external_id=ext,
            regulatory_deadline=deadline,
            deadlines=((DEADLINE, deadline),)),
            ladder)
        store.record_enqueue_many([esc], "seed-import", now - timedelta(days=2))
    return Seeded(prefix, ids)


def refresh_sla_rollup(env: dict[str, str]) -> None:
    """``escalation report sla-refresh`` on the console's database, as an operator runs it
    (the SLA page answers only from a backfilled rollup)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "escalation", "report", "sla-refresh"],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@dataclass
class Console:
    url: str
    tokens: dict[str, str]
    seeded: Seeded
    env: dict[str, str]


@pytest.fixture(scope="module")
def console_database(server_urls: tuple[str, str]) -> Iterator[tuple[str, sa.Engine]]:
    """(URL, engine) of a database of the console's own: its pages list the whole ledger (the
    first page of at-risk deadlines, the overview's counts), which other test files sharing
    the session database would crowd with their own rows."""
    from escalation.adapters.db import make_engine
    from tests.conftest import scratch_database

    with scratch_database(server_urls[1], "escalation_console") as url:
        eng = make_engine(url)
        try:
            yield url, eng
        finally:
            eng.dispose()


@pytest.fixture(scope="module")
def console(redis_url: str, console_database: tuple[str, sa.Engine]) -> Iterator[Console]:
    """The server, tokens per role and the disputes created for the run."""
    import redis

    database_url, engine = console_database
    namespace = f"t{uuid.uuid4().hex[:12]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env.update(ESCALATION_REDIS_URL=redis_url, ESCALATION_DATABASE_URL=database_url,
               ESCALATION_NAMESPACE=namespace, ESCALATION_LOG_FORMAT="json",
               ESCALATION_LOG_LEVEL="WARNING", ESCALATION_API_TOKEN_CACHE_S="0",
               # every test module shares one loopback address: no failed-auth throttle here
               # (tests/api/test_api_hardening.py runs servers of its own with one)
               ESCALATION_API_AUTH_FAIL_LIMIT="1000000",
               ESCALATION_INSTITUTION_TIMEZONE="America/New_York")
    tokens, _names = make_tokens(engine, f"ui{uuid.uuid4().hex[:8]}")
    seeded = seed(engine, f"REGE{uuid.uuid4().hex[:6].upper()}")
    refresh_sla_rollup(env)
    url, proc = start_server(env)
    try:
        yield Console(url, tokens, seeded, env)
    finally:
        stop_server(proc)
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        for key in client.scan_iter(match=f"*{{{namespace}:*", count=1000):
            client.delete(key)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless chromium (Debian's package) through Playwright."""
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        pytest.skip(f"no chromium at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture()
def page(browser: Any, console: Console) -> Iterator[Any]:
    """A fresh context (no cookies) 1,280 px wide, downloads accepted; fails the test if the
    page asks anything of another origin (every asset is the app's own: no CDN)."""
    ARTIFACTS.mkdir(exist_ok=True)
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    foreign: list[str] = []
    ctx.on("request", lambda req: None if req.url.startswith((console.url, "data:"))
           else foreign.append(req.url))
    pg = ctx.new_page()
    try:
        yield pg
    finally:
        ctx.close()
    assert not foreign, f"requests outside the app: {foreign}"


def session_cookies(console: Console, role: str = "admin") -> dict[str, str]:
    """The cookie of a console session signed in with ``role``'s token (the console's
    cookie is a session id exchanged at sign-in, never the token: ADR 0011)."""
    import httpx

    with httpx.Client(base_url=console.url, timeout=30) as c:
        c.get("/console/login")
        r = c.post("/console/login", data={"token": console.tokens[role],
                                           "csrf": c.cookies["esc_console_login"]})
        assert r.status_code == 303, r.text
        return {"esc_console": c.cookies["esc_console"]}
