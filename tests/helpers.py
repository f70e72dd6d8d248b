"""Helpers shared by every test tier (fixtures live in tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
from typing import IO

CLI_TIMEOUT_S = 180


def run_cli(env: dict[str, str], *args: str,
            timeout: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run ``python -m escalation ARGS`` with ``env``; capture stdout/stderr as text.

    Never raises on a non-zero exit (tests assert the code); raises
    ``subprocess.TimeoutExpired`` after ``timeout`` seconds.
    """
    return subprocess.run([sys.executable, "-m", "escalation", *args], env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


#: child processes of the running test with their output files (:func:`own_log`)
_CHILDREN: list[tuple[subprocess.Popen[bytes], IO[bytes]]] = []


def own_log(proc: subprocess.Popen[bytes], log: IO[bytes]) -> None:
    """Make ``log`` (the temporary file ``proc`` writes its output to) ``proc.log_file``,
    and have it closed when the test ends (:func:`reap_children`, from an autouse fixture).

    Tests read a child's output after it has exited, so neither stopping nor reaping the
    process can close the file; left to the garbage collector, it was reported as
    ``ResourceWarning: unclosed file`` inside whichever test ran then.
    """
    proc.log_file = log  # type: ignore[attr-defined]
    _CHILDREN.append((proc, log))


def reap_children() -> None:
    """Kill (SIGKILL) and reap every process of :func:`own_log` still running (a test that
    failed before stopping it), then close every output file."""
    while _CHILDREN:
        proc, log = _CHILDREN.pop()
        try:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        finally:
            log.close()
