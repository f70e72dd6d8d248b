"""Speed machinery (threads, executors, processes, forks) lives at the edges: the adapters and
the composition root give it to the use cases through ports (``core.Pipeline``,
``core.Fanout``, ``core.HelperProcess``), so the domain, the ports and the service layer
import none of it and run plain on the in-memory fakes.

Read from the sources, nothing is run. ``KNOWN`` lists the modules that still import such
machinery, each with its reason; it is checked to be exact, so an entry goes with the change
that moves its machinery out.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "escalation"
INNER = ("domain", "ports", "service_layer")
MACHINERY = re.compile(
    r"^[ \t]*(?:import[ \t]+(?:threading|multiprocessing|concurrent(?:\.futures)?|gc|signal)\b"
    r"|from[ \t]+(?:threading|multiprocessing|concurrent(?:\.futures)?)(?:\.\w+)*[ \t]+import"
    r"|from[ \t]+os[ \t]+import[^\n]*\bfork\b)"
    r"|\bos\.(?:fork|_exit)\(", re.M)

#: Modules of the inner layers that still import speed machinery, with the reason.
KNOWN: dict[str, str] = {
    "service_layer/trace_id_source.py": "a lock around the block of drawn ids (correctness "
                                        "under the API's threads, not speed machinery)",
}


def offenders() -> list[str]:
    """The inner-layer modules whose source imports or calls speed machinery."""
    found = []
    for layer in INNER:
        for path in sorted((ROOT / layer).rglob("*.py")):
            if MACHINERY.search(path.read_text("utf-8")):
                found.append(path.relative_to(ROOT).as_posix())
    return found


def test_the_inner_layers_import_no_speed_machinery() -> None:
    unexpected = [m for m in offenders() if m not in KNOWN]
    assert not unexpected, (
        f"{unexpected}: threads, executors, processes and forks live at the edges (an "
        "adapter given through a port by the composition root: core.Fanout, "
        "core.HelperProcess, core.Pipeline)")


def test_the_known_list_is_exact() -> None:
    assert sorted(KNOWN) == sorted(m for m in offenders() if m in KNOWN), (
        "a KNOWN module no longer imports speed machinery: remove its entry")


def test_the_pattern_finds_what_it_forbids() -> None:
    for line in ("import threading", "from concurrent.futures import ThreadPoolExecutor",
                 "    import multiprocessing", "from multiprocessing.connection import X",
                 "pid = os.fork()", "import gc", "from os import fork"):
        assert MACHINERY.search(line), line
    for line in ("from escalation.service_layer.core import Fanout",
                 "# os.fork in a comment", "x = 'threading'"):
        assert not MACHINERY.search(line), line
