"""Every CSV the product emits goes through the one writer (``domain.csv_cells.CsvWriter``):
spreadsheet formulas neutralised (OWASP CSV injection: ``=``, ``+``, ``-``, ``@``, tab and
carriage return), CRLF line ends, UTF-8 with an optional byte order mark.

One database of its own holds Reg E disputes whose every regulatory deadline has passed
unmet, with external ids that a spreadsheet would evaluate. The API and the CLI admit the
first four; the tab- and CR-led ones cannot be entered through them, so they are written
behind the ledger triggers (as data from an older version or a restore could hold them).
Each export path is then read back: ``report sla --missed --format csv``, ``report sla
--format csv``, ``audit export --format csv``, and the console's ``deadlines.csv`` and
``audit/export.csv`` downloads.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from escalation.domain.csv_cells import UTF8_BOM, restore_cell
from tests.api.conftest import make_tokens, start_server, stop_server
from tests.conftest import scratch_database
from tests.helpers import run_cli

REG_E = "reg_e_error_resolution"
NO = {"new_account": False, "point_of_sale": False, "foreign_initiated": False}
ADMITTED = ['=HYPERLINK("http://evil.example/","x")', "+1+2", "-2+3", "@SUM(A1:A9)"]
BEHIND = {"tab": "\tcmd", "cr": "\r=1"}  # written behind the triggers
TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


@dataclass
class World:
    env: dict[str, str]
    url: str
    tokens: dict[str, str]
    ids: dict[str, str]  # external id -> dispute id
    window: tuple[str, str]  # ISO instants (the console takes their dates)


def _behind_the_triggers(engine: sa.Engine, did: uuid.UUID, external_id: str) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE escalation_audit DISABLE TRIGGER ALL"))
        for table in ("escalation_audit", "escalation_state"):
            conn.execute(sa.text(f"UPDATE {table} SET external_id = :x WHERE dispute_id = :d"),
                         {"x": external_id, "d": did})
        for trigger in ("trg_escalation_audit_no_mutation", "trg_escalation_audit_no_truncate"):
            conn.execute(sa.text(f"ALTER TABLE escalation_audit ENABLE ALWAYS TRIGGER {trigger}"))


@pytest.fixture(scope="module")
def world(server_urls: tuple[str, str], redis_url: str) -> Iterator[World]:
    from escalation.adapters.db import make_engine
    from escalation.bootstrap import build
    from escalation.service_layer.enqueue import EnqueueRequest
    from escalation.settings import get_settings
    from tests.e2e.helpers import enqueue

    namespace = f"t{uuid.uuid4().hex[:12]}"
    with scratch_database(server_urls[1], "escalation_csv") as db_url:
        app = build(get_settings(redis_url=redis_url, database_url=db_url, namespace=namespace,
                                 log_format="json"), actor="test")
        engine = make_engine(db_url)
        try:
            now = app.scheduler.time()
            old = now - timedelta(days=70)
            names = [*ADMITTED, *(f"placeholder-{k}" for k in BEHIND)]
            reqs = [EnqueueRequest(uuid.uuid4(), "125.00", hashlib.sha256(n.encode()).hexdigest(),
                                   opened_at=old, anchor_at=old, ladder=REG_E, external_id=n,
                                   attributes=NO) for n in names]
            ids = dict(zip(names, enqueue(app, reqs), strict=True))
            for key, value in BEHIND.items():
                did = ids.pop(f"placeholder-{key}")
                _behind_the_triggers(engine, did, value)
                ids[value] = did
            env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
            env.update(ESCALATION_REDIS_URL=redis_url, ESCALATION_DATABASE_URL=db_url,
                       ESCALATION_NAMESPACE=namespace, ESCALATION_LOG_FORMAT="json",
                       ESCALATION_LOG_LEVEL="WARNING", ESCALATION_API_AUTH_FAIL_LIMIT="1000000")
            tokens, _ = make_tokens(engine, f"csv{uuid.uuid4().hex[:8]}")
            url, proc = start_server(env)
            window = ((now - timedelta(days=100)).isoformat(),
                      (now + timedelta(days=100)).isoformat())
            try:
                yield World(env, url, tokens, {k: str(v) for k, v in ids.items()}, window)
            finally:
                stop_server(proc)
        finally:
            engine.dispose()
            app.close()


def _check(data: bytes, column: str, expected: dict[str, str] | None,
           bom: bool = False) -> list[dict[str, str]]:
    """Read CSV bytes: every line ends CRLF, no cell starts with a formula trigger, the
    BOM is there exactly when asked; each external id of ``expected`` appears neutralised
    (``'`` + the text) and restores to itself."""
    text = data.decode("utf-8")
    assert text.startswith(UTF8_BOM) is bom
    text = text.removeprefix(UTF8_BOM)
    assert text.endswith("\r\n") and "\n" not in text.replace("\r\n", ""), repr(text[:200])
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    for row in rows:
        assert not any(c.startswith(TRIGGERS) for c in row.values() if c), row
    if expected is not None:
        cells = {restore_cell(r[column]): r[column] for r in rows if r[column]}
        for external_id in expected:
            assert cells[external_id] == "'" + external_id, (external_id, sorted(cells))
    return rows


def _lines_end_crlf(data: bytes) -> None:
    """Outside quoted cells every line break is CRLF (a CR-led cell is quoted)."""
    body = data.decode("utf-8").removeprefix(UTF8_BOM)
    reader = csv.reader(io.StringIO(body, newline=""))
    rebuilt = io.StringIO(newline="")
    csv.writer(rebuilt, lineterminator="\r\n").writerows(reader)
    assert rebuilt.getvalue() == body


def test_report_sla_missed_csv_on_stdout_and_in_a_file(world: World, tmp_path: Path) -> None:
    since, until = world.window
    args = ("report", "sla", "--from", since, "--to", until, "--missed", "--format", "csv")
    res = subprocess_bytes(world.env, *args)
    rows = _check(res, "external_id", world.ids)
    assert {r["status"] for r in rows} == {"missed"}
    _lines_end_crlf(res)
    out = tmp_path / "missed.csv"
    run = run_cli(world.env, *args, "--out", str(out), "--bom")
    assert run.returncode == 0, run.stderr
    written = out.read_bytes()
    assert written.startswith(UTF8_BOM.encode())
    # a miss still open grows later by the minute: the two runs agree but for its lateness
    assert _without_lateness(written[len(UTF8_BOM.encode()):]) == _without_lateness(res)
    _check(written, "external_id", world.ids, bom=True)


def _without_lateness(data: bytes) -> list[dict[str, str]]:
    """The CSV's rows without ``late_hours`` / ``late_business_days`` (now-dependent)."""
    rows = list(csv.DictReader(io.StringIO(data.decode(), newline="")))
    return [{k: v for k, v in r.items() if k not in ("late_hours", "late_business_days")}
            for r in rows]


def test_report_sla_tier_csv(world: World, tmp_path: Path) -> None:
    since, until = world.window
    out = tmp_path / "sla.csv"
    run = run_cli(world.env, "report", "sla", "--from", since, "--to", until, "--format",
                  "csv", "--out", str(out))
    assert run.returncode == 0, run.stderr
    rows = _check(out.read_bytes(), "ladder", None)
    assert {r["ladder"] for r in rows} == {REG_E}
    _lines_end_crlf(out.read_bytes())


def test_audit_export_csv(world: World, tmp_path: Path) -> None:
    out = tmp_path / "audit.csv"
    run = run_cli(world.env, "audit", "export", "--format", "csv", "--out", str(out))
    assert run.returncode == 0, run.stderr
    _check(out.read_bytes(), "external_id", world.ids)
    _lines_end_crlf(out.read_bytes())
    with_bom = tmp_path / "audit-bom.csv"
    run = run_cli(world.env, "audit", "export", "--format", "csv", "--out", str(with_bom),
                  "--bom")
    assert run.returncode == 0, run.stderr
    assert with_bom.read_bytes() == UTF8_BOM.encode() + out.read_bytes()
    from escalation.service_layer.audit_export import read_csv

    assert {r["external_id"] for r in read_csv(with_bom)} - {None} == set(world.ids)


@contextmanager
def _console(world: World) -> Iterator[httpx.Client]:
    """A client signed in to the console as the compliance role."""
    with httpx.Client(base_url=world.url, timeout=60, follow_redirects=False) as c:
        yield _sign_in(c, world)


def _sign_in(c: httpx.Client, world: World) -> httpx.Client:
    c.get("/console/login")
    r = c.post("/console/login", data={"token": world.tokens["compliance"],
                                       "csrf": c.cookies["esc_console_login"],
                                       "next": "/console"})
    assert r.status_code == 303, r.text
    return c


def test_console_deadlines_csv(world: World) -> None:
    since, until = (t[:10] for t in world.window)
    with _console(world) as c:
        r = c.get("/console/deadlines.csv", params={"from": since, "to": until})
        assert r.status_code == 200, r.text
        rows = _check(r.content, "external_id", world.ids)
        assert {r["status"] for r in rows} == {"missed"}
        _lines_end_crlf(r.content)
        r = c.get("/console/deadlines.csv", params={"from": since, "to": until, "bom": "1"})
        _check(r.content, "external_id", world.ids, bom=True)


def test_console_audit_export_csv(world: World) -> None:
    with _console(world) as c:
        r = c.get("/console/audit/export.csv")
        assert r.status_code == 200, r.text
        _check(r.content, "external_id", world.ids)
        _lines_end_crlf(r.content)


def subprocess_bytes(env: dict[str, str], *args: str) -> bytes:
    """``escalation ARGS`` stdout as bytes (exit 0 asserted)."""
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "escalation", *args], env=env,
                         capture_output=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr.decode()
    return res.stdout
