"""Every network call of start-up is retried on a transient error, not only the first
probe: a connection reset on the Redis TIME read that follows the checks used to end a
worker with exit 1 (seen behind a proxy that drops connections)."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from escalation import bootstrap


def test_a_reset_on_the_start_up_clock_read_is_retried(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = bootstrap.make_redis
    resets: list[int] = []

    def flaky_client(*args: Any, **kwargs: Any) -> Any:
        client = real(*args, **kwargs)
        time_of = client.time

        def time_once_reset() -> Any:
            if not resets:
                resets.append(1)
                raise redis.ConnectionError("Error while reading: Connection reset by peer")
            return time_of()

        client.time = time_once_reset
        return client

    monkeypatch.setattr(bootstrap, "make_redis", flaky_client)
    app = bootstrap.build(settings)
    try:
        assert resets == [1]  # the reset happened, and start-up went on after it
        assert app.scheduler.time() is not None
    finally:
        app.close()
