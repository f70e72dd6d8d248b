"""The test run's own guards (pyproject's [tool.pytest.ini_options]): a hung test fails
instead of stalling the run, an xfail that passes fails, unknown config keys are errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"

SAMPLE = '''
import time
import pytest

@pytest.mark.timeout(1)
def test_hangs():
    time.sleep(30)

@pytest.mark.xfail(reason="expected to fail")
def test_passes_unexpectedly():
    assert True
'''


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(PYPROJECT), "--rootdir", str(tmp_path),
         "-p", "no:cacheprovider", "-q", *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)


def test_a_hung_test_times_out_and_an_unexpected_pass_fails(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    res = _run(tmp_path, "test_sample.py")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Timeout (>1.0s)" in res.stdout
    assert "[XPASS(strict)]" in res.stdout
    assert "2 failed" in res.stdout


def test_this_run_refuses_unknown_config_keys(request: pytest.FixtureRequest) -> None:
    assert request.config.option.strict_config is True


def test_the_default_timeout_leaves_room_for_the_multi_process_tests(
    request: pytest.FixtureRequest,
) -> None:
    # the demo and bench tests give their subprocesses up to 300 s
    assert float(request.config.getini("timeout")) >= 300
