"""The console's ladders and operations pages (docs/console.md) on a real server, in
Chromium and over HTTP: Reg E versions 1-3 with their release rows and a v2 -> v3 diff; an
apply run's counts and plan hash; an admin retries a dead letter (made as
tests/integration/test_dead_letters.py makes one) and the ledger shows what follows; a purge
leaves a PURGED row by the admin's token name; a compliance session sees no retry/purge
button and a forged POST is refused; the nav reaches both pages by keyboard."""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from escalation.ports import NewRun
from tests.api.conftest import make_tokens, start_server, stop_server

pytestmark = pytest.mark.browser
REG_E = "reg_e_error_resolution"
PLAN_HASH = "5eed" * 16


@dataclass
class Ops:
    url: str
    tokens: dict[str, str]
    names: dict[str, str]
    app: Any
    engine: sa.Engine


@pytest.fixture(scope="module")
def ops(redis_url: str, server_urls: tuple[str, str], topology_shards: int) -> Iterator[Ops]:
    """A server on a database of its own (its ladder releases are the shipped directory's
    baseline) and an App on the same namespace, to make dead letters and fire."""
    import redis

    from escalation.adapters.db import make_engine
    from escalation.bootstrap import build
    from escalation.settings import get_settings
    from tests.conftest import scratch_database

    namespace = f"t{uuid.uuid4().hex[:12]}"
    with scratch_database(server_urls[1], "escalation_ladops") as database_url:
        engine = make_engine(database_url)
        app = build(get_settings(redis_url=redis_url, database_url=database_url,
                                 namespace=namespace, shards=topology_shards,
                                 log_format="json"), actor="test-worker")
        env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
        env.update(ESCALATION_REDIS_URL=redis_url, ESCALATION_DATABASE_URL=database_url,
                   ESCALATION_NAMESPACE=namespace, ESCALATION_SHARDS=str(topology_shards),
                   ESCALATION_LOG_FORMAT="json", ESCALATION_LOG_LEVEL="WARNING",
                   ESCALATION_API_TOKEN_CACHE_S="0", ESCALATION_API_AUTH_FAIL_LIMIT="1000000",
                   ESCALATION_INSTITUTION_TIMEZONE="America/New_York")
        tokens, names = make_tokens(engine, f"lo{uuid.uuid4().hex[:8]}")
        url, proc = start_server(env)
        try:
            yield Ops(url, tokens, names, app, engine)
        finally:
            stop_server(proc)
            app.close()
            engine.dispose()
            client = redis.Redis.from_url(redis_url, decode_responses=True)
            for key in client.scan_iter(match=f"*{{{namespace}:*", count=1000):
                client.delete(key)


def _dead_letters(app: Any) -> Any:
    from escalation.bootstrap import reliability_for
    from escalation.service_layer.dead_letters import DeadLetters

    return DeadLetters(rel=reliability_for(app), scheduler=app.scheduler, store=app.store,
                       actor="test", max_decision_attempts=1)


def _fire(app: Any, lease_ms: int = 1) -> Any:
    from escalation.service_layer.core import CorePorts
    from escalation.service_layer.fire import FireDue, FiringHooks, fire_due

    return fire_due(
        FireDue(batch_size=50, lease_ms=lease_ms, worker_id="w"),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
        FiringHooks(on_poison=_dead_letters(app).on_decision_failed),
    )


def make_dead_letter(app: Any) -> tuple[uuid.UUID, str]:
    """One escalation due now whose payload names a ladder version that does not exist,
    fired once (max 1 attempt): a ``decision:<id>`` dead letter. Returns (id, the payload's
    real ladder key, to cure it)."""
    from tests.e2e.helpers import due_requests, enqueue

    (did,) = enqueue(app, due_requests(1, app.scheduler.time()))
    key = app.scheduler.keys_for(did).payload(did)
    real = app.redis.hget(key, "l")
    app.redis.hset(key, "l", "dispute_review@99")
    assert _fire(app).poison == 1
    assert app.store.trail(did)[-1].event == "DEAD_LETTERED"
    return did, real


def _sign_in(tab: Any, ops: Ops, role: str, path: str) -> None:
    tab.goto(ops.url + path)
    assert "/console/login" in tab.url
    tab.get_by_label("Token").fill(ops.tokens[role])
    with tab.expect_navigation():
        tab.keyboard.press("Enter")
    assert tab.url.endswith(path), tab.url


@contextlib.contextmanager
def _session(ops: Ops, role: str) -> Iterator[httpx.Client]:
    """An HTTP client signed in to the console with ``role``'s token."""
    with httpx.Client(base_url=ops.url, timeout=30) as c:
        c.get("/console/login")
        r = c.post("/console/login", data={"token": ops.tokens[role],
                                           "csrf": c.cookies["esc_console_login"]})
        assert r.status_code == 303, r.text
        yield c


@pytest.fixture()
def tab(browser: Any) -> Iterator[Any]:
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        yield ctx.new_page()
    finally:
        ctx.close()


def test_compliance_sees_reg_e_versions_releases_runs_and_a_v2_v3_diff(tab, ops) -> None:
    from escalation.adapters.ladder_history import LadderHistoryStore

    history = LadderHistoryStore(ops.engine)
    v3 = ops.app.ladders.get(REG_E, 3)
    now = ops.app.scheduler.time()
    run = history.start(NewRun(ladder=REG_E, version=3, checksum=v3.checksum, plan_hash=PLAN_HASH,
                               applied_by="ops.jane@host", started_at=now, planned=7,
                               reason="v3 rollout"))
    history.finish(run, "done", now)
    _sign_in(tab, ops, "compliance", "/console/ladders")
    table = tab.locator(f"#ladder-{REG_E}")
    rows = table.locator("tbody tr")
    assert [rows.nth(i).locator("th").inner_text() for i in range(rows.count())] == \
        ["1", "2", "3"]
    releases = history.releases(REG_E)
    for i, v in enumerate((1, 2, 3)):
        text = rows.nth(i).inner_text()
        rel = releases[(REG_E, v)]
        assert rel.released_by in text and rel.reason in text and "present" in text
        assert rows.nth(i).locator("code").first.get_attribute("title") == rel.checksum
    runs = tab.locator("#apply-runs tbody tr").first
    cells = runs.inner_text()
    assert f"{REG_E}@3" in cells.replace("\u200b", "") and "done" in cells
    assert "ops.jane@host" in cells and "v3 rollout" in cells and "\t7\t" in cells
    assert runs.locator("code").get_attribute("title") == PLAN_HASH
    # the diff form, by keyboard-free selection
    tab.get_by_label("From").select_option(f"{REG_E}@2")
    tab.get_by_label("to", exact=True).select_option(f"{REG_E}@3")
    with tab.expect_navigation():
        tab.get_by_role("button", name="Compare").click()
    assert "version 2 → version 3" in tab.locator("#diff h3").inner_text()
    actions = tab.locator("#diff-actions tbody tr")
    added = {actions.nth(i).locator("th").inner_text().replace("\u200b", "")
             for i in range(actions.count())
             if actions.nth(i).locator("td").first.inner_text() == "added"}
    assert added == {"provisional_credit", "provisional_credit_notice", "determination",
                     "results_notice", "correction", "provisional_credit_reversal",
                     "reversal_notice"}
    investigation = tab.locator("#diff-deadlines tr", has_text="investigation").inner_text()
    assert "requires: none -> provisional_credit before determine_or_provisionally_credit" \
        in investigation
    assert "met by: resolution -> determination, resolution" in investigation
    notice = tab.locator("#diff-deadlines tr", has_text="provisional_credit_notice")
    assert "added" in notice.inner_text() and "started by: provisional_credit" in \
        notice.inner_text()
    assert tab.locator("#diff-tiers").count() == 0  # v3 changed no tier


def test_ladder_events_on_the_ladders_page_in_the_audit_search_and_the_api(tab, ops) -> None:
    """The first-use baseline and an apply run are ledger events (ADR 0012): the ladders page
    names each with its chain and hash and links to it in the audit search, which lists
    it; ``GET /v1/audit?decision=LADDER_APPLIED`` returns it (a 422 before)."""
    from escalation.adapters.ladder_history import LadderHistoryStore
    from escalation.domain.ladder_ledger import ladder_chain_id

    ladder, plan_hash = "reg_z_billing_error", "a11e" * 16
    history = LadderHistoryStore(ops.engine)
    top = max(v for n, v in history.releases(ladder) if n == ladder)
    now = ops.app.scheduler.time()
    run = history.start(NewRun(
        ladder=ladder, version=top, checksum=ops.app.ladders.get(ladder, top).checksum,
        plan_hash=plan_hash, applied_by="ops.kim@host", started_at=now, planned=0,
        reason="CHG-77"))
    history.finish(run, "done", now)
    base = history.releases(ladder)[(ladder, 1)].ledger
    assert base is not None
    _sign_in(tab, ops, "compliance", "/console/ladders")
    cell = tab.locator(f"#ladder-{ladder} tbody tr").first.locator("td.ledger-event")
    assert "LADDER_BASELINE" in cell.inner_text()
    assert cell.locator("code").nth(1).get_attribute("title") == base.row_hash
    with tab.expect_navigation():
        cell.get_by_role("link").click()
    rows = tab.locator("#audit tbody tr")
    assert rows.count() == 1
    assert "LADDER_BASELINE" in rows.first.inner_text() and "baseline" in rows.first.inner_text()
    tab.goto(ops.url + "/console/ladders")  # the same session
    applied = tab.locator("#apply-runs tbody tr", has_text="CHG-77").locator("td.ledger-event")
    with tab.expect_navigation():
        applied.get_by_role("link", name="LADDER_APPLIED").click()
    row = tab.locator("#audit tbody tr").first
    assert "LADDER_APPLIED" in row.inner_text() and "ops.kim@host" in row.inner_text()
    assert f"ladder {ladder}@{top}" in row.inner_text().replace("\u200b", "")
    auth = {"Authorization": f"Bearer {ops.tokens['compliance']}"}
    r = httpx.get(ops.url + "/v1/audit", headers=auth, timeout=30,
                  params={"decision": "LADDER_APPLIED", "ladder": ladder})
    assert r.status_code == 200, r.text
    [event] = r.json()["rows"]
    assert event["dispute_id"] == str(ladder_chain_id(ladder, top)) and event["seq"] == 2
    assert (event["actor"], event["details"]["plan_hash"], event["details"]["reason"]) == (
        "ops.kim@host", plan_hash, "CHG-77")
    r = httpx.get(ops.url + "/v1/audit", headers=auth, timeout=30,
                  params={"decision": "LADDER_RELEASED"})
    assert r.status_code == 200, r.text  # known though none is on this ledger yet
    assert httpx.get(ops.url + "/v1/audit", headers=auth, timeout=30,
                     params={"decision": "NO_SUCH_EVENT"}).status_code == 422


def test_a_diff_of_two_ladders_is_refused_with_the_field_named(ops) -> None:
    with _session(ops, "compliance") as c:
        r = c.get("/console/ladders", params={"from": f"{REG_E}@2",
                                              "to": "reg_z_billing_error@3"})
        assert r.status_code == 422 and "to: reg_z_billing_error is another ladder" in r.text
        r = c.get("/console/ladders", params={"from": f"{REG_E}@9", "to": f"{REG_E}@3"})
        assert r.status_code == 422 and "from: no ladder version" in r.text


def test_admin_retries_a_dead_letter_and_the_ledger_shows_what_follows(tab, ops) -> None:
    did, real = make_dead_letter(ops.app)
    member = f"decision:{did}"
    _sign_in(tab, ops, "admin", "/console/operations")
    row = tab.locator("#dead-letters tbody tr", has_text=str(did)[:8])
    assert "decision" in row.inner_text() and "99" in row.inner_text()
    with tab.expect_navigation():
        row.get_by_role("link").first.click()
    assert member in tab.locator("#record").inner_text()
    with tab.expect_navigation():
        tab.get_by_role("button", name="Retry").click()
    assert tab.url.split("?")[0].endswith("/console/operations")
    assert "Requeued" in tab.locator(".notice").inner_text()
    assert str(did)[:8] not in tab.locator("#dead-letters").inner_text()
    # due now and unclaimed: the firing lag says so
    assert "ago" in tab.locator("#firing-lag").inner_text()
    assert sum(int(tab.locator("#shards tbody tr").nth(i).locator("td").nth(1).inner_text())
               for i in range(tab.locator("#shards tbody tr").count())) >= 1
    # the worker decides it again once the ladder is back: the ledger shows the decision
    key = ops.app.scheduler.keys_for(did).payload(did)
    ops.app.redis.hset(key, "l", real)
    for _ in range(3):  # a first claim may find the payload behind the ledger and apply it
        _fire(ops.app, lease_ms=30_000)
        trail = ops.app.store.trail(did)
        if trail[-1].event != "DEAD_LETTERED":
            break
    assert [r.event for r in trail][-2:] == ["DEAD_LETTERED", "PROMOTED"]
    tab.goto(f"{ops.url}/console/disputes/{did}")
    timeline = tab.locator(".timeline").inner_text()
    assert "DEAD_LETTERED" in timeline and "PROMOTED" in timeline


def test_admin_purge_leaves_a_purged_row_by_the_admins_name(ops) -> None:
    did, _real = make_dead_letter(ops.app)
    with _session(ops, "admin") as c:
        page = c.get("/console/operations/dead", params={"member": f"decision:{did}"})
        assert page.status_code == 200 and "Purge" in page.text
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
        assert csrf is not None
        form = {"csrf": csrf.group(1), "member": f"decision:{did}", "reason": "bad ladder"}
        r = c.post("/console/operations/dead/purge", data=form)  # no confirm box
        assert r.status_code == 422 and "purge is permanent" in r.text
        assert "to confirm; nothing purged" in r.text and "confirm with --yes" not in r.text
        assert ops.app.store.trail(did)[-1].event == "DEAD_LETTERED"  # nothing written
        r = c.post("/console/operations/dead/purge", data={**form, "confirm": "yes"})
        assert r.status_code == 303 and "purged=1" in r.headers["location"]
    last = ops.app.store.trail(did)[-1]
    assert last.event == "PURGED" and last.actor == ops.names["admin"]
    assert last.details["reason"] == "bad ladder"


def test_compliance_sees_no_buttons_and_a_forged_post_is_refused(ops) -> None:
    from escalation.entrypoints.api.console.routes import csrf_for

    did, _real = make_dead_letter(ops.app)
    member = f"decision:{did}"
    with _session(ops, "compliance") as c:
        for path, params in (("/console/operations", {}),
                             ("/console/operations/dead", {"member": member})):
            page = c.get(path, params=params)
            assert page.status_code == 200 and str(did) in page.text
            assert "dead/retry" not in page.text and "dead/purge" not in page.text
            assert ">Retry<" not in page.text and ">Purge<" not in page.text
        # the session's own CSRF token: the role, not the token, is what refuses
        forged = {"csrf": csrf_for(c.cookies["esc_console"]), "member": member,
                  "reason": "x", "confirm": "yes"}
        for action in ("retry", "purge"):
            r = c.post(f"/console/operations/dead/{action}", data=forged)
            assert r.status_code == 403, r.text
    with _session(ops, "admin") as c:  # an admin without the session's CSRF token
        r = c.post("/console/operations/dead/retry", data={"csrf": "0" * 64, "member": member})
        assert r.status_code == 403 and "CSRF" in r.text
    assert _dead_letters(ops.app).show(member)["dispute_id"] == str(did)  # still there
    assert ops.app.store.trail(did)[-1].event == "DEAD_LETTERED"


def _tab_to(tab: Any, name: str) -> None:
    for _ in range(40):
        tab.keyboard.press("Tab")
        if tab.evaluate("document.activeElement.textContent.trim()") == name:
            return
    raise AssertionError(f"Tab never reached {name!r}")


def test_the_nav_reaches_both_pages_by_keyboard(tab, ops) -> None:
    _sign_in(tab, ops, "compliance", "/console")
    _tab_to(tab, "Ladders")
    with tab.expect_navigation():
        tab.keyboard.press("Enter")
    assert tab.url.endswith("/console/ladders")
    assert tab.locator('nav a[aria-current="page"]').inner_text() == "Ladders"
    _tab_to(tab, "Operations")
    with tab.expect_navigation():
        tab.keyboard.press("Enter")
    assert tab.url.endswith("/console/operations")
    assert tab.locator("h1").inner_text() == "Operations"
    assert "no heartbeat" in tab.locator("#no-heartbeat").inner_text()
