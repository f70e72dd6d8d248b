"""The JSON log lines: ``logs._json_dumps`` writes exactly the text ``json.dumps`` writes
(with the log's ``default``), and the worker's per-batch emitter writes the lines the plain
``emit`` writes."""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from escalation import logs
from escalation.entrypoints import worker
from escalation.logs import configure_logging


@pytest.mark.parametrize("value", [
    {"a": Decimal("1250.00"), "b": uuid.UUID(int=5), "c": dt.datetime(2026, 1, 1),
     "d": dt.date(2026, 1, 2), "e": {1, 2}, "f": (1, "x"), "g": Path("/tmp"),
     "h": "caf\u00e9 \u2028 \"q\"", "i": object.__new__(object)},
    {"event": "escalation.promoted", "seq": 2, "lag_ms": None, "ok": True, "x": 1.5},
])
def test_log_json_is_the_json_dumps_text(value: dict[str, Any]) -> None:
    value = {k: (v if k != "i" else "fixed") for k, v in value.items()}  # repr has an address
    assert logs._json_dumps(value, default=lambda o: "ignored") == json.dumps(
        value, default=logs._json_default)


@pytest.fixture()
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    level = root.level
    yield
    if logs._handler is not None:
        root.removeHandler(logs._handler)
        logs._handler = None
    root.setLevel(level)
    configure_logging("json", "INFO")


def _lines(emit: Any) -> list[dict[str, Any]]:
    out = io.StringIO()
    configure_logging("json", "DEBUG", stream=out)
    for i in range(3):
        emit("escalation.promoted", worker_id="w1", level="debug", seq=i, note="caf\u00e9")
    emit("worker.batch", worker_id="w1", level="info", claimed=3)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    for line in lines:
        line.pop("timestamp")
    return lines


@pytest.mark.usefixtures("_restore_logging")
def test_batch_emitter_writes_the_lines_emit_writes() -> None:
    assert _lines(worker._BatchEmit()) == _lines(worker._emit)
