"""Helpers shared by every test tier (fixtures live in tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys

CLI_TIMEOUT_S = 180


def run_cli(env: dict[str, str], *args: str,
            timeout: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run ``python -m escalation ARGS`` with ``env``; capture stdout/stderr as text.

    Never raises on a non-zero exit (tests assert the code); raises
    ``subprocess.TimeoutExpired`` after ``timeout`` seconds.
    """
    return subprocess.run([sys.executable, "-m", "escalation", *args], env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
