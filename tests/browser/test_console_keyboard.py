"""Keyboard-only use of the deadlines list in Chromium: from the skip link to the filter, the
rows' dispute links and the next-page link with Tab, Shift+Tab and Enter only; every focused
control shows a visible focus indicator; Enter on a dispute link opens the dispute."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urljoin

import pytest
import sqlalchemy as sa

from tests.browser.conftest import ARTIFACTS, DEADLINE, LADDERS, Console
from tests.browser.test_console import login

FOCUSED = """() => {
  const e = document.activeElement;
  const s = getComputedStyle(e);
  return {tag: e.tagName.toLowerCase(), id: e.id, text: (e.textContent || '').trim(),
          href: e.getAttribute('href'), row: !!e.closest('#deadlines tbody'),
          filter: !!e.closest('form.filters'), outline: s.outlineStyle,
          width: parseFloat(s.outlineWidth), visible: e.matches(':focus-visible')};
}"""


@pytest.fixture(scope="module")
def many(console: Console, console_database: tuple[str, sa.Engine]) -> int:
    """60 open disputes with deadlines ahead of now: more than one page of the list."""
    from escalation.adapters.audit_store import PostgresAuditStore
    from escalation.adapters.ladder_files import load_ladder_file
    from escalation.domain.escalation import Escalation, NewEscalation

    _url, engine = console_database
    ladder = load_ladder_file(LADDERS / "reg_e_error_resolution.v1.toml")
    now = datetime.now(UTC).replace(microsecond=0)
    tag = uuid.uuid4().hex[:6].upper()
    escs = [Escalation.new(NewEscalation(
        dispute_id=uuid.uuid4(),
        tier="standard",
        due_at=now + timedelta(days=2),
        materiality="10.00",
        source_hash="aa" * 32,
        entered_tier_at=now,
        trace_id=f"t-kb-{i}",
        external_id=f"KB{tag}-{i:02d}",
        regulatory_deadline=now + timedelta(days=5, minutes=i),
        deadlines=((DEADLINE, now + timedelta(days=5, minutes=i)),)),
        ladder) for i in range(60)]
    PostgresAuditStore(engine).record_enqueue_many(escs, "seed-import", now)
    return len(escs)


def focused(page: Any) -> dict[str, Any]:
    return page.evaluate(FOCUSED)


def tab_until(page: Any, want: Any, limit: int = 200, key: str = "Tab") -> dict[str, Any]:
    """Press ``key`` until the focused element satisfies ``want``; fail after ``limit``."""
    for _ in range(limit):
        page.keyboard.press(key)
        f = focused(page)
        if want(f):
            return f
    raise AssertionError(f"{key} never reached the element; last focus {focused(page)}")


def assert_visible_focus(f: dict[str, Any]) -> None:
    assert f["visible"], f"{f} is not :focus-visible"
    assert f["outline"] != "none" and f["width"] >= 2, f"no focus outline on {f}"


def test_deadlines_list_by_keyboard_only(page: Any, console: Console, many: int) -> None:
    login(page, console, next_path="/deadlines")
    assert page.url.endswith("/console/deadlines")
    # the first stop is the skip link; Enter moves focus to the page's content
    page.keyboard.press("Tab")
    f = focused(page)
    assert f["text"] == "Skip to content"
    assert_visible_focus(f)
    page.keyboard.press("Enter")
    assert focused(page)["id"] == "main"

    # the filter is the first control of the content, its Apply button submits it by Enter
    f = tab_until(page, lambda f: f["tag"] in ("select", "input", "button"), limit=5)
    assert f["filter"] and f["id"] == "status", f
    assert_visible_focus(f)
    f = tab_until(page, lambda f: f["tag"] == "button" and f["filter"], limit=30)
    assert f["text"] == "Apply"
    assert_visible_focus(f)
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert "/console/deadlines?" in page.url
    assert page.locator("#deadlines tbody tr").count() == 50

    # past the filter (skip link again, then on), to the rows' dispute links
    page.keyboard.press("Tab")
    assert focused(page)["text"] == "Skip to content"
    page.keyboard.press("Enter")
    first_row = tab_until(page, lambda f: f["row"])
    assert first_row["tag"] == "a" and first_row["href"].startswith("/console/disputes/")
    assert_visible_focus(first_row)
    page.screenshot(path=str(ARTIFACTS / "console-deadlines-keyboard.png"))
    # every row's dispute link is a stop, in the rows' order, then the next-page link
    hrefs = [first_row["href"]]
    while True:
        page.keyboard.press("Tab")
        f = focused(page)
        if not f["row"]:
            break
        assert_visible_focus(f)
        hrefs.append(f["href"])
    rows = page.locator("#deadlines tbody th a")
    assert hrefs == [rows.nth(i).get_attribute("href") for i in range(rows.count())]
    assert len(hrefs) == 50
    assert f["id"] == "next-page", f
    assert_visible_focus(f)
    # Shift+Tab goes back to the last row's link
    page.keyboard.press("Shift+Tab")
    assert focused(page)["href"] == hrefs[-1]
    page.keyboard.press("Tab")
    assert focused(page)["id"] == "next-page"

    # Enter on the next-page link: the second page, with the rest of the rows
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert "cursor=" in page.url
    second = [a.get_attribute("href") for a in page.locator("#deadlines tbody th a").all()]
    assert second and not set(second) & set(hrefs)
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    target = tab_until(page, lambda f: f["row"])
    assert target["href"] == second[0]

    # Enter on a dispute link opens the dispute
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert page.url == urljoin(console.url, target["href"])
    assert page.locator("#timeline li").count() >= 1
    assert page.locator("h1").inner_text().startswith("Dispute ")
