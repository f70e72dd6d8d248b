"""The architecture docs name every module, Redis key, Lua script, port and setting.

A newcomer reads docs/architecture.md and docs/operations.md before the code; these tests fail
as soon as a module, key, script, port or setting is added without being documented there.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import escalation
from escalation import ports
from escalation.adapters.redis_keys import Keys
from escalation.settings import Settings

PACKAGE = Path(escalation.__file__).resolve().parent
DOCS = PACKAGE.parent / "docs"
ARCH = (DOCS / "architecture.md").read_text(encoding="utf-8")
ALL_DOCS = "\n".join(p.read_text(encoding="utf-8") for p in sorted(DOCS.rglob("*.md")))


def _modules() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name in {"__init__.py", "__main__.py"}:
            continue
        found.append(path.relative_to(PACKAGE).as_posix())
    return found


@pytest.mark.parametrize("module", _modules())
def test_every_module_is_in_the_architecture_doc(module: str) -> None:
    # named by its file name inside its package's block, e.g. "redis_scheduler.py"
    assert Path(module).name in ARCH, f"docs/architecture.md does not mention {module}"


@pytest.mark.parametrize(
    "script", sorted(p.name for p in (PACKAGE / "adapters" / "lua").glob("*.lua"))
)
def test_every_lua_script_is_in_the_architecture_doc(script: str) -> None:
    assert script in ARCH, f"docs/architecture.md does not mention {script}"


def _key_suffixes() -> list[str]:
    keys = Keys(namespace="ns", shard=0)
    suffixes = set()
    for name, member in inspect.getmembers(Keys):
        if name.startswith("_") or name in {"tag", "namespace", "shard"}:
            continue
        if isinstance(member, property):
            value = getattr(keys, name)
        elif inspect.isfunction(member):
            value = getattr(keys, name)("x")
        else:
            continue
        # "escalations:{ns:0}:pending" -> ":pending"; "escalation:{ns:0}:lock:x" -> ":lock:"
        suffixes.add(re.sub(r"^.*\{ns:0\}", "", value).removesuffix("x"))
    return sorted(suffixes)


@pytest.mark.parametrize("suffix", _key_suffixes())
def test_every_redis_key_is_in_the_key_table(suffix: str) -> None:
    assert f"}}{suffix}" in ARCH, f"the Redis key table lacks the key ending {suffix!r}"


def test_the_key_table_is_read_from_the_key_builder() -> None:
    assert len(_key_suffixes()) >= 16  # payload and lock are per-dispute key families


def _protocols() -> list[str]:
    return sorted(
        name
        for name, obj in inspect.getmembers(ports, inspect.isclass)
        if obj.__module__.startswith(f"{ports.__name__}.") and getattr(obj, "_is_protocol", False)
    )


@pytest.mark.parametrize("port", _protocols())
def test_every_port_is_in_the_architecture_doc(port: str) -> None:
    assert port in ARCH, f"docs/architecture.md does not name the port {port}"


@pytest.mark.parametrize("field", sorted(Settings.model_fields))
def test_every_setting_is_documented(field: str) -> None:
    env = f"ESCALATION_{field.upper()}"
    assert env in ALL_DOCS, f"{env} is in no doc under docs/"


def test_the_audit_doc_sla_report_says_what_meets_a_deadline_now() -> None:
    """docs/audit.md "SLA report" names every deadline state, basis and report column of
    ``domain.obligations`` / ``sla_report`` (docs/sla.md "Obligations" is the reference),
    not the old rule "met if the dispute was cancelled by then, a future one in neither"."""
    from escalation.domain.obligations import Basis, DeadlineState
    from escalation.service_layer.sla_report import CSV_COLUMNS

    text = (DOCS / "audit.md").read_text(encoding="utf-8")
    section = text[text.index("## SLA report"):]
    section = section[: section.find("\n## ", 1) if "\n## " in section[1:] else None]
    words = set(re.findall(r"[a-z_]+", section))
    assert {s.value for s in DeadlineState} <= words
    assert {b.value for b in Basis} <= words
    assert {c for c in CSV_COLUMNS if c.startswith("regulatory_")} <= words
    assert "cancelled (resolved) by then" not in section
    assert "counted in neither" not in section
