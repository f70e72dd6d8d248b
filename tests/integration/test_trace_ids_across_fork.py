"""New trace ids (``service_layer.trace_id_source``) stay unique across a fork: a child must
not repeat the ids of the parent's current block.

No server is needed; the test forks a child process, which the unit tier does not (the ids'
form and uniqueness in one process: tests/unit/test_trace_id_source.py).
"""

from __future__ import annotations

import os

from escalation.service_layer import trace_id_source


def test_a_forked_child_does_not_reuse_the_parents_block() -> None:
    trace_id_source.new_trace_id()  # the parent holds a block with unused ids
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: its first ids, to the parent
        try:
            os.write(write, "".join(trace_id_source.new_trace_id() for _ in range(8)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as fh:
        child = fh.read()
    os.waitpid(pid, 0)
    child_ids = {child[i : i + 32] for i in range(0, len(child), 32)}
    assert len(child_ids) == 8
    parent_next = {trace_id_source.new_trace_id() for _ in range(trace_id_source.BLOCK)}
    assert not child_ids & parent_next
