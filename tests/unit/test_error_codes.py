"""Code acts on an error's code, never on its message (ADR 0029): each test rewords the
message (or gives another error's message) and keeps the code, and the behaviour follows the
code."""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from escalation.domain.errors import (
    ErrorCode,
    InvalidInput,
    InvalidParameter,
    LadderProblem,
    LadderReleaseError,
    NotFound,
    about,
    code_of,
)
from escalation.service_layer.dead_letters import DeadLetters
from escalation.service_layer.doctor import _ladder_files
from tests.unit.test_fire_and_enqueue import World

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


@dataclass
class _DeadQueue:
    """The two DeadLetterQueue calls of the poison hook, on dicts."""

    failures: dict[str, int] = field(default_factory=dict)
    dead: dict[str, dict[str, Any]] = field(default_factory=dict)

    def count_decision_failure(self, dispute_id: str) -> int:
        self.failures[dispute_id] = self.failures.get(dispute_id, 0) + 1
        return self.failures[dispute_id]

    def dead_letter_decision(self, dispute_id: str, token: int, record_json: str) -> int:
        self.dead[dispute_id] = json.loads(record_json)
        return 1_000


def _hook(world: World) -> tuple[DeadLetters, _DeadQueue]:
    queue = _DeadQueue()
    dead = DeadLetters(rel=queue, scheduler=world.scheduler,  # type: ignore[arg-type]
                       store=world.store, actor="w", max_decision_attempts=5)
    return dead, queue


def _claimed(world: World) -> Any:
    from escalation.ports import ClaimedItem

    esc = world.enqueue()
    return ClaimedItem(esc, 7, 0)


def test_a_broken_release_dead_letters_at_once_whatever_its_message_says() -> None:
    w = World()
    dead, queue = _hook(w)
    item = _claimed(w)
    assert dead.on_decision_failed(item, ErrorCode.RELEASE_BROKEN, "reworded: file gone")
    assert queue.dead[str(item.escalation.dispute_id)]["reason"] == "reworded: file gone"
    assert w.store.events(item.escalation.dispute_id) == ["ENQUEUED", "DEAD_LETTERED"]


def test_another_code_waits_for_the_bound_even_with_a_broken_release_message() -> None:
    w = World()
    dead, queue = _hook(w)
    item = _claimed(w)
    message = "released ladder file broken: x.v2.toml: released file is missing"
    for _ in range(4):
        assert not dead.on_decision_failed(item, ErrorCode.INVALID_INPUT, message)
    assert not queue.dead
    assert dead.on_decision_failed(item, ErrorCode.INVALID_INPUT, message)  # the 5th


def test_fire_hands_the_hook_the_error_code() -> None:
    w = World()
    esc = w.enqueue()
    w.scheduler.payloads[str(esc.dispute_id)] = esc.with_changes(seq=1, ladder_version=9)
    w.fire()
    [(_item, code, _message)] = w.poisoned
    assert code is ErrorCode.LADDER_INVALID  # FakeLadders raises LadderError


def test_doctor_counts_broken_releases_by_code_not_by_message() -> None:
    check = _ladder_files([
        LadderProblem(ErrorCode.RELEASE_BROKEN, "reg_e.v2.toml is gone"),
        LadderProblem(ErrorCode.LADDER_INVALID, "released ladder file broken: but only a line"),
    ])
    assert "1 broken release(s), 1 invalid ladder file(s)" in check.detail
    assert "restore each released file" in check.advice


def test_each_error_class_carries_its_code() -> None:
    assert code_of(LadderReleaseError("anything")) is ErrorCode.RELEASE_BROKEN
    assert code_of(NotFound("anything")) is ErrorCode.NOT_FOUND
    assert code_of(InvalidInput("anything")) is ErrorCode.INVALID_INPUT
    assert code_of(OverflowError("date value out of range")) is ErrorCode.INTERNAL


def test_a_field_is_data_set_where_the_value_is_read() -> None:
    try:
        with about("due_at"):
            raise InvalidInput("must be timezone-aware")
    except InvalidInput as exc:
        assert exc.field == "due_at"
    try:
        with about("due_at"):
            raise InvalidInput("x", field="materiality")  # the innermost name wins
    except InvalidInput as exc:
        assert exc.field == "materiality"
    assert InvalidParameter("{from} is after {to}", "from", "to").field == "from"


def test_a_batch_position_is_data_and_the_message_keeps_it_for_people() -> None:
    exc = InvalidInput("bad currency", field="currency").in_item(3)
    assert (exc.item, exc.field, exc.detail) == (3, "currency", "bad currency")
    assert str(exc) == "request 4: bad currency"
    again = pickle.loads(pickle.dumps(exc))  # noqa: S301 - errors cross processes pickled
    assert (again.item, again.field, again.detail, str(again)) == (
        3, "currency", "bad currency", "request 4: bad currency")



def test_the_api_names_a_batch_items_field_from_data_whatever_the_message() -> None:
    from escalation.entrypoints.api.problems import field_of, message_of

    # a message that names no field word, and one that names another field's words
    for message in ("reworded entirely", "materiality and tier are fine; the time is not"):
        exc = InvalidInput(message, field="due_at").in_item(1)
        assert field_of(exc) == "items[1].due_at"
        assert message_of(exc) == f"items[1]: {message}"
    assert message_of(InvalidInput("request 7: looks like a batch")) == (
        "request 7: looks like a batch")  # no item: nothing is rebuilt from the text
    assert field_of(InvalidInput("request 7: due_at is naive")) is None


def test_reconcile_marks_redis_ahead_for_a_held_difference_by_its_kind_not_its_words() -> None:
    from escalation.service_layer.reconcile import (
        AheadRepair,
        Diff,
        DiffKind,
        ReconcileReport,
        _settle_mark,
    )

    class Mark:
        def __init__(self) -> None:
            self.marked: list[str] = []

        def resync(self) -> dict[str, Any] | None:
            return None

        def mark_resync(self, reason: str, detail: str = "") -> None:
            self.marked.append(detail)

        def clear_resync(self) -> bool:
            return True

    for held, detail, marked in ((DiffKind.AHEAD, "left to the lease holder", True),
                                 (DiffKind.BEHIND, "AHEAD left to its worker", False)):
        mark = Mark()
        report = ReconcileReport(dry_run=False)
        report.diffs.append(Diff(DiffKind.LOCKED, "d-1", detail, held=held))
        _settle_mark(AheadRepair(mark=mark, stream=None), report)  # type: ignore[arg-type]
        assert bool(mark.marked) is marked, (held, detail)


def test_a_body_over_a_json_limit_names_its_field_as_data() -> None:
    from escalation.entrypoints.api.guard import json_limits

    assert json_limits(b'{"items": [1, 2, 3]}', max_depth=8, max_keys=100,
                       batch_limit=2) == ("items", "items: at most 2 items per batch "
                                                   "(api_max_batch), got 3")
    field, _why = json_limits(b'{"a": {"b": {"c": 1}}}', max_depth=2, max_keys=100) or ("", "")
    assert field == "body"


@pytest.mark.parametrize("raw", [b'{"materiality": NaN}', b'{"a": [1, Infinity]}',
                                 b'{"a": -Infinity}'])
def test_nan_and_infinity_are_refused_as_not_json(raw: bytes) -> None:
    """RFC 8259 section 6: NaN and Infinity are not JSON numbers; Python's parser reads them,
    and the schema then said "Input should be a valid string" instead."""
    from escalation.entrypoints.api.guard import json_limits

    field, why = json_limits(raw, max_depth=8, max_keys=100) or ("", "")
    assert field == "body" and why.startswith("the body is not valid JSON: ")
    assert "is not a JSON number" in why


def test_an_integer_over_the_digit_limit_is_named_not_a_bare_parse_error() -> None:
    from escalation.entrypoints.api.guard import MAX_INT_DIGITS, json_limits

    ok = b'{"a": ' + b"9" * MAX_INT_DIGITS + b"}"
    assert json_limits(ok, max_depth=8, max_keys=100) is None
    long = b'{"a": -' + b"9" * (MAX_INT_DIGITS + 700) + b"}"
    field, why = json_limits(long, max_depth=8, max_keys=100) or ("", "")
    assert field == "body" and f"a number of {MAX_INT_DIGITS + 700} digits" in why
