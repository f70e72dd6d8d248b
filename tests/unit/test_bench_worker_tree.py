"""Bench workers run the source tree of the bench that starts them (an A/B run with
``PYTHONPATH=<base tree>`` from inside another checkout measured that checkout's workers:
``python -m`` puts the working directory ahead of ``PYTHONPATH``): the environment
``same_tree`` gives them. A worker interpreter started that way:
tests/integration/test_bench_worker_interpreter.py."""

from __future__ import annotations

import os
from pathlib import Path

import escalation
from escalation.bench.common import same_tree

ROOT = str(Path(escalation.__file__).resolve().parent.parent)


def test_same_tree_puts_this_tree_first_once() -> None:
    env = same_tree({"PYTHONPATH": os.pathsep.join(["/elsewhere", ROOT]), "X": "1"})
    assert env["PYTHONPATH"].split(os.pathsep) == [ROOT, "/elsewhere"]
    assert env["X"] == "1"
    assert same_tree({})["PYTHONPATH"] == ROOT
