"""The README's shell blocks run as written: "Using it" (the dispute it enqueues, the worker
burst, the per-dispute commands, the CSV import, notify --burst, audit, report, reconcile,
doctor), the ladder-change block and "Over HTTP" (token, serve, curl), each through ``bash``
with ``set -e``, in order, against a database of its own and the test Redis.

Each block runs in a new ``bash``, with the ``field`` function the first block defines (the
reader's shell has it). What the test changes, and only that: the ``export`` of the two
server URLs and ``createdb`` (the test makes a database of its own), the names that must be
unique per run (case and complaint ids, the token name), the HTTP port (a free one), and the
ladder file the ladder block says to add first. Blocks not run: the quick start (``pip
install``, ``demo``), the test commands, and the console block (it leaves a server for a
browser)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def _blocks() -> dict[str, str]:
    """The bash blocks of the README by the heading (or first line) they run under."""
    text = README.read_text()
    found: dict[str, str] = {}
    heading = ""
    for part in re.split(r"(^#{2,3} [^\n]*$|```bash\n.*?```)", text, flags=re.M | re.S):
        if part.startswith("#"):
            heading = part.lstrip("#").strip()
        elif part.startswith("```bash"):
            body = part[len("```bash\n"):-3]
            key = heading if heading not in found else f"{heading}: {body.splitlines()[0]}"
            found[key] = body
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(block: str, env: dict[str, str], cwd: Path, timeout: float = 900
         ) -> subprocess.CompletedProcess[str]:
    """``bash -e`` on ``block``, ``escalation`` on the PATH as this interpreter's module (an
    ``exec``: ``$!`` of ``escalation serve &`` is the server) and ``createdb`` a no-op; the
    URL exports of the block are dropped (the fixture's stay)."""
    kept = "\n".join(line for line in block.splitlines()
                     if not re.match(r"export ESCALATION_(REDIS|DATABASE)_URL=", line))
    bin_dir = cwd / "bin"
    if not bin_dir.exists():
        bin_dir.mkdir()
        script = bin_dir / "escalation"
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m escalation "$@"\n')
        script.chmod(0o755)
    env = dict(env, PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}")
    prelude = "createdb() { :; }\nset -e\n"
    return subprocess.run(["bash", "-c", prelude + kept], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture()
def own_database(database_url: str) -> Iterator[str]:
    """A database of its own (the README's ``createdb``): its ``db upgrade`` binds it to this
    test's namespace, which must not happen to the session's shared test database."""
    name = f"escalation_readme_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(database_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield sa.engine.make_url(database_url).set(database=name).render_as_string(
            hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def test_the_readme_shell_blocks_run_as_written(
    own_database: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    blocks = _blocks()
    using = blocks["Using it"]
    ladder = next(b for k, b in blocks.items() if "escalation ladder release" in b)
    http = blocks["Over HTTP"]
    assert "escalation notify --burst" in using  # the README says how notify ends
    assert not re.search(r"<\w+>|\.\.\.", using + ladder + http)  # no placeholders

    # unique names per run; everything else exactly as written
    case, token = f"CASE-{uuid.uuid4().hex[:8]}", f"svc-{uuid.uuid4().hex[:8]}"
    complaints = [str(9_000_000 + int(uuid.uuid4().int % 900_000)) for _ in range(2)]
    api_id = f"2026-{uuid.uuid4().hex[:8]}"
    using = using.replace("CASE-1042", case).replace("9100001", complaints[0]).replace(
        "9100002", complaints[1])
    port = str(_free_port())
    http = http.replace("8080", port).replace("disputes-svc", token).replace(
        "2026-0417-0093", api_id)
    (tmp_path / "docs").symlink_to(ROOT / "docs")  # the mapping file the import names
    ladders = tmp_path / "ladders"
    ladders.mkdir()
    shipped = ROOT / "ladders"
    for f in shipped.glob("*.toml"):
        (ladders / f.name).write_text(f.read_text())
    env = dict(cli_env, ESCALATION_LADDERS_DIR=str(ladders), ESCALATION_LOG_LEVEL="WARNING",
               ESCALATION_DATABASE_URL=own_database)
    field = readme_field(using)

    res = _run(using + "\necho ID=$ID\n", env, tmp_path)
    _ok(res)
    ids = re.findall(r"^ID=(\S+)$", res.stdout, re.M)
    assert len(ids) == 1
    shown = run_cli(env, "audit", "show", str(uuid.UUID(ids[0])), "--json")
    assert shown.returncode == 0, shown.stderr[-2000:]
    trail = [json.loads(line) for line in shown.stdout.splitlines()]
    assert trail[0]["ladder"] == "reg_e_error_resolution"
    wanted = ["ENQUEUED", "ACTION_RECORDED", "PAUSED", "RESUMED", "RESOLVED"]
    # (the worker burst may have warned or promoted it in between: the README's dates are past)
    assert [r["event"] for r in trail if r["event"] in wanted] == wanted
    assert any(r["match_decision"] == "ACTION_PROVISIONAL_CREDIT" for r in trail)
    # the exported operator acts on every row but the worker's
    assert {r["actor"] for r in trail if r["event"] in wanted} == {"jane.doe"}
    assert "burst done:" in res.stdout and "notify: delivered 0" in res.stdout
    assert (tmp_path / "audit.csv").stat().st_size > 0
    assert (tmp_path / "sla.html").read_text().lstrip().lower().startswith("<!doctype html")
    # a log record never lands in the output (stdout): every stdout line is command output
    assert not any(line.startswith('{"') and '"level"' in line
                   for line in res.stdout.splitlines()), res.stdout[-3000:]

    # "after adding dispute_review.v2.toml": the one step the README leaves to the reader
    v1 = (shipped / "dispute_review.v1.toml").read_text()
    (ladders / "dispute_review.v2.toml").write_text(
        v1.replace("version = 1\n", "version = 2\nprevious_version = 1\n", 1).replace(
            "amount = 48,", "amount = 36,", 1))
    res = _run(field + "\n" + ladder, env, tmp_path)  # the same shell: field() defined
    _ok(res)
    assert re.search(r"^run \S+.*", res.stdout, re.M), res.stdout[-2000:]

    res = _run(http, env, tmp_path, timeout=300)
    _ok(res)
    created, fetched = (json.loads(doc) for doc in _json_documents(res.stdout))
    assert created["external_id"] == fetched["external_id"] == api_id
    assert created["dispute_id"] == fetched["dispute_id"]


def readme_field(block: str) -> str:
    """The README's ``field() { python3 -c "..."; }`` helper, as written (it spans lines)."""
    found = re.search(r'^field\(\) \{ python3 -c ".*?"; \}', block, re.M | re.S)
    assert found, "README: no field() helper in the first block"
    return found.group(0)


def _ok(res: subprocess.CompletedProcess[str]) -> None:
    """Fail with the tails of stdout and stderr unless the block exited 0."""
    if res.returncode != 0:
        pytest.fail(f"exit {res.returncode}\n--- stdout\n{res.stdout[-3000:]}\n--- stderr\n"
                    f"{res.stderr[-3000:]}", pytrace=False)


def _json_documents(text: str) -> list[str]:
    """The top-level JSON objects of ``text`` (curl prints them without a newline)."""
    decoder, docs, i = json.JSONDecoder(), [], 0
    while (i := text.find("{", i)) != -1:
        obj, end = decoder.raw_decode(text, i)
        docs.append(json.dumps(obj))
        i = end
    return docs


@pytest.mark.parametrize("command", ["escalation worker", "escalation notify"])
def test_a_readme_service_command_says_how_it_ends(command: str) -> None:
    """Where the README runs a long-running command it shows the --burst form, which ends."""
    text = README.read_text()
    for line in text.splitlines():
        if line.startswith(command) and "#" not in line.split(command, 1)[0]:
            assert "--burst" in line, line
