"""Every module of escalation/service_layer has a unit test file that exercises it on the
in-memory fakes (tests/fakes.py), so a use case's behaviour is pinned in milliseconds.

The mapping is read from the sources' import statements, nothing is run: a module counts as covered
when some tests/unit/test_*.py imports from it (``from escalation.service_layer.M import
...`` or ``from escalation.service_layer import M``) and, when the module acts through ports
(it imports from ``escalation.ports`` or defines a ``Protocol``), that same file also imports
``tests.fakes``: a file that imports a port-using module without the fakes checks a helper
or a signature, not the use case. A module with no ports (pure computation) needs the
import only.

Two explicit lists, each entry with its reason: ``GLUE`` (no behaviour of its own to pin)
and ``NOT_YET`` (a use case whose tests on the fakes are still to be written: a gap, not an
exemption). Both are checked to be exact, so an entry goes once it is no longer needed.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICE_LAYER = ROOT / "escalation" / "service_layer"
UNIT = Path(__file__).resolve().parent

#: Modules with no behaviour of their own to test on fakes.
GLUE: dict[str, str] = {
    # the Progress callback type (a Protocol) and a no-op instance of it; what reports
    # progress is tested with its use cases (ladder plan/apply, import), what draws it in
    # tests/unit/test_progress.py
    "progress_report": "a callback type and a no-op",
}

#: Use cases that act through ports and have no unit test on the fakes yet (their
#: integration tests run them on real servers). Remove an entry with the test that closes it.
NOT_YET: dict[str, str] = {}


# an import statement's module and names (parenthesised names may span lines), anywhere in
# a file (a test may import inside a function); a class whose bases name Protocol
_FROM = re.compile(r"^[ \t]*from[ \t]+([\w.]+)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)", re.M)
_IMPORT = re.compile(r"^[ \t]*import[ \t]+(escalation\.service_layer\.\w+)", re.M)
_PROTOCOL = re.compile(r"^class \w+\([^)]*\bProtocol\b[^)]*\):", re.M)


@functools.lru_cache(maxsize=1)
def _modules() -> dict[str, bool]:
    """Each service-layer module -> whether it acts through ports."""
    out = {}
    for path in sorted(SERVICE_LAYER.glob("*.py")):
        if path.stem == "__init__":
            continue
        text = path.read_text("utf-8")
        out[path.stem] = bool(_PROTOCOL.search(text)) or any(
            m[1] == "escalation.ports" for m in _FROM.finditer(text))
    return out


def _imports(path: Path) -> tuple[set[str], bool]:
    """The service-layer modules a test file imports from, and whether it imports the
    fakes."""
    text = path.read_text("utf-8")
    found = {m[1].split(".")[2] for m in _IMPORT.finditer(text)}
    fakes = False
    for m in _FROM.finditer(text):
        module, names = m[1], m[2]
        fakes = fakes or module == "tests.fakes"
        if module.startswith("escalation.service_layer."):
            found.add(module.split(".")[2])
        elif module == "escalation.service_layer":
            found |= {n.split()[0] for n in re.split(r"[\s,()]+", names) if n} - {"as"}
    return found, fakes


@functools.lru_cache(maxsize=1)
def uncovered() -> list[str]:
    """The service-layer modules no unit test file exercises on the fakes."""
    modules = _modules()
    covered: set[str] = set()
    for path in sorted(UNIT.glob("test_*.py")):
        found, fakes = _imports(path)
        covered |= {m for m in found if m in modules and (fakes or not modules[m])}
    return sorted(set(modules) - covered)


def test_every_service_layer_module_is_exercised_on_the_fakes() -> None:
    missing = [m for m in uncovered() if m not in GLUE and m not in NOT_YET]
    assert not missing, (
        f"no unit test on the fakes (tests/fakes.py) for escalation/service_layer/{missing}: "
        "add tests/unit/test_<module>_use_case.py importing the module and tests.fakes")


def test_the_exception_lists_are_exact() -> None:
    modules, gaps = set(_modules()), set(uncovered())
    assert set(GLUE) | set(NOT_YET) <= modules, "an entry names no service-layer module"
    assert set(NOT_YET) <= gaps, (
        f"covered now, remove from NOT_YET: {sorted(set(NOT_YET) - gaps)}")
    assert set(GLUE) <= gaps, f"covered now, remove from GLUE: {sorted(set(GLUE) - gaps)}"


def test_the_mapping_needs_the_fakes_for_a_port_using_module(tmp_path: Path) -> None:
    signature_only = tmp_path / "test_x.py"
    signature_only.write_text("from escalation.service_layer import ladder_migration\n")
    with_fakes = tmp_path / "test_y.py"
    with_fakes.write_text("from escalation.service_layer.bulk import bulk_enqueue\n"
                          "from tests.fakes import FakeScheduler\n")
    assert _imports(signature_only) == ({"ladder_migration"}, False)
    assert _imports(with_fakes) == ({"bulk"}, True)
    modules = _modules()
    assert modules["ladder_migration"] and modules["bulk"]  # both act through ports
    assert not modules["disputes"] and not modules["trace_id_source"]
