"""A bench worker's interpreter imports the source tree of the bench that starts it, even
when started from inside another checkout (an A/B run with ``PYTHONPATH=<base tree>``
measured that checkout's workers: ``python -m`` puts the working directory ahead of
``PYTHONPATH``).

No server is needed; the test starts an interpreter, which the unit tier does not (the
environment ``same_tree`` builds is checked there: tests/unit/test_bench_worker_tree.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import escalation
from escalation.bench.common import same_tree

ROOT = str(Path(escalation.__file__).resolve().parent.parent)


def test_a_worker_interpreter_started_in_another_checkout_imports_this_tree(
    tmp_path: Path,
) -> None:
    decoy = tmp_path / "escalation"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("")
    (decoy / "__main__.py").write_text("print('decoy')\n")
    env = same_tree({k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    code = "import escalation, sys; print(escalation.__file__)"
    out = subprocess.run([sys.executable, "-P", "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == str(Path(ROOT) / "escalation" / "__init__.py")
