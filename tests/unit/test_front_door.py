"""Entrypoints and benchmarks reach adapters only through the composition root.

``escalation.entrypoints`` and ``escalation.bench`` get every adapter object from
``bootstrap`` (or a ``composition_*`` module beside it), typed as a port or a typed facade;
they never import ``escalation.adapters`` (docs/architecture.md, "Layers"). import-linter
enforces it too (the fifth contract in pyproject.toml); this test walks the source itself,
so it fails without import-linter installed, and it sees imports inside functions and
``if TYPE_CHECKING:`` blocks as well as relative ones.
"""

from __future__ import annotations

import ast
import functools
import tomllib
from pathlib import Path

import pytest

import escalation

PACKAGE = Path(escalation.__file__).resolve().parent
FRONT = ("entrypoints", "bench")
FORBIDDEN = "escalation.adapters"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module an ``ImportFrom`` names (relative imports resolved)."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    # a module's level-1 parent is its package; a package's is itself
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join([*base, node.module] if node.module else base)


def _is_adapter(name: str) -> bool:
    return name == FORBIDDEN or name.startswith(FORBIDDEN + ".")


def adapter_imports(source: str, module: str, is_package: bool = False) -> list[str]:
    """``"line: imported name"`` of every import of ``escalation.adapters`` in ``source``
    (``import``, ``from ... import``, relative imports, and ``importlib.import_module`` /
    ``__import__`` with a literal name), at any depth."""
    return _adapter_imports(list(ast.walk(ast.parse(source))), module, is_package)


def _adapter_imports(nodes: list[ast.AST], module: str, is_package: bool) -> list[str]:
    """:func:`adapter_imports` over ``nodes``, every node of a module's tree."""
    found = []
    for node in nodes:
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, module, is_package)
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                   or (isinstance(node.func, ast.Name)
                       and node.func.id in {"__import__", "import_module"}))):
            names = [node.args[0].value]
        hits = sorted({n for n in names if _is_adapter(n)})
        if hits:
            found.append(f"{node.lineno}: {hits[0]}")
    return found


def _front_modules() -> list[Path]:
    return sorted(p for d in FRONT for p in (PACKAGE / d).rglob("*.py"))


@functools.cache
def _findings(path: Path) -> tuple[list[str], list[str]]:
    """(adapter imports, raw client reads) of one front module: two tests read each module,
    its source is parsed and its tree walked once."""
    nodes = list(ast.walk(ast.parse(path.read_text(encoding="utf-8"))))
    return (_adapter_imports(nodes, _module_name(path), path.name == "__init__.py"),
            _raw_client_reads(nodes))


def test_the_front_door_packages_have_modules() -> None:
    # an empty walk would pass whatever the code does
    names = {p.relative_to(PACKAGE).as_posix() for p in _front_modules()}
    assert "entrypoints/worker.py" in names
    assert "entrypoints/api/console/routes.py" in names
    assert "bench/common.py" in names
    assert len(names) > 30


@pytest.mark.parametrize("path", _front_modules(),
                         ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_no_entrypoint_or_bench_module_imports_an_adapter(path: Path) -> None:
    found = _findings(path)[0]
    assert not found, (
        f"{path.relative_to(PACKAGE.parent)} imports adapters ({'; '.join(found)}): build the "
        "object in escalation/bootstrap.py (or a composition_*.py beside it) and hand it out "
        "typed through a *_for(app) accessor (docs/architecture.md, 'Layers')")


@pytest.mark.parametrize("source", [
    "from escalation.adapters.db import make_engine\n",
    "import escalation.adapters.redis_keys\n",
    "from escalation import adapters\n",
    "from escalation.adapters import metrics_queries as q\n",
    "def f():\n    from escalation.adapters.signing import sign\n",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
    "    from escalation.adapters.token_store import PostgresTokenStore\n",
    "from ...adapters.webhook import sign\n",
    "import importlib\nimportlib.import_module('escalation.adapters.embedded')\n",
])
def test_the_walk_finds_every_form_of_an_adapter_import(source: str) -> None:
    # the walk itself can fail: each form of an adapter import is reported
    assert adapter_imports(source, "escalation.entrypoints.api.routes_ops")


@pytest.mark.parametrize("source", [
    "from escalation.bootstrap import App, ledger_search_for\n",
    "from escalation.ports import LedgerSearch\n",
    "from escalation.adapters_notes import x\n",
    "from ..api import deps\n",
    "x = 'escalation.adapters.db'\n",
])
def test_the_walk_passes_what_is_not_an_adapter_import(source: str) -> None:
    assert adapter_imports(source, "escalation.entrypoints.api.routes_ops") == []


def test_import_linter_has_the_front_door_contract() -> None:
    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    front = [c for c in contracts if c.get("type") == "forbidden"
             and set(c.get("source_modules", [])) == {"escalation.entrypoints",
                                                       "escalation.bench"}]
    assert len(front) == 1, "pyproject.toml: no forbidden contract for entrypoints and bench"
    assert FORBIDDEN in front[0]["forbidden_modules"]


# The App's raw clients: an entrypoint or a benchmark asks bootstrap or composition_bench
# for a port (``readiness_probe_for``, ``ledger_search_for(app)``, ``drop_scheduled``, ...).
RAW_CLIENTS = frozenset({"redis", "engine"})


def raw_client_reads(source: str) -> list[str]:
    """``"line: .name"`` of every read of an attribute named ``redis`` or ``engine`` in
    ``source`` (``app.redis.ping()``, ``core.engine``, ``getattr(app, "redis")``).

    The App travels under many names (``app``, ``core``, ``a``, ``self._core``), so the walk
    bans the attribute names rather than following the App. A call of a method of that name
    (the bench ``Target``'s ``tgt.redis()`` / ``tgt.engine()``, clients on the bench's own
    servers built by ``composition_bench``) is not a read of the App's field and passes."""
    return _raw_client_reads(list(ast.walk(ast.parse(source))))


def _raw_client_reads(nodes: list[ast.AST]) -> list[str]:
    """:func:`raw_client_reads` over ``nodes``, every node of a module's tree."""
    called = {id(node.func) for node in nodes if isinstance(node, ast.Call)}
    found = []
    for node in nodes:
        if (isinstance(node, ast.Attribute) and node.attr in RAW_CLIENTS
                and id(node) not in called):
            found.append(f"{node.lineno}: .{node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in {"getattr", "hasattr", "setattr"} and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and node.args[1].value in RAW_CLIENTS):
            found.append(f"{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
    return found


@pytest.mark.parametrize("path", _front_modules(),
                         ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_no_entrypoint_or_bench_module_reaches_into_the_apps_redis_or_engine(
        path: Path) -> None:
    found = _findings(path)[1]
    assert not found, (
        f"{path.relative_to(PACKAGE.parent)} reads the App's raw Redis client or SQLAlchemy "
        f"engine ({'; '.join(found)}): add a port accessor in escalation/bootstrap.py "
        "(e.g. readiness_probe_for(app)) or a function in composition_bench.py")


@pytest.mark.parametrize("source", [
    "def f(request):\n    request.app.state.core.redis.ping()\n",
    "def f(core):\n    return ledger_search_for(core.engine)\n",
    "def f(app):\n    app.engine.dispose()\n",
    "def f(app):\n    pool = getattr(app.redis, 'connection_pool', None)\n",
    "def f(app):\n    return getattr(app, 'engine')\n",
    "def f(self):\n    with self._core.engine.connect() as conn:\n        pass\n",
])
def test_the_walk_finds_every_form_of_a_raw_client_read(source: str) -> None:
    # the walk itself can fail: each planted read is reported
    assert raw_client_reads(source)


@pytest.mark.parametrize("source", [
    "def f(tgt):\n    client = tgt.redis()\n    engine = tgt.engine()\n",
    "def f(core):\n    return readiness_probe_for(core).check().redis_check\n",
    "def f(app):\n    return ledger_search_for(app)\n",
    "x = 'app.redis'\n",
])
def test_the_walk_passes_what_is_not_a_raw_client_read(source: str) -> None:
    assert raw_client_reads(source) == []
