"""Every console page at 1,280, 768 and 390 px in Debian's chromium: no sideways page scroll
(wide tables scroll inside their own container), every chart label inside its SVG, the nav
and the audit form usable on a phone (docs/console.md, "Layout")."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import ARTIFACTS, Console, session_cookies

pytestmark = pytest.mark.browser

WIDTHS = (1280, 768, 390)

#: a text is "inside" its SVG when its box lies within the SVG's box, give or take this many
#: CSS pixels (anti-aliasing of the glyphs' edges)
SLACK_PX = 0.5


def pages(console: Console) -> list[str]:
    ids = console.seeded.ids
    some = next(iter(ids.values()))
    feb = "from=2024-02-01&to=2024-03-31"
    return ["/console", "/console?" + feb, "/console/deadlines?status=missed&" + feb,
            "/console/deadlines?status=at_risk", "/console/pending", "/console/disputes",
            f"/console/disputes/{some}", "/console/audit", "/console/audit?" + feb,
            "/console/sla?" + feb, "/console/sla",
            "/console/sla?period=month&from=2024-01-01&to=2024-06-30", "/console/ladders",
            "/console/ladders?from=reg_e_error_resolution@1&to=reg_e_error_resolution@3",
            "/console/operations",
            # a dead letter that is not there: the page's 404 form of itself
            f"/console/operations/dead?member=decision:{some}"]


@pytest.fixture(scope="module")
def signed_in(browser: Any, console: Console) -> Iterator[Any]:
    """A browser context signed in as an admin (every page, the admin forms included)."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    ctx.add_cookies([{"name": k, "value": v, "url": console.url + "/console"}
                     for k, v in session_cookies(console, "admin").items()])
    try:
        yield ctx
    finally:
        ctx.close()


def overflow(page: Any) -> dict[str, Any]:
    """The page's horizontal overflow and the elements sticking out of the viewport."""
    return page.evaluate("""() => {
        const w = window.innerWidth;
        const out = [];
        for (const el of document.querySelectorAll('body *')) {
            const r = el.getBoundingClientRect();
            if (r.width && r.right > w + 0.5) {
                let inScroller = false;
                for (let p = el.parentElement; p; p = p.parentElement) {
                    const s = getComputedStyle(p).overflowX;
                    if (s === 'auto' || s === 'scroll' || s === 'hidden') {
                        inScroller = true;
                        break;
                    }
                }
                if (!inScroller)
                    out.push(el.tagName + '#' + el.id + ' ' + Math.round(r.right));
            }
        }
        return {scrollWidth: document.documentElement.scrollWidth, innerWidth: w,
                out: out.slice(0, 8)};
    }""")


def labels_outside(page: Any) -> list[str]:
    """The chart texts whose box is not within their SVG's box."""
    return page.evaluate(f"""() => {{
        const bad = [];
        for (const svg of document.querySelectorAll('figure svg')) {{
            const s = svg.getBoundingClientRect();
            for (const t of svg.querySelectorAll('text')) {{
                const r = t.getBoundingClientRect();
                if (r.left < s.left - {SLACK_PX} || r.right > s.right + {SLACK_PX} ||
                    r.top < s.top - {SLACK_PX} || r.bottom > s.bottom + {SLACK_PX})
                    bad.push(t.textContent + ' ' + Math.round(r.right) + '>' + Math.round(s.right));
            }}
        }}
        return bad;
    }}""")


def outside_viewbox(page: Any) -> list[str]:
    """The chart texts whose box (``getBBox``, in the SVG's own units, as the font draws
    them) is not within the SVG's ``viewBox``: a text the SVG itself cuts, whatever size
    the page scales it to."""
    return page.evaluate(f"""() => {{
        const bad = [];
        for (const svg of document.querySelectorAll('figure svg')) {{
            const v = svg.viewBox.baseVal;
            for (const t of svg.querySelectorAll('text')) {{
                const b = t.getBBox();
                if (b.x < v.x - {SLACK_PX} || b.x + b.width > v.x + v.width + {SLACK_PX} ||
                    b.y < v.y - {SLACK_PX} || b.y + b.height > v.y + v.height + {SLACK_PX})
                    bad.push(t.textContent + ' ' + Math.round(b.x + b.width) + '>' + v.width);
            }}
        }}
        return bad;
    }}""")


@pytest.mark.parametrize("width", WIDTHS)
def test_no_page_scrolls_sideways_and_no_chart_label_is_clipped(
        signed_in: Any, console: Console, width: int) -> None:
    page = signed_in.new_page()
    page.set_viewport_size({"width": width, "height": 900})
    problems: dict[str, Any] = {}
    charts = 0
    try:
        for path in pages(console):
            resp = page.goto(console.url + path)
            expected = 404 if "/operations/dead" in path else 200
            assert resp is not None and resp.status == expected, (path, resp and resp.status)
            got = overflow(page)
            if got["scrollWidth"] > got["innerWidth"] or got["out"]:
                problems[path] = got
            bad = labels_outside(page) + outside_viewbox(page)
            charts += page.locator("figure svg text").count()
            if bad:
                problems[path + " (chart)"] = bad
        # the sign-in form, signed out (a context of its own, without the session cookie)
        anon = signed_in.browser.new_context(viewport={"width": width, "height": 900})
        try:
            login = anon.new_page()
            login.goto(console.url + "/console/login")
            got = overflow(login)
            if got["scrollWidth"] > got["innerWidth"] or got["out"]:
                problems["/console/login"] = got
            field = login.get_by_label("Token").bounding_box()
            assert field is not None and field["x"] + field["width"] <= width
        finally:
            anon.close()
        ARTIFACTS.mkdir(exist_ok=True)
        page.goto(console.url + "/console/sla?from=2024-02-01&to=2024-03-31")
        page.screenshot(path=str(ARTIFACTS / f"console-sla-{width}.png"), full_page=True)
    finally:
        page.close()
    assert charts > 0  # the SLA pages drew their charts
    assert not problems, problems


def test_wide_tables_scroll_in_their_own_container_at_768(
        signed_in: Any, console: Console) -> None:
    page = signed_in.new_page()
    page.set_viewport_size({"width": 768, "height": 900})
    try:
        page.goto(console.url + "/console/sla?from=2024-02-01&to=2024-03-31")
        table = page.locator("#sla")
        box = page.evaluate("""() => {
            const t = document.getElementById('sla');
            const c = t.parentElement;
            return {overflowX: getComputedStyle(c).overflowX, scroll: c.scrollWidth,
                    client: c.clientWidth, last: t.querySelector('thead th:last-child')
                    .getBoundingClientRect().right};
        }""")
        assert box["overflowX"] == "auto"
        # the last column (deadlines missed) is reachable by scrolling the table's container
        table.locator("thead th").last.scroll_into_view_if_needed()
        last = table.locator("thead th").last.bounding_box()
        assert last is not None and last["x"] + last["width"] <= 768 + SLACK_PX
        assert page.evaluate("document.documentElement.scrollWidth") <= 768
    finally:
        page.close()


def test_nav_and_audit_form_are_usable_at_390(signed_in: Any, console: Console) -> None:
    page = signed_in.new_page()
    page.set_viewport_size({"width": 390, "height": 844})
    try:
        page.goto(console.url + "/console/audit")
        # every nav link is on screen (wrapped, not cut) and big enough to tap
        for link in page.locator("nav[aria-label='Console'] a").all():
            b = link.bounding_box()
            assert b is not None and b["x"] >= 0 and b["x"] + b["width"] <= 390, b
            assert b["height"] >= 24, b
        # every audit field is on screen, at least 120 px wide, its label above or beside it
        form = page.locator("form.filters").first
        for field in form.locator("input:not([type=hidden]), select").all():
            b = field.bounding_box()
            assert b is not None and b["x"] >= 0 and b["x"] + b["width"] <= 390, b
            assert b["width"] >= 120, b
        page.screenshot(path=str(ARTIFACTS / "console-audit-390.png"), full_page=True)
        # the form still searches: a keyboard user types an actor and submits
        page.locator("#actor").fill("ops.jane")
        with page.expect_navigation():
            page.locator("#actor").press("Enter")
        assert "actor=ops.jane" in page.url
    finally:
        page.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_chart_labels_with_large_figures_and_long_names_stay_inside_the_svg(
        browser: Any, width: int) -> None:
    """The figures that were cut ("0 met, 4102 missec"): a bar at the chart's full length
    with a long text after it, long ladder / tier labels, every chart kind."""
    from escalation.entrypoints import charts

    long = "reg_e_error_resolution_with_a_long_deployment_name / compliance_review_tier"
    svgs = [
        charts.met_missed("met vs missed", [("reg_e_error_resolution / compliance", 0, 4102),
                                            ("reg_z_billing_error / senior", 123456, 654321),
                                            (long, 1, 2)]),
        charts.distribution("time in tier", [(long, [1, 2, 3, 4, 5, 6, 7000])]),
        charts.grouped("grouped", ["a / b", long], [("entered", "#000", [1234567.0, 2.0]),
                                                    ("p95 h", "#111", [0.5, 99999.25])]),
        charts.achievement("trend", [(long, [("2024-02-05", 123456, 654321),
                                             ("2024-02-12", 0, 0), ("2024-02-19", 1, 0)])],
                           ("achieved", "breached")),
    ]
    page = browser.new_page(viewport={"width": width, "height": 900})
    try:
        page.set_content(
            "<!DOCTYPE html><html><head><meta name='viewport' content='width=device-width'>"
            "<style>body{margin:0;padding:12px;font:14px system-ui,sans-serif}"
            "figure{margin:8px 0} figure svg{max-width:100%;height:auto}</style></head><body>"
            + "".join(f"<figure>{svg}</figure>" for svg in svgs) + "</body></html>")
        assert page.locator("figure svg text").count() > 10
        assert labels_outside(page) == []
        assert outside_viewbox(page) == []
        assert page.evaluate("document.documentElement.scrollWidth") <= width
    finally:
        page.close()
