"""``python -m tests.fault.worker_main worker ...``: the real CLI with a freeze crashpoint.

``ESCALATION_FAULT_FREEZE=<boundary>:<n>`` makes the worker SIGSTOP itself the n-th time it
passes ``<boundary>`` (after_claim, after_record, after_apply), so a test can freeze it while
it holds a claimed batch -- deterministically, unlike an external SIGSTOP. Only passes that
claimed something count (an idle worker's empty claims pass ``after_claim`` too, so a worker
started before anything is due would otherwise freeze holding nothing). Everything else is
``escalation.entrypoints.cli.main``; ``ESCALATION_CRASHPOINT`` is replaced by this hook.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import escalation.entrypoints.worker as worker_mod
from escalation.adapters.redis_scheduler import RedisScheduler


def _freeze_hook() -> Callable[[str], None] | None:
    spec = os.environ.get("ESCALATION_FAULT_FREEZE")
    if not spec:
        return None
    name, _, count = spec.partition(":")
    target, seen = int(count or "1"), [0]
    claimed = [0]  # items of the pass in progress (0: an empty claim, which does not count)
    real_claim = RedisScheduler.claim

    def claim(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = real_claim(self, *args, **kwargs)
        claimed[0] = len(result.items)
        return result

    RedisScheduler.claim = claim  # type: ignore[method-assign]

    def hook(point: str) -> None:
        if point == name and (point != "after_claim" or claimed[0]):
            seen[0] += 1
            if seen[0] == target:
                os.kill(os.getpid(), signal.SIGSTOP)

    return hook


worker_mod.crashpoint_from_env = _freeze_hook  # type: ignore[assignment]

if __name__ == "__main__":
    from escalation.entrypoints.cli import main

    main()
