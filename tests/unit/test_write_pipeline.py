"""The write pipeline's parts: BatchBehind (one step in flight, the last inline, errors
raised) and the import spill's batches (in order, never longer than the batch size)."""

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
