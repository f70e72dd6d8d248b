"""New trace ids (``service_layer.trace_id_source``): uuid4().hex's form, unique across blocks and
across a fork (a child must not repeat the ids of the parent's current block)."""

from __future__ import annotations

import os
import re
import uuid

from escalation.service_layer import trace_id_source


def test_ids_are_version_4_uuids_in_hex() -> None:
    for _ in range(3 * trace_id_source.BLOCK):  # crosses block boundaries
        tid = trace_id_source.new_trace_id()
        assert re.fullmatch(r"[0-9a-f]{32}", tid)
        parsed = uuid.UUID(hex=tid)
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert parsed.hex == tid


def test_ids_do_not_repeat() -> None:
    ids = [trace_id_source.new_trace_id() for _ in range(5 * trace_id_source.BLOCK)]
    assert len(set(ids)) == len(ids)


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
