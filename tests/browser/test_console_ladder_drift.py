"""The console overview shows a released ladder version the server cannot read from its
ladder directory (released from a shell with another ``ESCALATION_LADDERS_DIR``), and the
banner goes once the file is copied in, without a restart (Debian's chromium)."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from escalation.resources import shipped_ladders_dir
from tests.api.conftest import make_tokens, start_server, stop_server
from tests.api.test_api_ladder_dir_drift import REFRESH_S, Drift, ladder_text
from tests.browser.conftest import ARTIFACTS
from tests.helpers import run_cli

pytestmark = pytest.mark.browser


@pytest.fixture()
def drift_console(redis_url: str, console_database: tuple[str, sa.Engine],
                  tmp_path: Path) -> Iterator[Drift]:
    import redis

    database_url, engine = console_database
    name = f"drift_{uuid.uuid4().hex[:8]}"
    served, other = tmp_path / "served", tmp_path / "other"
    served.mkdir()
    other.mkdir()
    shutil.copy(shipped_ladders_dir() / "dispute_review.v1.toml", served)
    for d in (served, other):
        (d / f"{name}.v1.toml").write_text(ladder_text(name, 1))
    (other / f"{name}.v2.toml").write_text(ladder_text(name, 2))
    namespace = f"t{uuid.uuid4().hex[:12]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env.update(ESCALATION_REDIS_URL=redis_url, ESCALATION_DATABASE_URL=database_url,
               ESCALATION_NAMESPACE=namespace, ESCALATION_LOG_FORMAT="json",
               ESCALATION_LOG_LEVEL="WARNING", ESCALATION_API_TOKEN_CACHE_S="0",
               ESCALATION_API_AUTH_FAIL_LIMIT="1000000",
               ESCALATION_LADDERS_DIR=str(served),
               ESCALATION_LADDER_REFRESH_S=str(REFRESH_S))
    tokens, _ = make_tokens(engine, f"drift{uuid.uuid4().hex[:8]}")
    url, proc = start_server(env)
    try:
        yield Drift(url, proc, env, tokens, served, other, name)
    finally:
        stop_server(proc)
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        for key in client.scan_iter(match=f"*{{{namespace}:*", count=1000):
            client.delete(key)
        client.close()


def test_overview_banner_names_the_unreadable_version_and_goes_when_fixed(
        browser: Any, drift_console: Drift) -> None:
    d = drift_console
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    try:
        page.goto(d.url + "/console")
        page.get_by_label("Token").fill(d.tokens["compliance"])
        with page.expect_navigation():
            page.keyboard.press("Enter")
        assert page.url.rstrip("/").endswith("/console")
        assert page.locator("#ladder-banner").count() == 0

        rel = run_cli({**d.env, "ESCALATION_LADDERS_DIR": str(d.other)},
                      "ladder", "release", "--ladder", d.name, "--version", "2",
                      "--reason", "CHG-drift")
        assert rel.returncode == 0, rel.stderr
        time.sleep(REFRESH_S * 3)
        page.reload()
        banner = page.locator("#ladder-banner")
        assert banner.get_attribute("role") == "alert"
        text = banner.inner_text()
        assert f"{d.name} v2" in text
        assert f"{d.name}.v2.toml is missing" in text
        assert "ESCALATION_LADDERS_DIR" in text
        # the rest of the overview is still there
        assert page.locator("#open-missed").count() == 1
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "console-overview-ladder-banner.png"),
                        full_page=True)

        shutil.copy(d.other / f"{d.name}.v2.toml", d.served)
        time.sleep(REFRESH_S * 3)
        page.reload()
        assert page.locator("#ladder-banner").count() == 0
    finally:
        ctx.close()
