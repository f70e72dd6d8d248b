"""``settle_heap`` (the worker process's garbage-collector tuning), run in a child process so
this test process keeps its own collector settings. In this tier, not the unit tier: starting
a Python process that imports the worker can take longer than a unit test's 10 s on a loaded
machine."""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = """
import gc, json
from escalation.entrypoints.worker import settle_heap
before = {"frozen": gc.get_freeze_count(), "threshold": gc.get_threshold()}
settle_heap()
after = {"frozen": gc.get_freeze_count(), "threshold": gc.get_threshold()}
print(json.dumps({"before": before, "after": after}))
"""


def test_settle_heap_freezes_the_start_up_objects_and_raises_the_young_threshold() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         check=True, timeout=60)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["before"]["frozen"] == 0
    assert got["after"]["frozen"] > 10_000  # the imported modules and their objects
    assert got["after"]["threshold"][0] == 100_000
    assert got["before"]["threshold"][0] < 100_000
