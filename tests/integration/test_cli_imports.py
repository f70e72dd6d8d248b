"""What each CLI command imports before it does any work stays its own.

``escalation --help`` loads the command line only (typer, rich); a database command loads
its settings, the wiring that builds the App (``bootstrap.build``: Redis, SQLAlchemy core,
psycopg) and its use case, never the HTTP API (FastAPI, Jinja2), the SQLAlchemy ORM, the
API's tracing, Alembic (but ``db upgrade``), httpx (but ``notify``), prometheus_client or
another command's use case. The start-up figures are in docs/performance.md ("CLI
start-up"; tests/benchmarks/cli_startup.py prints them); this test fails when an eager
import brings one of those modules back.

One fresh interpreter imports the stages in order and reports ``sys.modules`` after each
(one start-up instead of one per command). A stage is checked on the modules it added: a
module it forbids is forbidden in every stage before it too, so one loaded earlier fails
that earlier stage.
No server is needed; the test is in this tier for its time: the interpreter imports the
whole server stack (2.4-2.7 s CPU, 9-10 s wall at load 11 on 2 cores), past the unit tier's
10 s per test. What importing the CLI module alone loads, and ``--help`` run as a command:
``tests/integration/test_cli_start_up.py``.
``opentelemetry`` itself is not forbidden: redis-py imports ``opentelemetry.sdk.metrics``
at ``import redis`` when the SDK is installed (the ``otel`` extra); the API's tracing
(``opentelemetry.sdk.trace``, the OTLP exporter) is.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CLI = "escalation.entrypoints.cli"
# (stage, modules the command imports when it runs, modules it must not import)
EVERYWHERE = ("fastapi", "starlette", "uvicorn", "jinja2", "sqlalchemy.orm",
              "opentelemetry.sdk.trace", "opentelemetry.exporter", "prometheus_client",
              "escalation.entrypoints.api")
SERVERS = ("sqlalchemy", "redis", "psycopg", "alembic", "httpx", "holidays", "pydantic",
           "structlog", "opentelemetry", "escalation.bootstrap", "escalation.adapters",
           "escalation.service_layer", "escalation.settings", "escalation.logs")
# the adapters and use cases of other commands and of the worker's periodic jobs
OTHERS = ("escalation.adapters.console_ops", "escalation.adapters.leader_lease",
          "escalation.adapters.maintenance_runs", "escalation.adapters.redis_reconcile_notify",
          "escalation.service_layer.reconcile",
          "escalation.service_layer.reconcile_incremental", "escalation.service_layer.maintenance",
          "escalation.service_layer.ladder_migration", "escalation.service_layer.deadline_outcomes")
NEITHER = ("alembic", "httpx", "escalation.service_layer.importer")
STAGES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("--help", (CLI,), (*EVERYWHERE, *SERVERS)),
    ("status", ("escalation.settings", "escalation.bootstrap", "escalation.service_layer.status"),
     (*EVERYWHERE, *OTHERS, *NEITHER)),
    ("enqueue", ("escalation.service_layer.enqueue", "escalation.service_layer.disputes",
                 "escalation.service_layer.warnings"),
     (*EVERYWHERE, *OTHERS, *NEITHER)),
    ("worker --burst", ("escalation.entrypoints.worker",), (*EVERYWHERE, *NEITHER)),
    ("audit show", ("escalation.service_layer.audit_export", "escalation.entrypoints.render"),
     (*EVERYWHERE, "alembic", "httpx")),
    ("report sla", ("escalation.service_layer.sla_report",), (*EVERYWHERE, "alembic", "httpx")),
    ("notify --burst", ("escalation.service_layer.notify", "escalation.adapters.webhook"),
     (*EVERYWHERE, "alembic")),
    ("db upgrade", ("escalation.composition_cli", "alembic.command", "alembic.script"),
     EVERYWHERE),
)

_CHILD = """
import importlib, json, sys
out = []
for modules in json.loads(sys.argv[1]):
    for name in modules:
        importlib.import_module(name)
    out.append(sorted(sys.modules))
print(json.dumps(out))
"""


def _loaded(names: list[str], prefix: str) -> list[str]:
    return [n for n in names if n == prefix or n.startswith(prefix + ".")]


@pytest.fixture(scope="module")
def loaded_by() -> dict[str, list[str]]:
    """The modules each stage added to ``sys.modules``, in one fresh interpreter."""
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps([mods for _, mods, _ in STAGES])],
        check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    added: dict[str, list[str]] = {}
    before: set[str] = set()
    for (name, _, _), after in zip(STAGES, json.loads(proc.stdout), strict=True):
        added[name] = sorted(set(after) - before)
        before = set(after)
    return added


def _covered(prefix: str, by: tuple[str, ...]) -> bool:
    return any(prefix == p or prefix.startswith(p + ".") for p in by)


def test_a_stage_forbids_only_what_every_earlier_stage_forbids_too() -> None:
    # checking each stage on the modules it added is sound only then
    for i, (name, _, forbidden) in enumerate(STAGES):
        for earlier, _, before in STAGES[:i]:
            missing = [p for p in forbidden if not _covered(p, before)]
            assert not missing, f"{name} forbids {missing}, {earlier} does not"


@pytest.mark.parametrize("stage", STAGES, ids=[s[0] for s in STAGES])
def test_a_command_imports_none_of_its_forbidden_modules(
    stage: tuple[str, tuple[str, ...], tuple[str, ...]], loaded_by: dict[str, list[str]],
) -> None:
    name, _, forbidden = stage
    names = loaded_by[name]
    found = {prefix: _loaded(names, prefix)[:3] for prefix in forbidden if _loaded(names, prefix)}
    assert not found, f"`escalation {name}` imports {found}: import them where used"


def test_the_stages_load_what_their_commands_need(loaded_by: dict[str, list[str]]) -> None:
    # else the forbidden-module checks would pass on an interpreter that imported nothing
    assert _loaded(loaded_by["--help"], "typer")
    for needed in ("redis", "sqlalchemy", "psycopg", "escalation.bootstrap"):
        assert _loaded(loaded_by["status"], needed), needed
    assert _loaded(loaded_by["notify --burst"], "httpx")
    assert _loaded(loaded_by["db upgrade"], "alembic")


def test_db_upgrade_does_not_import_the_audit_store() -> None:
    # `db upgrade` migrates and binds the database and builds no App: the audit store (the
    # largest adapter, with the ledger's SQL and verification) is build()'s, not its
    modules = [CLI, "escalation.settings", "escalation.bootstrap", "escalation.composition_cli",
               "escalation.adapters.db", "escalation.adapters.redis_client",
               "alembic.command", "alembic.script"]
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps([modules])],
        check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (names,) = json.loads(proc.stdout)
    assert _loaded(names, "alembic") and _loaded(names, "escalation.bootstrap")
    assert not _loaded(names, "escalation.adapters.audit_store"), \
        _loaded(names, "escalation.adapters.audit_")
