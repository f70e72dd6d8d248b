"""The test run's own guards (pyproject's [tool.pytest.ini_options]): a hung test fails
instead of stalling the run, an xfail that passes fails, a warning fails its test, unknown
config keys are errors; the unit tier's per-test timeout is 10 s."""

from __future__ import annotations

import os
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


WARNS = '''
import warnings

def test_warns():
    warnings.warn("old API", DeprecationWarning, stacklevel=1)
'''


def test_a_warning_fails_its_test(tmp_path: Path) -> None:
    (tmp_path / "test_warns.py").write_text(WARNS)
    res = _run(tmp_path, "test_warns.py")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "DeprecationWarning: old API" in res.stdout
    assert "1 failed" in res.stdout


PRINT_TIMEOUTS = '''
def pytest_collection_finish(session):
    for item in session.items:
        marker = item.get_closest_marker("timeout")
        print("TIMEOUT", item.nodeid, marker.args[0] if marker else None)
'''


def test_every_unit_test_times_out_at_10_s_or_sooner(tmp_path: Path) -> None:
    (tmp_path / "print_timeouts.py").write_text(PRINT_TIMEOUTS)
    repo = PYPROJECT.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(repo)])}
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "print_timeouts",
         "--collect-only", "tests/unit/test_retry.py", "tests/e2e/test_pytest_config.py"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    found = dict(line.split()[1:] for line in res.stdout.splitlines()
                 if line.startswith("TIMEOUT "))
    unit = {k: v for k, v in found.items() if k.startswith("tests/unit/")}
    assert unit and set(unit.values()) == {"10"}, found
    # the other tiers keep the project-wide default (no marker)
    assert found["tests/e2e/test_pytest_config.py::test_a_warning_fails_its_test"] == "None"
