"""Generated query strings (hypothesis) on every console page and download, signed in, on
the seeded server: never a 5xx (a bad or reversed period, a wrong page number, an unknown
status, a cursor from nowhere are each a 4xx page or ignored). The overview's reversed
from/to was a 500 once; it is a 422 page."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.browser.conftest import Console

ROUTES = ["/console", "/console/pending", "/console/deadlines", "/console/deadlines.csv",
          "/console/disputes", "/console/audit", "/console/audit/export.csv",
          "/console/audit/export.jsonl", "/console/audit/export.manifest", "/console/sla"]
NAMES = ["from", "to", "ladder", "tier", "window", "page", "status", "sort", "dir", "open",
         "deadline", "dispute_id", "source", "external_id", "decision", "actor",
         "ladder_version", "cursor", "format", "next", "grace_s"]
values = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["2024-02-29", "2024-02-30", "2024-13-01", "2024-02-01T00:00:00",
                     "2024-02-01T00:00:00+00:00", "9999-12-31", "0001-01-01", "-1", "0",
                     "99999999999999999999", "desc", "asc", "missed", "met", "at_risk",
                     "overdue", "hour", "day", "1", "reg_e_error_resolution", "standard",
                     str(uuid.uuid4()), "cfpb", "csv", "jsonl", "late", "deadline_at",
                     "=SUM(1)", "<script>", "%00", "\x00", "\u202e"]),
    st.integers(min_value=-10**20, max_value=10**20).map(str))
queries = st.dictionaries(st.sampled_from(NAMES), values, max_size=5)
FUZZ = settings(max_examples=25, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


@pytest.fixture(scope="module")
def signed_in(console: Console) -> Iterator[httpx.Client]:
    c = httpx.Client(base_url=console.url, timeout=60, follow_redirects=False)
    c.get("/console/login")
    r = c.post("/console/login", data={"token": console.tokens["compliance"],
                                       "csrf": c.cookies["esc_console_login"]})
    assert r.status_code == 303
    try:
        yield c
    finally:
        c.close()


def test_a_reversed_or_invalid_period_is_422_on_the_overview(signed_in: httpx.Client) -> None:
    for q in ({"from": "2024-03-01", "to": "2024-02-01"}, {"from": "yesterday"},
              {"to": "2024-02-01T00:00:00"}):
        r = signed_in.get("/console", params=q)
        assert r.status_code == 422, (q, r.status_code)


@pytest.mark.parametrize("route", ROUTES)
def test_console_query_parameters_never_5xx(signed_in: httpx.Client, console: Console,
                                           route: str) -> None:
    seeded = next(iter(console.seeded.ids.values()))
    targets = [route] if route != "/console/disputes" else [route, f"{route}/{seeded}"]

    @FUZZ
    @given(q=queries)
    def run(q: dict[str, str]) -> None:
        for path in targets:
            r = signed_in.get(path, params=q)
            assert r.status_code < 500, (path, q, r.status_code, r.text[:300])
            if r.status_code == 303:  # a redirect stays on the console (or its sign-in)
                assert re.match(r"^/console(/|$|\?)", r.headers["location"]), q

    run()
