"""The compliance console in a real browser: sign-in, the missed-deadlines list of a seeded
data set with known answers, a dispute timeline, an audit export checked against its
manifest, the SLA report; screenshots in test-artifacts/."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.conftest import ARTIFACTS, Console, session_cookies

pytestmark = pytest.mark.browser
FEB = "from=2024-02-01&to=2024-02-29&ladder=reg_e_error_resolution"


def login(page: Any, console: Console, role: str = "compliance", next_path: str = "") -> None:
    page.goto(console.url + "/console" + next_path)
    assert "/console/login" in page.url
    page.get_by_label("Token").fill(console.tokens[role])
    with page.expect_navigation():
        page.keyboard.press("Enter")  # keyboard only


def test_login_refuses_service_role_and_bad_csrf(page, console):
    login(page, console, role="service")
    assert "/console/login" in page.url
    assert "may not read the audit ledger" in page.locator(".error").inner_text()
    # a POST without the double-submitted CSRF value (another site's form) is refused
    r = httpx.post(console.url + "/console/login", data={"token": console.tokens["admin"]},
                   follow_redirects=False)
    assert r.status_code == 403
    assert "esc_console=" not in r.headers.get("set-cookie", "")
    # pages and downloads need a session cookie (a token is not one, even an admin's: the
    # cookie is a session id exchanged at sign-in, ADR 0011)
    for cookies in ({}, {"esc_console": console.tokens["service"]},
                    {"esc_console": console.tokens["revoked"]},
                    {"esc_console": console.tokens["admin"]}):
        for path in ("/console/deadlines.csv", "/console/audit/export.csv", "/console/sla"):
            r = httpx.get(console.url + path, cookies=cookies, follow_redirects=False)
            assert r.status_code == 303 and "/console/login" in r.headers["location"], path
    # the assets are the app's own
    css = httpx.get(console.url + "/console/static/console.css")
    assert css.status_code == 200 and "text/css" in css.headers["content-type"]


def test_session_cookie_flags_and_signout(page, console):
    login(page, console)
    assert page.url.rstrip("/").endswith("/console")
    cookie = next(c for c in page.context.cookies() if c["name"] == "esc_console")
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/console"
    with page.expect_navigation():
        page.get_by_role("button", name="Sign out").click()
    assert "/console/login" in page.url
    page.goto(console.url + "/console/deadlines")
    assert "/console/login" in page.url


def test_missed_deadlines_rows_and_lateness(page, console):
    prefix = console.seeded.prefix
    login(page, console, next_path=f"/deadlines?status=missed&{FEB}&sort=late&dir=desc")
    page.screenshot(path=str(ARTIFACTS / "console-deadlines-missed.png"), full_page=True)
    rows = page.locator("#deadlines tbody tr").filter(has_text=prefix)
    texts = [rows.nth(i).inner_text() for i in range(rows.count())]
    assert len(texts) == 3, texts
    # sorted by lateness, most late first: B (113 h), D (65 h), C (23 h)
    assert [t.split()[0] for t in texts] == [f"{prefix}-B", f"{prefix}-D", f"{prefix}-C"]
    b, d, c = texts
    assert "2 business days" in b and "4 d 17 h" in b and "113.0 h" in b
    assert "3 business days" in d and "2 d 17 h" in d and "65.0 h" in d
    assert "1 business day" in c and "23 h 0 min" in c and "23.0 h" in c
    # institution zone with offset; the tier holding each deadline; ladder@version
    assert "2024-02-15 17:00:00 EST (UTC-05:00)" in b
    assert "2024-02-20 10:00:00 EST (UTC-05:00)" in b  # resolved
    assert c.rstrip().endswith("senior") and b.rstrip().endswith("standard")
    assert "reg_e_error_resolution@1" in b
    assert "determine_or_provisionally_credit" in b and "12 CFR 1005.11(c)(1)" in b
    # the met one is not in the missed list, and is in the met list
    assert f"{prefix}-A" not in page.locator("#deadlines").inner_text()
    page.goto(console.url + f"/console/deadlines?status=met&{FEB}")
    assert f"{prefix}-A" in page.locator("#deadlines").inner_text()
    # the table fits 1,280 px: no horizontal scroll
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    # the CSV download: same rows, instants with offset
    with page.expect_download() as dl:
        page.goto(console.url + f"/console/deadlines?status=missed&{FEB}")
        page.locator("#csv").click()
    text = Path(dl.value.path()).read_text("utf-8")
    mine = [r for r in csv.DictReader(io.StringIO(text)) if r["external_id"].startswith(prefix)]
    assert {r["external_id"]: (r["late_business_days"], r["late_hours"]) for r in mine} == {
        f"{prefix}-B": ("2", "113.00"), f"{prefix}-C": ("1", "23.00"),
        f"{prefix}-D": ("3", "65.00")}
    assert mine[0]["deadline_at"].endswith("-05:00")


def test_overview_links_to_missed_list(page, console):
    login(page, console, next_path="?from=2024-02-01&to=2024-02-29")
    page.screenshot(path=str(ARTIFACTS / "console-overview.png"), full_page=True)
    tile = page.locator("#missed-link")
    assert int(tile.locator("strong").inner_text()) >= 3
    with page.expect_navigation():
        tile.click()
    assert "status=missed" in page.url
    assert page.locator("#deadlines tbody tr").filter(
        has_text=console.seeded.prefix).count() == 3


def test_overview_now_pending_overdue_and_at_risk(page, console):
    prefix = console.seeded.prefix
    login(page, console)
    tiles = {t.inner_text().split("\n", 1)[1].strip(): int(t.locator("strong").inner_text())
             for t in page.locator(".tiles li").all()}
    assert tiles["overdue now"] >= 1 and tiles["due in the next hour"] >= 1
    assert tiles["regulatory deadlines at risk (next 48 h)"] >= 1
    rows = [r.inner_text().split("\t") for r in page.locator("table tbody tr").all()]
    reg_e = [r[1] for r in rows if r[0] == "reg_e_error_resolution"]
    assert reg_e.index("standard") < reg_e.index("senior")  # ladder order, not alphabetical
    # the row's overdue number opens the overdue list of that ladder and tier
    row = page.locator("table tbody tr").filter(has_text="reg_e_error_resolution").filter(
        has=page.get_by_role("cell", name="standard", exact=True))
    with page.expect_navigation():
        row.locator("td").nth(4).get_by_role("link").click()
    assert "window=overdue" in page.url
    listed = page.locator("table").inner_text()
    assert f"{prefix}-E" in listed and f"{prefix}-F" not in listed
    page.goto(console.url + "/console/deadlines?status=at_risk")
    at_risk = page.locator("#deadlines").inner_text()
    assert f"{prefix}-E" in at_risk and f"{prefix}-F" not in at_risk


def test_pending_list_stages_time_to_breach_and_share_elapsed(page, console):
    prefix = console.seeded.prefix
    login(page, console, next_path="/pending")

    def mine() -> dict[str, list[str]]:
        rows = [r.inner_text().split("\t") for r in page.locator("#pending tbody tr").all()]
        return {r[1]: r for r in rows if r[1].startswith(prefix)}

    rows = mine()
    e, f = rows[f"{prefix}-E"], rows[f"{prefix}-F"]
    assert e[4] == "breached" and e[7].startswith("breached ") and e[7].endswith(" ago")
    assert f[4] == "in progress" and f[7].endswith("min")  # due in 30 min
    # E entered its tier 2 days ago and was due 1 h ago: 47 h of a 47 h window and more
    assert int(e[8].rstrip(" %")) > 100 > int(f[8].rstrip(" %")) > 90
    with page.expect_navigation():
        page.locator("#sort-elapsed").click()
    assert "sort=elapsed" in page.url
    order = [r.inner_text().split("\t")[1] for r in page.locator("#pending tbody tr").all()]
    assert order.index(f"{prefix}-E") < order.index(f"{prefix}-F")
    page.goto(console.url + "/console/pending?stage=breached")
    assert set(mine()) == {f"{prefix}-E"}
    page.goto(console.url + "/console/pending?stage=in_progress")
    assert set(mine()) == {f"{prefix}-F"}


def test_dispute_timeline(page, console):
    ext = f"{console.seeded.prefix}-B"
    did = console.seeded.ids[ext]
    login(page, console, next_path=f"/disputes/{did}")
    page.screenshot(path=str(ARTIFACTS / "console-dispute.png"), full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    items = page.locator("#timeline li")
    assert items.count() == 2
    first, last = items.nth(0).inner_text(), items.nth(1).inner_text()
    assert "ENQUEUED" in first and "seed-import" in first
    assert "2024-02-01 09:00:00 EST (UTC-05:00)" in first
    assert "CANCELLED" in last and "ops.jane" in last and f"resolved {ext}: credited" in last
    assert page.locator("#chain-status").inner_text().startswith("verified")
    deadlines = page.locator("#dispute-deadlines").inner_text()
    assert "determine_or_provisionally_credit" in deadlines and "missed" in deadlines
    # keyboard: the skip link is the first stop and lands on the main content
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"


def test_audit_export_matches_manifest(page, console):
    did = console.seeded.ids[f"{console.seeded.prefix}-C"]
    login(page, console, next_path=f"/audit?dispute_id={did}")
    assert page.locator("#audit tbody tr").count() == 2
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    page.screenshot(path=str(ARTIFACTS / "console-audit.png"), full_page=True)
    with page.expect_download() as got_csv:
        page.locator("#export-csv").click()
    with page.expect_download() as got_manifest:
        page.locator("#manifest-csv").click()
    data = Path(got_csv.value.path()).read_bytes()
    manifest = json.loads(Path(got_manifest.value.path()).read_text("utf-8"))
    assert manifest["sha256"] == hashlib.sha256(data).hexdigest()
    assert manifest["row_count"] == 2 == len(data.decode().splitlines()) - 1
    assert set(manifest["column_dictionary"]) == set(manifest["columns"])
    assert manifest["csv_formula_guard"] is True
    exported = list(csv.DictReader(io.StringIO(data.decode())))
    assert exported[1]["event"] == "CANCELLED"
    assert exported[1]["actor"] == "'=SUM(1+1)"  # formula injection neutralised
    with page.expect_download() as got_jsonl:
        page.locator("#export-jsonl").click()
    lines = Path(got_jsonl.value.path()).read_text("utf-8").splitlines()
    assert [json.loads(x)["event"] for x in lines] == ["ENQUEUED", "CANCELLED"]
    assert json.loads(lines[1])["actor"] == "=SUM(1+1)"  # JSON keeps the value as recorded


def test_sla_report_charts_in_ladder_order(page, console):
    login(page, console, next_path="/sla?from=2024-02-01&to=2024-03-31")
    page.screenshot(path=str(ARTIFACTS / "console-sla.png"), full_page=True)
    assert page.locator("figure svg").count() == 4  # two trends, met vs missed, time in tier
    svgs = page.locator("#met-missed-chart svg")
    labels = [r.inner_text().split("\t")[:2] for r in page.locator("#sla tbody tr").all()]
    reg_e = [t for lad, t in labels if lad == "reg_e_error_resolution"]
    order = {"standard": 0, "senior": 1, "compliance": 2}
    assert reg_e == sorted(reg_e, key=order.__getitem__), reg_e
    assert "met" in svgs.nth(0).inner_html() and "missed" in svgs.nth(0).inner_html()
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    # a bad date: the error page still says what "on time" means (its grace was blank)
    page.goto(console.url + "/console/sla?from=2024-13-01")
    caption = page.locator("#sla caption").inner_text()
    assert "within 60 s of due" in caption, caption


def test_bad_filter_values_are_a_422_page_not_a_server_error(console):
    cookies = session_cookies(console)
    for path in ("/console/pending?window=forever", "/console/pending?window=HOUR",
                 "/console/pending?stage=late", "/console/pending?sort=size",
                 "/console/pending?cursor=bm90IGEgY3Vyc29y",
                 "/console/audit?ladder_version=99999999999999999999",
                 "/console/audit?tier=%00", "/console/audit?tier=nope"):
        r = httpx.get(console.url + path, cookies=cookies)
        assert r.status_code == 422, (path, r.status_code, r.text[:300])
        assert "text/html" in r.headers["content-type"], path
    # a tier no ladder has: refused (it was an empty result, read as "no such escalation")
    r = httpx.get(console.url + "/console/audit/export.csv?tier=nope", cookies=cookies)
    assert r.status_code == 422 and "unknown tier 'nope'" in r.text, r.text[:300]


def test_overview_with_a_bad_or_reversed_period_is_a_422_page_not_a_server_error(console):
    # it was a 500 ("'now' is undefined" in the template) where every other page says 422
    cookies = session_cookies(console)
    for query, message in (("from=2024-13-01", "from: not a date or ISO-8601 time"),
                           ("to=yesterday", "to: not a date or ISO-8601 time"),
                           ("from=2026-03-10&to=2026-03-01", "from must be before to"),
                           ("from=2026-03-10T00:00:00", "from: a time needs its UTC offset")):
        r = httpx.get(f"{console.url}/console?{query}", cookies=cookies)
        assert r.status_code == 422, (query, r.status_code, r.text[:300])
        assert "text/html" in r.headers["content-type"], query
        assert '<p class="error" role="alert">' in r.text and message in r.text, query
        assert "<h1>Overview</h1>" in r.text and 'id="h-period"' not in r.text, query
    # the typed period stays in the form
    r = httpx.get(f"{console.url}/console?from=2026-03-10&to=2026-03-01", cookies=cookies)
    assert 'value="2026-03-10"' in r.text and 'value="2026-03-01"' in r.text
    # and a good one still shows the figures
    r = httpx.get(f"{console.url}/console?from=2026-03-01&to=2026-03-10", cookies=cookies)
    assert r.status_code == 200 and 'id="h-period"' in r.text


def test_a_console_address_with_a_trailing_slash_goes_to_the_page(page, console):
    for typed, target in (("/console/", "/console"), ("/console/audit/", "/console/audit"),
                          ("/console/audit/?tier=senior", "/console/audit?tier=senior"),
                          ("/console/disputes/abc//", "/console/disputes/abc")):
        r = httpx.get(console.url + typed, follow_redirects=False)
        assert r.status_code == 308, (typed, r.status_code)
        assert r.headers["location"] == target, typed
    auth = {"Authorization": f"Bearer {console.tokens['compliance']}"}
    assert httpx.get(console.url + "/v1/audit/", headers=auth).status_code == 404  # exact
    page.goto(console.url + "/console/")  # a person typing it lands on the sign-in page
    assert page.url.startswith(console.url + "/console/login")


def _trend_rows(page: Any, table: str) -> dict[tuple[str, str], list[str]]:
    """The decided rows of a trend table: (key, span) -> [achieved, not, rate]."""
    out = {}
    for row in page.locator(f"#{table} tbody tr").all():
        cells = row.inner_text().split("\t")
        if len(cells) == 8 and cells[7] != "none decided":
            out[(cells[1], cells[2])] = cells[5:8]
    return out


def test_sla_achievement_trend_per_week_and_per_month(page, console):
    login(page, console, next_path="/sla?from=2024-02-01&to=2024-03-31")
    # the seeded Reg E deadlines: A met, B and C missed on 15 Feb; D missed on 27 Feb
    assert _trend_rows(page, "deadline-trend") == {
        ("determine_or_provisionally_credit", "2024-02-12"): ["1", "2", "33.3 %"],
        ("determine_or_provisionally_credit", "2024-02-26"): ["0", "1", "0.0 %"]}
    # every stay ended by its resolution (cancel) in the tier: A 14 Feb, B 20 Feb, D 1 Mar
    # in standard, C 16 Feb in senior
    assert _trend_rows(page, "tier-trend") == {
        ("standard", "2024-02-12"): ["1", "0", "100.0 %"],
        ("standard", "2024-02-19"): ["1", "0", "100.0 %"],
        ("standard", "2024-02-26"): ["1", "0", "100.0 %"],
        ("senior", "2024-02-12"): ["1", "0", "100.0 %"]}
    texts = page.locator("#deadline-trend-chart svg text").all_text_contents()
    assert "2024-02-12: 33.3 % (1 of 3)" in texts, texts
    # per month, chosen with the keyboard
    page.locator("#period").focus()
    page.keyboard.press("End")  # the last option: month
    page.locator("#period").press("Tab")
    with page.expect_navigation():
        page.keyboard.press("Enter")  # on Apply
    assert "period=month" in page.url
    assert _trend_rows(page, "deadline-trend") == {
        ("determine_or_provisionally_credit", "2024-02"): ["1", "3", "25.0 %"]}
    assert _trend_rows(page, "tier-trend") == {
        ("standard", "2024-02"): ["2", "0", "100.0 %"],
        ("standard", "2024-03"): ["1", "0", "100.0 %"],
        ("senior", "2024-02"): ["1", "0", "100.0 %"]}
    resp = page.goto(console.url + "/console/sla?period=day")
    assert resp is not None and resp.status == 422
    assert "period must be week or month" in page.locator(".error").inner_text()


def test_the_sla_page_says_when_the_rollup_is_not_backfilled(page, console, console_database):
    import sqlalchemy as sa

    from tests.browser.conftest import refresh_sla_rollup

    _url, engine = console_database
    with engine.begin() as conn:  # as on a database where no refresh ever ran
        conn.execute(sa.text("DELETE FROM sla_rollup_state"))
    try:
        login(page, console, next_path="/sla?from=2024-02-01&to=2024-03-31")
        resp = page.goto(page.url)
        assert resp is not None and resp.status == 503
        notice = page.locator("#rollup-notice")
        assert notice.is_visible() and notice.get_attribute("role") == "alert"
        assert "escalation report sla-refresh" in notice.inner_text()
        assert "not backfilled" in notice.inner_text()
        assert page.locator("#sla").count() == 0  # no figures at all, not zeros
        assert page.locator("figure svg").count() == 0
        with engine.connect() as conn:  # the page started no backfill
            assert conn.execute(sa.text("SELECT count(*) FROM sla_rollup_state")).scalar() == 0
    finally:
        refresh_sla_rollup(console.env)
    page.reload()
    assert page.locator("#rollup-notice").count() == 0
    assert page.locator("#sla tbody tr").count() == 2


def test_deadline_lists_and_overview_say_when_they_are_computed_from_the_ledger(
        page, console, console_database):
    import sqlalchemy as sa

    from tests.browser.conftest import refresh_sla_rollup

    prefix = console.seeded.prefix
    _url, engine = console_database
    path = f"/deadlines?status=missed&{FEB}&sort=late&dir=desc"

    def rows() -> list[str]:
        return [r.inner_text() for r in page.locator("#deadlines tbody tr").filter(
            has_text=prefix).all()]

    login(page, console, next_path=path)
    from_rollup = rows()
    assert len(from_rollup) == 3 and page.locator("#rollup-notice").count() == 0
    page.goto(console.url + "/console?from=2024-02-01&to=2024-02-29")
    missed = page.locator("#missed-link strong").inner_text()
    with engine.begin() as conn:  # as on a database where no refresh ever ran
        conn.execute(sa.text("DELETE FROM sla_rollup_state"))
    try:
        page.goto(console.url + "/console" + path)
        notice = page.locator("#rollup-notice")
        assert notice.is_visible() and notice.get_attribute("role") == "status"
        assert "escalation report sla-refresh" in notice.inner_text()
        assert "computed from the ledger" in notice.inner_text().lower()
        assert rows() == from_rollup  # the same rows, the slow way
        page.goto(console.url + "/console?from=2024-02-01&to=2024-02-29")
        assert page.locator("#rollup-notice").is_visible()
        assert page.locator("#missed-link strong").inner_text() == missed
        with engine.connect() as conn:  # no page started the backfill
            assert conn.execute(sa.text("SELECT count(*) FROM sla_rollup_state")).scalar() == 0
    finally:
        refresh_sla_rollup(console.env)
    page.reload()
    assert page.locator("#rollup-notice").count() == 0
