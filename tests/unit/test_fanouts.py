"""The edge's thread machinery of the import: ``Threads`` (a fanout whose results come back
in the items' order, errors included) and ``KeptThreads`` (bounded, kept between maps). Its
process machinery, ``ForkedHelper``, forks: tests/integration/test_forked_helper.py."""

from __future__ import annotations

import threading
import time

import pytest

from escalation.adapters.pipeline import KeptThreads, Threads
from escalation.service_layer.core import ONE_BY_ONE, Fanout


@pytest.mark.parametrize("fanout", [Threads(4, "t", ahead=6), ONE_BY_ONE],
                         ids=["threads", "one-by-one"])
def test_a_fanout_gives_the_results_in_the_items_order(fanout: Fanout) -> None:
    def slow_first(i: int) -> tuple[int, str]:
        time.sleep(0.01 if i % 5 == 0 else 0)
        return i, threading.current_thread().name

    got = list(fanout.map(slow_first, iter(range(40))))
    assert [i for i, _ in got] == list(range(40))
    if isinstance(fanout, Threads):
        assert all(name.startswith("t") for _, name in got)
        assert len({name for _, name in got}) > 1


def test_a_threads_fanout_raises_a_calls_error_at_its_result() -> None:
    def fail_at_7(i: int) -> int:
        if i == 7:
            raise ValueError("7")
        return i

    got: list[int] = []
    with pytest.raises(ValueError, match="7"):
        got.extend(Threads(3, "t").map(fail_at_7, range(100)))
    assert got == list(range(7))


def test_kept_threads_run_at_most_their_count_at_once_and_are_kept_between_maps() -> None:
    fanout = KeptThreads(3, "kept")
    lock, running, peak = threading.Lock(), [0], [0]

    def call(i: int) -> tuple[int, str]:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.005)
        with lock:
            running[0] -= 1
        return i, threading.current_thread().name

    try:
        first = list(fanout.map(call, range(30)))
        second = list(fanout.map(call, range(30, 60)))
    finally:
        fanout.close()
    assert [i for i, _ in first + second] == list(range(60))
    assert peak[0] == 3  # bounded, and yet concurrent
    names = {name for _, name in first + second}
    assert len(names) == 3 and all(n.startswith("kept") for n in names)  # the same threads
    fanout.close()  # idempotent
