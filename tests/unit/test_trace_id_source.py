"""New trace ids (``service_layer.trace_id_source``): uuid4().hex's form, unique across blocks.
Unique across a fork too: tests/integration/test_trace_ids_across_fork.py."""

from __future__ import annotations

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
