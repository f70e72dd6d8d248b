"""Fast paths of the firing path give exactly what the reference code gives: array-literal
parameters, the ledger ``details`` jsonb text, the JSON log lines and the worker's per-batch
emitter; and apply.lua's op encoding keeps its checks on warnings and actions
(CHANGELOG.md, "Firing path CPU (sixth pass)")."""

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
from hypothesis import given, settings
from hypothesis import strategies as st

from escalation import logs
from escalation.adapters.audit_sql import _details_json, array_literal, reference_array_literal
from escalation.adapters.redis_scheduler import RedisScheduler
from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import Escalation
from escalation.domain.materiality import Materiality
from escalation.entrypoints import worker
from escalation.logs import configure_logging
from escalation.ports import ApplyAction, ApplyOp, WarningMember

zones = st.sampled_from([dt.UTC, dt.timezone(dt.timedelta(hours=5, minutes=30)),
                         dt.timezone(dt.timedelta(hours=-8))])
aware = st.datetimes(min_value=dt.datetime(1971, 1, 1), max_value=dt.datetime(2200, 1, 1),
                     timezones=zones)
elements = st.one_of(st.none(), st.uuids(), st.integers(), st.booleans(), aware,
                     st.datetimes(), st.text(), st.sampled_from(['a"b', "a\\b", '"', "\\"]),
                     st.decimals(allow_nan=False, allow_infinity=False))


def _one_kind(kind: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    return st.lists(kind, max_size=6)


@settings(deadline=None)
@given(st.one_of(_one_kind(elements), _one_kind(st.uuids()), _one_kind(st.integers()),
                 _one_kind(aware), _one_kind(st.none() | aware), _one_kind(st.text()),
                 _one_kind(st.none())))
def test_array_literal_equals_the_reference(values: list[Any]) -> None:
    assert array_literal(values) == reference_array_literal(values)


def test_array_literal_of_firing_columns_equals_the_reference() -> None:
    at = dt.datetime(2026, 12, 1, 13, 38, 36, 291000, tzinfo=dt.UTC)
    for values in ([uuid.uuid4() for _ in range(3)], [1, 2, 30], [at, at], [None, at, None],
                   [None, None], ["senior", "pending"], ["a\"b", "c"], ["a\\b"], [], [""],
                   ["", ""], ['"', ""]):
        assert array_literal(values) == reference_array_literal(values), values


@settings(deadline=None)
@given(st.dictionaries(st.text(max_size=5), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                   max_size=3),
    max_leaves=6), max_size=4))
def test_details_json_is_the_json_dumps_text(details: dict[str, Any]) -> None:
    got = _details_json(details)
    assert (got.decode() if isinstance(got, bytes) else got) == json.dumps(details)


def test_details_json_refuses_what_json_dumps_refuses() -> None:
    with pytest.raises(TypeError):
        _details_json({"at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC)})


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


def _esc() -> Escalation:
    at = dt.datetime(2026, 12, 1, 12, tzinfo=dt.UTC)
    return Escalation(dispute_id=uuid.uuid4(), tier="senior", due_at=at,
                      materiality=Materiality.parse("10.00"), source_hash="ab",
                      ladder="dispute_review", ladder_version=1, seq=2, entered_tier_at=at,
                      trace_id="t")


def test_encode_op_accepts_warnings_of_an_equal_id_and_refuses_another() -> None:
    esc = _esc()
    same = uuid.UUID(str(esc.dispute_id))  # equal, not the same object
    ops = [ApplyOp(esc, ApplyAction.RESCHEDULE, 1, None, (WarningMember(did, 2, "0.50", 5),))
           for did in (esc.dispute_id, same)]
    encoded = [RedisScheduler._encode_op(op, False) for op in ops]
    assert encoded[0] == encoded[1]
    assert encoded[0][0] == [str(esc.dispute_id), "reschedule", "1", "2",
                             encoded[0][0][4], "0"]
    with pytest.raises(InvalidInput):
        RedisScheduler._encode_op(ApplyOp(esc, ApplyAction.RESCHEDULE, 1, None,
                                          (WarningMember(uuid.uuid4(), 2, "0.50", 5),)), False)


def test_encode_op_takes_the_action_as_its_value_too() -> None:
    esc = _esc()
    by_enum = RedisScheduler._encode_op(ApplyOp(esc, ApplyAction.PARK, 1), False)
    by_text = RedisScheduler._encode_op(ApplyOp(esc, "park", 1), False)  # type: ignore[arg-type]
    assert by_enum == by_text
