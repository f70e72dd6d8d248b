"""The console's deadline lists and overview read the SLA rollup (docs/adr/0037), on a real
server and PostgreSQL: while the rollup is not backfilled they are computed from the ledger
and say so (no backfill started by a page); once it is, the same rows and counts come from
it, without the notice; a miss recorded after the backfill shows on the next request (each
page refreshes the rollup first: nothing is hidden until someone runs a refresh)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from escalation.adapters.sla_rollup import PostgresSlaRollup
from escalation.service_layer.enqueue import EnqueueRequest
from escalation.service_layer.obligations import Resolve, resolve
from tests.conftest import scratch_database
from tests.e2e.helpers import enqueue
from tests.helpers import run_cli

REG_E = "reg_e_error_resolution"
REG_E_ATTRS = {"new_account": False, "point_of_sale": False, "foreign_initiated": False}
PAGES = ("/console/deadlines?status=missed&open=1", "/console/deadlines",
         "/console/deadlines?status=met", "/console/deadlines?sort=late&dir=desc",
         "/console/deadlines?sort=dispute", "/console/deadlines.csv?status=missed")


@pytest.fixture(scope="module")
def database_url(server_urls: tuple[str, str]) -> Iterator[str]:
    """This module's own database (it overrides the session's for every fixture here: the
    engine, the App, the server, the CLI): the overview counts every dispute's open misses,
    and other tests' disputes in the session's database change between two requests (their
    deadlines pass, or they are pinned to ladder files only their own process knew)."""
    with scratch_database(server_urls[1], "escalation_console_rollup") as url:
        yield url


@pytest.fixture(scope="module")
def engine(database_url: str) -> Iterator[sa.Engine]:
    """An engine on this module's database."""
    from escalation.adapters.db import make_engine

    eng = make_engine(database_url)
    yield eng
    eng.dispose()


def _reg_e(app: Any, days_back: int) -> uuid.UUID:
    did = uuid.uuid4()
    now = app.scheduler.time()
    enqueue(app, [EnqueueRequest(did, "125.00", "ab" * 32,
                                 opened_at=now - timedelta(days=days_back),
                                 anchor_at=now - timedelta(days=days_back), ladder=REG_E,
                                 attributes=REG_E_ATTRS)])
    return did


def _ids(row: str) -> list[str]:
    """The dispute ids a listed row names."""
    return re.findall(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", row)


def _signed_in(server: Any) -> httpx.Client:
    c = httpx.Client(base_url=server.url, timeout=120, follow_redirects=False)
    c.get("/console/login")
    r = c.post("/console/login", data={"token": server.tokens["compliance"],
                                       "csrf": c.cookies["esc_console_login"],
                                       "next": "/console"})
    assert r.status_code == 303, r.text
    return c


def _listed(c: httpx.Client, path: str) -> tuple[bool, list[str]]:
    """(the rollup notice shown, the page's rows: dispute id and deadline cells)."""
    r = c.get(path)
    assert r.status_code == 200, r.text[:2000]
    if path.startswith("/console/deadlines.csv"):
        return False, r.text.splitlines()
    rows = re.findall(r'<tr class="[a-z_]+">(.*?)</tr>', r.text, re.S)
    cells = [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", row)).strip() for row in rows]
    return 'id="rollup-notice"' in r.text, cells


def _open_missed(c: httpx.Client) -> tuple[bool, dict[str, str]]:
    """(the rollup notice shown, the overview's figures by label)."""
    r = c.get("/console")
    assert r.status_code == 200, r.text[:2000]
    tiles = re.findall(r"<strong>(\d+)</strong>\s*([^<]+)<", r.text)
    return 'id="rollup-notice"' in r.text, {label.strip(): n for n, label in tiles}


def test_the_lists_and_the_overview_read_the_rollup_once_backfilled(
    app: Any, api_server: Any, cli_env: dict[str, str],
) -> None:
    kw = {"scheduler": app.scheduler, "store": app.store, "ladders": app.ladders,
          "calendars": app.calendars}
    mine = [str(_reg_e(app, back)) for back in (70, 50, 12, 1)]
    for back in (40, 1):  # resolved now: late (a miss with a lateness) and on time
        did = _reg_e(app, back)
        resolve(Resolve(did, "error_corrected", "ops", f"r-{back}"), **kw)
        mine.append(str(did))

    def own(rows: list[str]) -> list[str]:
        """This test's rows (the session's database holds other tests' disputes too, whose
        states may move with the clock between two requests)."""
        return [r for r in rows if any(d in r for d in mine)]
    store = PostgresSlaRollup(app.engine)
    with app.engine.begin() as conn:  # as on a database where no refresh ever ran
        conn.execute(sa.text("DELETE FROM sla_rollup_state"))
    c = _signed_in(api_server)
    try:
        ledger = {}
        for path in PAGES:
            notice, rows = _listed(c, path)
            assert notice or path.endswith("csv?status=missed"), path
            ledger[path] = own(rows)
            assert ledger[path], path
        notice, before = _open_missed(c)
        assert notice
        assert store.state() is None  # no page started the backfill
        # the backfill as an operator runs it, with the server's ladder directory (earlier
        # tests' disputes may be pinned to ladders only their own process knew)
        done = run_cli(cli_env, "report", "sla-refresh", "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["full"] is True
        for path in PAGES:
            notice, rows = _listed(c, path)
            rows = own(rows)
            assert not notice, path
            # an open miss grows later with the clock between the two reads: the same
            # disputes in the same order, and the rows equal but for their digits
            assert [_ids(r) for r in rows] == [_ids(r) for r in ledger[path]], path
            rows, ledger[path] = ([re.sub(r"\d", "#", r) for r in x]
                                  for x in (rows, ledger[path]))
            assert rows == ledger[path], path
        notice, after = _open_missed(c)
        assert not notice
        open_missed = "regulatory deadlines missed and still open (any date)"
        assert after[open_missed] == before[open_missed]
        assert int(after[open_missed]) >= 2
        # a miss recorded after the backfill: on the next request, no refresh run by hand
        late = _reg_e(app, 60)
        _notice, rows = _listed(c, PAGES[0])
        assert any(str(late) in r for r in rows)
        assert int(_open_missed(c)[1][open_missed]) > int(after[open_missed])
    finally:
        c.close()


def test_a_filter_naming_an_unknown_ladder_or_deadline_is_refused(api_server: Any) -> None:
    # an unknown name would list nothing and read as "no misses": refused, naming the field
    c = _signed_in(api_server)
    try:
        for path in ("/console/deadlines?ladder=nope", "/console/deadlines.csv?ladder=nope"):
            r = c.get(path)
            assert r.status_code == 422, (path, r.status_code)
            assert "unknown ladder &#39;nope&#39;" in r.text or "unknown ladder 'nope'" in r.text
        r = c.get("/console/deadlines?deadline=nope&status=missed")
        assert r.status_code == 422 and "deadline: unknown deadline" in r.text
        assert c.get(f"/console/deadlines?ladder={REG_E}").status_code == 200
    finally:
        c.close()
