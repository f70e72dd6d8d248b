"""``python -m tests.fault.worker_main worker ...``: the real CLI with a freeze crashpoint.

``ESCALATION_FAULT_FREEZE=<boundary>:<n>`` makes the worker SIGSTOP itself the n-th time it
passes ``<boundary>`` (after_claim, after_record, after_apply), so a test can freeze it while
it holds a claimed batch -- deterministically, unlike an external SIGSTOP. Everything else is
``escalation.entrypoints.cli.main``; ``ESCALATION_CRASHPOINT`` is replaced by this hook.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import escalation.entrypoints.worker as worker_mod


def _freeze_hook() -> Callable[[str], None] | None:
    spec = os.environ.get("ESCALATION_FAULT_FREEZE")
    if not spec:
        return None
    name, _, count = spec.partition(":")
    target, seen = int(count or "1"), [0]

    def hook(point: str) -> None:
        if point == name:
            seen[0] += 1
            if seen[0] == target:
                os.kill(os.getpid(), signal.SIGSTOP)

    return hook


worker_mod.crashpoint_from_env = _freeze_hook  # type: ignore[assignment]

if __name__ == "__main__":
    from escalation.entrypoints.cli import main

    main()
