"""Settings of the unit tier: Hypothesis profiles and a 10 s per-test timeout.

The unit tier needs no server, starts no process and runs in seconds: the target is under
10 s of CPU for ``pytest tests/unit`` (measure with ``/usr/bin/time -v``, user + sys). Every
test here gets a 10 s timeout (pytest-timeout; the project's 600 s is for the tiers that
start servers and processes), so a unit test that hangs, or grows slow enough to belong in
another tier, fails at once. A test that starts an interpreter, a shell or a forked child
belongs in tests/integration, which asks for a server only in the tests that use one.

Hypothesis profiles: ``unit`` (the default) runs 100 generated examples per property test.
``thorough`` runs 1,000: for whoever changes a rule or a fast path that a property test
covers, run by hand before landing (``HYPOTHESIS_PROFILE=thorough pytest tests/unit``; no CI
job runs it; its per-test timeout is 100 s, ten times the unit one, as its examples are).
Property tests leave ``max_examples`` to the profile; they set only what is theirs
(``deadline``), except the few costly equivalence tests that draw
``property_budget.examples(n)`` (n under this profile, the profile's count under any other).

A unit test needs no server: one that asks for a server fixture (``server_urls``, which
``database_url``, ``redis_url``, ``engine`` and the rest depend on) stops the run at
collection, naming it; such a test belongs in tests/integration.
"""

from __future__ import annotations

import gc
import multiprocessing.util
import os
import subprocess
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

settings.register_profile("unit", max_examples=100)
settings.register_profile("thorough", max_examples=1000)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "unit")
settings.load_profile(PROFILE)

#: seconds a unit test may take, fixtures included (under the ``unit`` profile; ``thorough``
#: draws ten times the examples, so a property test gets ten times as long)
UNIT_TIMEOUT_S = 10 if PROFILE == "unit" else 100

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: Any, items: list[pytest.Item]) -> None:
    """Give every test of this directory the unit timeout, or its own if shorter, and refuse
    one that needs a server (a session-wide hook: the items of other tiers are left as they
    are)."""
    needs_server = []
    here: dict[Path, bool] = {}  # per file: resolving a path costs a stat per component
    for item in items:
        if item.path not in here:
            here[item.path] = _HERE in Path(item.path).resolve().parents
        if not here[item.path]:
            continue
        if "server_urls" in getattr(item, "fixturenames", ()):
            needs_server.append(item.nodeid)
        own = item.get_closest_marker("timeout")
        if own is None or not own.args or own.args[0] > UNIT_TIMEOUT_S:
            item.add_marker(pytest.mark.timeout(UNIT_TIMEOUT_S), append=False)
    if needs_server:
        raise pytest.UsageError("unit tests must not need a server (move them to "
                                f"tests/integration): {', '.join(needs_server)}")


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Generator[None, object, object]:
    """Collect with the cycle collector off, then collect once and freeze what is left.

    Importing the tests and the libraries they use grows the heap to about 370,000 objects
    the collector tracks, and each full collection scanned all of them (13 in a run, about
    1.3 s of the unit tier's CPU; docs/testing.md, "The unit tier"). After one collection the
    survivors (modules, classes, test items) go to the permanent generation
    (:func:`gc.freeze`), so the collections during the tests scan only what the tests made.
    Reference counting is untouched: an object dropped is freed (and warns, if it is an open
    resource) as before. A cycle of frozen objects is found when they are unfrozen, before
    pytest's last collection of the session (:func:`pytest_unconfigure`).

    Only a run given a path under tests/unit (``pytest tests/unit``) has loaded this conftest
    when collection starts; a run of the whole suite loads it while collecting, so there it
    wraps nothing (and the unfreeze below has nothing to do).
    """
    gc.disable()
    try:
        return (yield)
    finally:
        gc.collect()
        gc.freeze()
        gc.enable()


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config: Any) -> None:
    """Unfreeze before pytest's last collection, which then finds every cycle left over; then
    freeze what survives it.

    pytest collects once more in its cleanups, and the interpreter's exit collects the
    ~290,000 objects the run leaves and frees them one by one: about 0.8 s of the tier's CPU,
    spent after every test has run and every leftover cycle has been found. Frozen, they are
    left to the process's exit (the interpreter's exit went from about 0.9 s to 0.1 s of
    CPU). The freeze is the first cleanup to run (``add_cleanup``: last added, first run),
    after every ``pytest_unconfigure``, pytest's last collection included.
    """
    gc.unfreeze()
    config.add_cleanup(gc.freeze)


def _refuse_process(*_args: Any, **_kwargs: Any) -> Any:
    raise AssertionError("a unit test starts no process (an interpreter, a shell or a forked "
                         "child): move the test to tests/integration")


@pytest.fixture(autouse=True)
def _starts_no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hold the unit tier's rule that a test starts no process: every way Python starts one
    (``subprocess``, ``os.fork``, ``os.posix_spawn``, the spawn of ``multiprocessing``) fails
    the test that tries, naming the rule."""
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse_process)
    monkeypatch.setattr(os, "fork", _refuse_process)
    monkeypatch.setattr(os, "posix_spawn", _refuse_process)
    monkeypatch.setattr(multiprocessing.util, "spawnv_passfds", _refuse_process)
