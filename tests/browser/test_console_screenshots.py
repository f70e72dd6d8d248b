"""The screenshots docs/console.md shows, taken in Debian's chromium from the seeded console
(tests/browser/conftest.py): each page must answer 200 with its main heading, then is
captured 1,280 px wide, whole. They go to test-artifacts/; to refresh the committed ones:

    ESCALATION_SCREENSHOT_DIR=docs/img \
        pytest -q -m browser tests/browser/test_console_screenshots.py
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import ARTIFACTS, Console, session_cookies

pytestmark = pytest.mark.browser

FEB = "from=2024-02-01&to=2024-03-31"


def shots(console: Console) -> list[tuple[str, str, str]]:
    """(file name, console path, the page's heading) of each screenshot docs/console.md
    shows."""
    missed = console.seeded.ids[f"{console.seeded.prefix}-B"]
    return [
        ("console-overview.png", f"/console?{FEB}", "Overview"),
        ("console-deadlines-missed.png",
         "/console/deadlines?status=missed&from=2024-02-01&to=2024-02-29", "deadlines"),
        ("console-pending.png", "/console/pending", "Pending"),
        ("console-dispute-timeline.png", f"/console/disputes/{missed}", "Dispute"),
        ("console-sla-report.png", f"/console/sla?{FEB}", "SLA report"),
        ("console-ladders.png", "/console/ladders", "Ladders"),
        ("console-operations.png", "/console/operations", "Operations"),
    ]


def test_screenshots_of_the_pages_the_console_guide_shows(browser: Any, console: Console) -> None:
    out = Path(os.environ.get("ESCALATION_SCREENSHOT_DIR") or ARTIFACTS)
    out.mkdir(parents=True, exist_ok=True)
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    ctx.add_cookies([{"name": k, "value": v, "url": console.url + "/console"}
                     for k, v in session_cookies(console, "admin").items()])
    page = ctx.new_page()
    try:
        for name, path, heading in shots(console):
            resp = page.goto(console.url + path)
            assert resp is not None and resp.status == 200, (path, resp and resp.status)
            h1 = page.locator("h1").first.inner_text()
            assert heading.lower() in h1.lower(), (path, h1)
            page.screenshot(path=str(out / name), full_page=True)
            assert (out / name).stat().st_size > 10_000, name  # a page, not a blank
    finally:
        ctx.close()
