"""What a fresh ``escalation`` interpreter does at start-up (docs/cli.md, ADR 0019):
``--version`` prints the installed version and exits 0, and neither importing the CLI module
nor ``escalation --help`` loads a database, Redis, web or calendar library.

No server is needed; these tests start interpreters, which the unit tier does not (its
in-process checks of the command tree are tests/unit/test_cli_contract.py). What each
database command imports: tests/integration/test_cli_imports.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def test_version_prints_the_installed_version_and_exits_0() -> None:
    from importlib.metadata import version

    res = subprocess.run([sys.executable, "-m", "escalation", "--version"],
                         capture_output=True, text=True, check=False, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout == f"escalation {version('escalation')}\n"


#: what the CLI module must not import (the first probe below)
HEAVY = ('sqlalchemy', 'redis', 'fastapi', 'jinja2', 'holidays', 'psycopg', 'uvicorn',
         'starlette', 'pydantic_settings', 'pydantic', 'structlog', 'opentelemetry', 'alembic',
         'httpx', 'prometheus_client', 'escalation.bootstrap', 'escalation.settings')


@pytest.fixture(scope="module")
def start_up() -> subprocess.CompletedProcess[str]:
    """One fresh interpreter, two probes (an interpreter's start costs more than either):
    it imports the CLI module and prints which of :data:`HEAVY` are loaded (``imported:``),
    then runs ``escalation --help`` as ``python -m escalation`` does and prints which of the
    database, Redis, web and holiday libraries are loaded (last); both lines go to stderr,
    the help to stdout. Importing the module first changes nothing the help run loads: it
    imports the same module."""
    probe = ("import json, runpy, sys\n"
             "import escalation.entrypoints.cli\n"
             f"print('imported:', json.dumps(sorted(m for m in {HEAVY!r} "
             "if m in sys.modules)), file=sys.stderr)\n"
             "sys.argv = ['escalation', '--help']\n"
             "try:\n    runpy.run_module('escalation', run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             "print(sorted(m for m in ('sqlalchemy', 'redis', 'fastapi', 'holidays') "
             "if m in sys.modules), file=sys.stderr)")
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=False, timeout=60)


def test_importing_the_cli_loads_no_heavy_library(
        start_up: subprocess.CompletedProcess[str]) -> None:
    """``escalation --help`` and every command's start-up: the database, Redis, web and
    holiday libraries are imported by the commands that use them, not by the CLI module
    (what the database commands import: tests/integration/test_cli_imports.py)."""
    assert start_up.returncode == 0, start_up.stderr
    imported = [line for line in start_up.stderr.splitlines() if line.startswith("imported: ")]
    assert len(imported) == 1, start_up.stderr
    assert json.loads(imported[0].removeprefix("imported: ")) == []


def test_help_runs_without_the_heavy_libraries(
        start_up: subprocess.CompletedProcess[str]) -> None:
    assert start_up.stderr.strip().splitlines()[-1] == "[]", start_up.stderr
    assert "Usage:" in start_up.stdout
