"""Console sessions in Chromium (ADR 0011): sign-in exchanges the token for a session whose
cookie is no token; a session idle longer than the timeout is gone; sign-out ends it on the
server, so a copy of the cookie taken before stops working; browsing across id rotations
keeps the session, and the rotated-away ids stop working."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from tests.api.conftest import make_tokens, start_server, stop_server

pytestmark = pytest.mark.browser
IDLE_S = 3


@pytest.fixture(scope="module")
def short(redis_url: str, database_url: str, engine: sa.Engine
          ) -> Iterator[tuple[str, dict[str, str]]]:
    """A server whose console sessions end after 3 s without a request."""
    namespace = f"t{uuid.uuid4().hex[:12]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env.update(ESCALATION_REDIS_URL=redis_url, ESCALATION_DATABASE_URL=database_url,
               ESCALATION_NAMESPACE=namespace, ESCALATION_LOG_FORMAT="json",
               ESCALATION_LOG_LEVEL="WARNING", ESCALATION_API_TOKEN_CACHE_S="0",
               ESCALATION_CONSOLE_SESSION_IDLE_S=str(IDLE_S))
    tokens, _names = make_tokens(engine, f"cs{uuid.uuid4().hex[:8]}")
    url, proc = start_server(env)
    try:
        yield url, tokens
    finally:
        stop_server(proc)


@pytest.fixture(scope="module")
def rotating(redis_url: str, database_url: str, engine: sa.Engine
             ) -> Iterator[tuple[str, dict[str, str]]]:
    """A server whose console session ids rotate every 2 s (grace 1 s)."""
    namespace = f"t{uuid.uuid4().hex[:12]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env.update(ESCALATION_REDIS_URL=redis_url, ESCALATION_DATABASE_URL=database_url,
               ESCALATION_NAMESPACE=namespace, ESCALATION_LOG_FORMAT="json",
               ESCALATION_LOG_LEVEL="WARNING", ESCALATION_API_TOKEN_CACHE_S="5",
               ESCALATION_CONSOLE_SESSION_ROTATE_S="2",
               ESCALATION_CONSOLE_SESSION_ROTATE_GRACE_S="1")
    tokens, _names = make_tokens(engine, f"cr{uuid.uuid4().hex[:8]}")
    url, proc = start_server(env)
    try:
        yield url, tokens
    finally:
        stop_server(proc)


@pytest.fixture()
def tab(browser: Any) -> Iterator[Any]:
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        yield ctx.new_page()
    finally:
        ctx.close()


def _sign_in(tab: Any, url: str, token: str, path: str = "/console/audit") -> None:
    tab.goto(url + path)
    assert "/console/login" in tab.url
    tab.get_by_label("Token").fill(token)
    with tab.expect_navigation():
        tab.keyboard.press("Enter")


def _cookie(tab: Any) -> str:
    return str(next(c["value"] for c in tab.context.cookies() if c["name"] == "esc_console"))


def test_sign_in_gives_a_session_cookie_that_is_no_token(tab, short) -> None:
    url, tokens = short
    _sign_in(tab, url, tokens["compliance"])
    assert tab.url.endswith("/console/audit")
    sid = _cookie(tab)
    assert sid.startswith("ses_") and tokens["compliance"] not in sid
    r = httpx.get(url + "/v1/audit", headers={"Authorization": f"Bearer {sid}"})
    assert r.status_code == 401
    # signing in again from the same browser issues a new id and ends the old one
    tab.context.clear_cookies(name="esc_console_login")
    tab.goto(url + "/console/login")
    tab.get_by_label("Token").fill(tokens["compliance"])
    with tab.expect_navigation():
        tab.keyboard.press("Enter")
    assert _cookie(tab) != sid
    r = httpx.get(url + "/console/audit", cookies={"esc_console": sid})
    assert r.status_code == 303


def test_an_idle_session_ends(tab, short) -> None:
    url, tokens = short
    _sign_in(tab, url, tokens["admin"], "/console/deadlines")
    assert tab.url.endswith("/console/deadlines")
    for _ in range(3):  # requests within the idle timeout keep it alive
        time.sleep(IDLE_S / 2)
        tab.goto(url + "/console/deadlines")
        assert tab.url.endswith("/console/deadlines"), tab.url
    time.sleep(IDLE_S + 1)
    tab.goto(url + "/console/deadlines")
    assert "/console/login" in tab.url


def test_sign_out_ends_the_session_on_the_server(tab, short) -> None:
    url, tokens = short
    _sign_in(tab, url, tokens["compliance"])
    copy = _cookie(tab)
    assert httpx.get(url + "/console/audit", cookies={"esc_console": copy}).status_code == 200
    with tab.expect_navigation():
        tab.get_by_role("button", name="Sign out").click()
    assert "/console/login" in tab.url
    r = httpx.get(url + "/console/audit", cookies={"esc_console": copy})
    assert r.status_code == 303 and "/console/login" in r.headers["location"]


def test_browsing_across_rotations_keeps_the_session(tab, rotating) -> None:
    url, tokens = rotating
    _sign_in(tab, url, tokens["admin"], "/console")
    ids = [_cookie(tab)]
    t0 = time.monotonic()
    pages = ("/console/audit", "/console/deadlines", "/console", "/console/operations")
    i = 0
    while time.monotonic() - t0 < 7:
        path = pages[i % len(pages)]
        tab.goto(url + path)
        assert tab.url.endswith(path), tab.url  # never sent back to the sign-in form
        assert tab.get_by_role("button", name="Sign out").is_visible()
        if _cookie(tab) != ids[-1]:
            ids.append(_cookie(tab))
        i += 1
        time.sleep(0.8)
    assert len(ids) >= 3, ids  # rotated at least twice while browsing
    time.sleep(1.5)  # past the grace: every id but the current one is dead
    for old in ids[:-1]:
        r = httpx.get(url + "/console/audit", cookies={"esc_console": old})
        assert r.status_code == 303 and "/console/login" in r.headers["location"]
    # the page's sign-out form carries the current id's CSRF token: sign-out works and
    # ends the session (whatever id the sign-out request itself rotated to)
    tab.goto(url + "/console/audit")
    current = _cookie(tab)
    with tab.expect_navigation():
        tab.get_by_role("button", name="Sign out").click()
    assert "/console/login" in tab.url
    assert not any(c["name"] == "esc_console" for c in tab.context.cookies())
    r = httpx.get(url + "/console/audit", cookies={"esc_console": current})
    assert r.status_code == 303
