"""A stop signal interrupts the worker only while it waits.

An exception raised by the signal handler in the middle of a Redis call (a maintenance
job's, a batch's) can leave a reply unread on a pooled connection; the next command then
reads it as its own (seen: a lease release that read a stale nil and crashed the worker's
exit). So the handler raises only inside :func:`_waiting`, and what it raises is not an
``Exception`` that a job's ``except Exception`` would swallow."""

from __future__ import annotations

import signal

import pytest

from escalation.entrypoints import worker


def _handler(state: dict[str, bool]) -> object:
    old = worker._install_stop_handlers(state, "w-test")
    try:
        return signal.getsignal(signal.SIGTERM)
    finally:
        worker._restore_handlers(old)


def test_a_signal_outside_a_wait_only_sets_the_stop_flag() -> None:
    state = {"stop": False, "in_batch": False, "waiting": False}
    handler = _handler(state)
    assert callable(handler)
    handler(signal.SIGTERM, None)  # a maintenance job or a batch is running: no raise
    assert state["stop"] is True


def test_a_signal_during_a_wait_interrupts_it_and_is_not_an_exception() -> None:
    state = {"stop": False, "in_batch": False, "waiting": False}
    handler = _handler(state)
    assert callable(handler)
    seen: list[bool] = []

    def wait() -> None:
        seen.append(state["waiting"])
        handler(signal.SIGTERM, None)

    with pytest.raises(worker._Shutdown):
        worker._waiting(state, wait)
    assert seen == [True] and state["waiting"] is False and state["stop"] is True
    assert not issubclass(worker._Shutdown, Exception)


def test_a_wait_after_the_signal_is_skipped() -> None:
    state = {"stop": True, "in_batch": False, "waiting": False}
    ran: list[int] = []
    worker._waiting(state, lambda: ran.append(1))
    assert ran == []
