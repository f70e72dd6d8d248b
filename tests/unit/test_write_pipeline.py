"""The write pipelines (``service_layer.core.IN_ORDER``, ``adapters.pipeline.Overlapped``:
one Redis step in flight, the last inline, ``done`` in the caller's thread, errors raised)
and the import spill's batches (in order, never longer than the batch size)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from escalation.adapters.pipeline import Overlapped
from escalation.service_layer.core import IN_ORDER, Pipeline


def _run(pipeline: Pipeline, n: int) -> list[tuple[str, int, str]]:
    """Every step's (step, item, thread name), in the order they ran."""
    seen: list[tuple[str, int, str]] = []
    lock = threading.Lock()

    def note(step: str, item: int) -> None:
        with lock:
            seen.append((step, item, threading.current_thread().name))

    def source() -> Iterator[int]:
        for i in range(n):
            note("read", i)
            yield i

    def record(i: int) -> int:
        note("record", i)
        return i * 10

    def behind(b: int) -> int:
        note("behind", b // 10)
        return b + 1

    def done(b: int, r: int) -> None:
        assert r == b + 1
        note("done", b // 10)

    assert list(pipeline.run(source(), record, behind, done)) == [i * 10 for i in range(n)]
    return seen


@pytest.mark.parametrize("pipeline", [IN_ORDER, Overlapped("t-behind"),
                                      Overlapped("t-ahead", read_ahead=True)],
                         ids=["in_order", "overlapped", "read_ahead"])
def test_each_step_runs_once_per_item_in_order(pipeline: Pipeline) -> None:
    seen = _run(pipeline, 4)
    for step in ("read", "record", "behind", "done"):
        assert [i for s, i, _ in seen if s == step] == [0, 1, 2, 3], step
    here = threading.current_thread().name
    assert all(t == here for s, _, t in seen if s in ("record", "done"))
    for i in range(4):  # behind after its record, done after its behind
        order = [s for s, j, _ in seen if j == i and s != "read"]
        assert order == ["record", "behind", "done"]


def test_overlapped_runs_redis_steps_behind_the_caller_and_the_last_inline() -> None:
    seen = _run(Overlapped("t-behind"), 3)
    behind = [t for s, _, t in seen if s == "behind"]
    assert all(t.startswith("t-behind") for t in behind[:2])
    assert behind[2] == threading.current_thread().name
    # one behind step in flight: item k's done comes before item k+1's behind starts
    steps = [(s, i) for s, i, _ in seen if s in ("behind", "done")]
    assert steps == [("behind", 0), ("done", 0), ("behind", 1), ("done", 1),
                     ("behind", 2), ("done", 2)]


def test_read_ahead_reads_the_next_item_on_a_helper_thread() -> None:
    seen = _run(Overlapped("t-ahead", read_ahead=True), 3)
    assert all(t.startswith("t-ahead") for s, _, t in seen if s == "read")


@pytest.mark.parametrize("pipeline", [IN_ORDER, Overlapped("t-err")],
                         ids=["in_order", "overlapped"])
def test_an_error_of_a_redis_step_is_raised_and_its_done_never_runs(
        pipeline: Pipeline) -> None:
    done: list[int] = []

    def behind(b: int) -> None:
        if b == 1:
            raise RuntimeError("redis down")

    with pytest.raises(RuntimeError, match="redis down"):
        list(pipeline.run(range(4), lambda i: i, behind, lambda b, r: done.append(b)))
    assert done == [0]


@pytest.mark.parametrize("size", [1, 300, 999, 1000, 2500])
def test_spill_raw_batches_never_exceed_the_batch_size(size: int) -> None:
    """Rows come back in order, every list at most ``size`` long, also when ``size`` is
    smaller than a spill chunk (1,000 rows)."""
    from escalation.service_layer.importer import SpillFile

    spill = SpillFile()
    try:
        for n in range(3_456):
            spill.add_row((str(n), "line", None, None, None))
        got = list(spill.raw_batches(size))
    finally:
        spill.close()
    assert all(0 < len(b) <= size for b in got)
    assert [r[0] for b in got for r in b] == [str(n) for n in range(3_456)]
