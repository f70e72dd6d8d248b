"""Reading a child's log while it runs never loses a line the child wrote.

Workers in benchmarks and tests write JSON events to a temporary file that the parent reads
while they run. A child given the parent's own file object shares its file offset: each
``seek(0)`` of the parent moves the child's write position back, and the child overwrites
events (a drain once counted 249 promotions for 300 ledger rows). ``append_handle`` gives
the child its own offset with O_APPEND.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile

from escalation.bench.common import append_handle

CHILD = (
    "import sys\n"
    "for i in range(20000):\n"
    "    sys.stdout.write(f'line {i}\\n'); sys.stdout.flush()\n"
)


def test_a_parent_reading_while_the_child_writes_loses_no_line() -> None:
    with tempfile.TemporaryFile() as log:
        with append_handle(log) as out:
            proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=out,
                                    stderr=subprocess.STDOUT)
        reads = 0
        while proc.poll() is None:  # read as the tests and benchmarks do: seek(0), read all
            log.seek(0)
            log.read()
            reads += 1
        assert proc.wait() == 0
        log.seek(0)
        lines = log.read().decode().splitlines()
    assert reads > 1
    assert lines == [f"line {i}" for i in range(20000)]
