"""The unit tier starts no process (tests/unit/conftest.py): each way Python starts one fails
the test that tries, with the rule's message, before anything is started."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys

import pytest


def test_subprocess_is_refused() -> None:
    with pytest.raises(AssertionError, match="starts no process"):
        subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_fork_and_posix_spawn_are_refused() -> None:
    with pytest.raises(AssertionError, match="starts no process"):
        os.fork()
    with pytest.raises(AssertionError, match="starts no process"):
        os.posix_spawn(sys.executable, [sys.executable, "-c", "pass"], os.environ)


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_a_multiprocessing_child_is_refused(method: str) -> None:
    process = multiprocessing.get_context(method).Process(  # type: ignore[attr-defined]
        target=print)
    with pytest.raises(AssertionError, match="starts no process"):
        process.start()
