"""``python -m tests.fault.notify_main <webhook url> <consumer> <idle ms>``: a notification
consumer process (``escalation.service_layer.notify.Notifier`` delivering to a webhook), built
from the ``ESCALATION_*`` environment like the CLI. Runs until killed or SIGTERM."""

from __future__ import annotations

import signal
import sys
from typing import Any


def main(url: str, consumer: str, idle_ms: int) -> None:
    """Deliver review-stream entries to ``url`` until SIGTERM (exit 0)."""
    from escalation.adapters.redis_reconcile_notify import ReliabilityRedis
    from escalation.adapters.webhook import post_notification
    from escalation.bootstrap import build
    from escalation.domain.retry import RetryPolicy
    from escalation.service_layer.notify import ConsumeReviews, Notifier, NotifyPorts
    from escalation.settings import get_settings

    app = build(get_settings(), actor=consumer)
    rel = ReliabilityRedis(app.redis, app.settings.namespace, app.settings.shards)
    notifier = Notifier(
        ConsumeReviews(consumer, consumer, RetryPolicy((1.0, 2.0, 5.0)), idle_ms=idle_ms),
        NotifyPorts(rel, app.scheduler, app.store,
                    lambda f: post_notification(url, f, 10.0, b"fault-suite-secret")))
    stop = {"flag": False}

    def handler(signum: int, frame: Any) -> None:
        stop["flag"] = True

    signal.signal(signal.SIGTERM, handler)
    try:
        while not stop["flag"]:
            notifier.run_once(count=10, block_ms=200)
    finally:
        app.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
