"""``ForkedHelper``, the import's process machinery (ADR 0008): a job in a forked child, its
messages back in order, its error or its death raised in the caller, the child stopped when
the caller fails.

No server is needed; every test forks a child process, which the unit tier does not (the
thread fanouts are checked there: tests/unit/test_fanouts.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest

from escalation.adapters.helper_process import ENDED, ForkedHelper
from escalation.service_layer.core import HelperProcess

Send = Callable[[object], None]


def test_the_child_runs_the_job_and_its_messages_arrive_in_order() -> None:
    parent = os.getpid()
    helper: HelperProcess = ForkedHelper()

    def job(send: Send) -> None:
        for i in range(300):  # more than a pipe buffer holds
            send((i, os.getpid() != parent, "x" * 1000))

    with helper.start(job) as messages:
        got = list(messages)
    assert [m[0] for m in got] == list(range(300))  # type: ignore[index]
    assert all(m[1] for m in got)  # type: ignore[index]


def test_the_jobs_error_is_raised_after_the_messages_sent_before() -> None:
    def job(send: Send) -> None:
        send("first")
        raise ValueError("bad row 7")

    got: list[object] = []
    with pytest.raises(ValueError, match="bad row 7"), ForkedHelper().start(job) as messages:
        got.extend(messages)
    assert got == ["first"]


def test_a_child_that_dies_is_reported() -> None:
    def job(send: Send) -> None:
        send(1)
        os._exit(3)

    with pytest.raises(RuntimeError, match=ENDED), ForkedHelper().start(job) as messages:
        assert next(messages) == 1
        next(messages)


def test_a_caller_that_fails_stops_the_child() -> None:
    def job(send: Send) -> None:
        send(1)
        time.sleep(60)

    started = time.monotonic()
    with pytest.raises(KeyError), ForkedHelper().start(job) as messages:
        next(messages)
        raise KeyError("caller")
    assert time.monotonic() - started < 30  # killed, not waited for
