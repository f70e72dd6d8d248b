"""The dispute timeline in Chromium: the dispute's source system and external id are shown;
each ledger row's payload is pretty-printed (indented, sorted keys) in a collapsed
<details>, escaped (markup in a payload is text, no script runs); a row's readable line
stays visible outside the collapsed payload."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from tests.browser.conftest import ARTIFACTS, DEADLINE, LADDERS, Console
from tests.browser.test_console import login

XSS = "<script>window.__pwned = 1</script>"
XSS_IMG = "<img src=x onerror=\"window.__pwned = 2\">"


@pytest.fixture(scope="module")
def sourced(console: Console, console_database: tuple[str, sa.Engine]) -> dict[str, Any]:
    """Two disputes of this module's own: one enqueued from a named source system with a
    payload holding markup, one with neither source nor external id."""
    from escalation.adapters.audit_store import PostgresAuditStore
    from escalation.adapters.ladder_files import load_ladder_file
    from escalation.domain.escalation import Escalation, NewEscalation

    _url, engine = console_database
    ladder = load_ladder_file(LADDERS / "reg_e_error_resolution.v1.toml")
    store = PostgresAuditStore(engine)
    now = datetime.now(UTC).replace(microsecond=0)
    ext = f"TL{uuid.uuid4().hex[:8].upper()}"
    named, anonymous = uuid.uuid4(), uuid.uuid4()
    escs = [Escalation.new(NewEscalation(
        dispute_id=did,
        tier="standard",
        due_at=now + timedelta(days=3),
        materiality="50.00",
        source_hash="ef" * 32,
        entered_tier_at=now,
        trace_id=f"t-{did}",
        external_id=ext if did == named else None,
        regulatory_deadline=now + timedelta(days=9),
        deadlines=((DEADLINE, now + timedelta(days=9)),)),
        ladder) for did in (named, anonymous)]
    store.record_enqueue_many(escs, "seed-import", now, details={named: {
        "source": "cfpb_portal", "zz_note": XSS,
        "complaint": {"product": XSS_IMG, "amount": "125.00"}}})
    store.record_cancel(named, "ops.jane", now + timedelta(hours=1), f"closed {XSS}")
    return {"ext": ext, "named": named, "anonymous": anonymous}


def test_timeline_shows_source_and_collapsed_escaped_payloads(
        page: Any, console: Console, sourced: dict[str, Any]) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    login(page, console, next_path=f"/disputes/{sourced['named']}")
    source = page.locator("#dispute-source").inner_text()
    assert "cfpb_portal" in source and sourced["ext"] in source
    assert sourced["ext"] in page.locator("h1").inner_text()

    items = page.locator("#timeline li")
    assert items.count() == 2
    enq, cancel = items.nth(0), items.nth(1)
    # every row's payload is in a <details>, collapsed, whose summary says what it is
    payloads = page.locator("#timeline details.payload")
    assert payloads.count() == 2
    for i in range(2):
        assert payloads.nth(i).evaluate("d => d.open") is False
        assert "Payload of row" in payloads.nth(i).locator("summary").inner_text()
    pre = enq.locator("details.payload pre")
    assert not pre.is_visible()
    # the cancel's reason stays readable outside the payload, as text
    assert f"reason: closed {XSS}" in cancel.locator(".why").inner_text()
    # the nested object is not dumped on the visible line (only the plain entries are)
    assert "complaint" not in enq.locator(".why").inner_text()

    # opened by keyboard: focus the summary, Enter
    enq.locator("summary").focus()
    page.keyboard.press("Enter")
    assert enq.locator("details.payload").evaluate("d => d.open") is True
    assert pre.is_visible()
    shown = pre.inner_text()
    # pretty-printed: the stored details as indented JSON with sorted keys
    stored = json.loads(shown)
    assert stored["source"] == "cfpb_portal" and stored["zz_note"] == XSS
    assert stored["complaint"]["product"] == XSS_IMG
    assert shown == json.dumps(stored, indent=2, sort_keys=True, ensure_ascii=False)
    assert '\n  "complaint": {\n    "amount": "125.00",' in shown
    # escaped: the markup is text, no element made of it, nothing ran
    assert page.locator("#timeline script, #timeline img").count() == 0
    assert page.evaluate("window.__pwned") is None and not dialogs
    page.screenshot(path=str(ARTIFACTS / "console-dispute-payload.png"), full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280


def test_timeline_says_when_no_source_is_recorded(
        page: Any, console: Console, sourced: dict[str, Any]) -> None:
    login(page, console, next_path=f"/disputes/{sourced['anonymous']}")
    source = page.locator("#dispute-source").inner_text()
    assert "source system not recorded" in source and "no external id" in source


@pytest.fixture(scope="module")
def attributed(console: Console, console_database: tuple[str, sa.Engine]) -> dict[str, Any]:
    """A dispute enqueued with source attributes, two of them markup (built by the enqueue
    use case's builder, recorded as ``record_built`` records it), and one without any."""
    from escalation.adapters.audit_store import PostgresAuditStore
    from escalation.adapters.ladder_files import load_ladder_file
    from escalation.domain.calendars import builtin_calendars
    from escalation.service_layer.enqueue import EnqueueRequest, build_one

    _url, engine = console_database
    ladder = load_ladder_file(LADDERS / "dispute_review.v1.toml")
    store = PostgresAuditStore(engine)
    now = datetime.now(UTC).replace(microsecond=0)
    with_attrs, without = uuid.uuid4(), uuid.uuid4()
    attrs = {"Product": "Credit card", "Company": XSS, "Issue": XSS_IMG, "State": "FL"}
    built = [build_one(EnqueueRequest(dispute_id=did, materiality="10.00", source_hash="ab",
                                      tier="standard", opened_at=now,
                                      source_attributes=attrs if did == with_attrs else None),
                       ladder, builtin_calendars(), now) for did in (with_attrs, without)]
    store.record_enqueue_many([b.escalation for b in built], "seed-import", now,
                              details={b.escalation.dispute_id: b.details for b in built})
    return {"with": with_attrs, "without": without, "attrs": attrs}


def test_source_attributes_are_shown_escaped(page: Any, console: Console,
                                             attributed: dict[str, Any]) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    login(page, console, next_path=f"/disputes/{attributed['with']}")
    shown = page.locator("#source-attributes")
    names = shown.locator("dt").all_inner_texts()
    values = shown.locator("dd").all_inner_texts()
    assert names == sorted(attributed["attrs"])  # by name
    assert dict(zip(names, values, strict=True)) == attributed["attrs"]  # the markup as text
    assert page.locator("#source-attributes script, #source-attributes img").count() == 0
    assert page.locator("main script, main img").count() == 0
    assert page.evaluate("window.__pwned") is None and not dialogs
    # the ENQUEUED row's payload holds them too (they are under its hash)
    enq = page.locator("#timeline li").nth(0)
    payload = enq.locator("details.payload pre").text_content() or ""  # collapsed: not shown
    assert json.loads(payload)["source_attributes"] == attributed["attrs"]
    page.screenshot(path=str(ARTIFACTS / "console-dispute-source-attributes.png"),
                    full_page=True)


def test_no_source_attributes_is_said(page: Any, console: Console,
                                      attributed: dict[str, Any]) -> None:
    login(page, console, next_path=f"/disputes/{attributed['without']}")
    assert "none recorded" in page.locator("#source-attributes").inner_text()
