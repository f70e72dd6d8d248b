"""BatchBehind: one step in flight in a helper thread, the last inline, errors raised."""

from __future__ import annotations

import threading

import pytest

from escalation.service_layer.enqueue import BatchBehind


def test_steps_run_in_order_behind_the_caller_and_the_last_inline() -> None:
    done: list[tuple[int, str]] = []

    def step(n: int) -> None:
        done.append((n, threading.current_thread().name))

    behind = BatchBehind("t-behind")
    try:
        for n in range(3):
            behind.wait()
            behind.run(step, n, last=n == 2)
    finally:
        behind.close()
    assert [n for n, _ in done] == [0, 1, 2]
    assert all(name.startswith("t-behind") for _, name in done[:2])
    assert done[2][1] == threading.current_thread().name


def test_an_error_of_the_step_in_flight_is_raised_by_wait_and_by_close() -> None:
    def boom() -> None:
        raise RuntimeError("redis down")

    behind = BatchBehind("t-err")
    behind.run(boom, last=False)
    with pytest.raises(RuntimeError, match="redis down"):
        behind.wait()
    behind.run(boom, last=False)
    with pytest.raises(RuntimeError, match="redis down"):
        behind.close()
