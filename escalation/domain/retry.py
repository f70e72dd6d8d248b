"""Retry policy: a backoff ladder with multiplicative jitter (pure; seed 002 "Retries").

Seed 002: "on failure, attempts += 1, compute delay = base x 2^attempts capped (5 s, 30 s,
5 min, 1 h) plus random jitter ... After max attempts, move to jobs:dead". Its example code
indexes a fixed ladder ``BACKOFF = [5, 30, 300, 3600]`` (which is what "capped" amounts to),
so the ladder is explicit here and configurable.

Formula. After failed delivery attempt ``n`` (1-based, ``1 <= n <= len(ladder)``)::

    delay_s(n, u) = ladder[n - 1] * (1 + jitter * (2u - 1)),   u ~ Uniform[0, 1)

i.e. uniformly spread over ``[base * (1 - jitter), base * (1 + jitter))``. With the default
``jitter = 0.2`` a 5 s step lands in [4 s, 6 s), a 1 h step in [48 min, 72 min). After attempt
``len(ladder) + 1`` fails there is no further delay: the item is dead-lettered. So a
notification is attempted at most ``1 + len(ladder)`` times (default 5).

Why jitter (seed 002): if 10,000 deliveries fail together during a downstream outage,
identical backoff would retry them all at the same instant -- a retry storm that knocks the
downstream over again. Uniform jitter spreads each step's retries evenly over +/-20 % of it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from escalation.domain.errors import InvalidInput

DEFAULT_LADDER_S: tuple[float, ...] = (5.0, 30.0, 300.0, 3600.0)
DEFAULT_JITTER = 0.2
MAX_JITTER = 0.5


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Backoff ladder (seconds) and jitter fraction.

    Attributes:
        ladder_s: delay before retry ``n+1`` after failed attempt ``n``, seconds, each > 0.
        jitter: fraction 0.0-0.5; each delay is spread uniformly over ``+/- jitter`` of its step.

    Raises:
        InvalidInput: an empty ladder, a non-positive or non-finite step, jitter out of range.
    """

    ladder_s: tuple[float, ...] = DEFAULT_LADDER_S
    jitter: float = DEFAULT_JITTER

    def __post_init__(self) -> None:
        if not self.ladder_s or len(self.ladder_s) > 32:
            raise InvalidInput("retry ladder must have 1-32 steps")
        for step in self.ladder_s:
            if not 0 < float(step) <= 7 * 86_400:
                raise InvalidInput(f"retry step must be in (0, 604800] seconds, got {step!r}")
        if not 0.0 <= self.jitter <= MAX_JITTER:
            raise InvalidInput(f"retry jitter must be in 0.0-{MAX_JITTER}, got {self.jitter!r}")

    @property
    def max_attempts(self) -> int:
        """Delivery attempts before dead-lettering: ``1 + len(ladder_s)``."""
        return 1 + len(self.ladder_s)

    def exhausted(self, failed_attempts: int) -> bool:
        """True when ``failed_attempts`` (>= 1) leaves no retry: dead-letter the item."""
        return failed_attempts >= self.max_attempts

    def delay_s(self, failed_attempts: int, u: float) -> float:
        """Delay in seconds after ``failed_attempts`` failures, for a uniform draw ``u``.

        Args:
            failed_attempts: 1..len(ladder_s).
            u: a number in [0, 1) (``random.random()``); 0.5 gives the step itself.

        Raises:
            InvalidInput: ``failed_attempts`` outside 1..len(ladder_s) or ``u`` outside [0, 1].
        """
        if not 1 <= failed_attempts <= len(self.ladder_s):
            raise InvalidInput(
                f"failed_attempts must be 1-{len(self.ladder_s)}, got {failed_attempts}"
            )
        if not 0.0 <= u <= 1.0:
            raise InvalidInput(f"u must be in [0, 1], got {u!r}")
        base = float(self.ladder_s[failed_attempts - 1])
        return base * (1.0 + self.jitter * (2.0 * u - 1.0))

    def next_delay_s(self, failed_attempts: int, rng: random.Random) -> float:
        """``delay_s(failed_attempts, rng.random())``: the delay to use, in seconds."""
        return self.delay_s(failed_attempts, rng.random())

    def next_delay_ms(self, failed_attempts: int, rng: random.Random) -> int:
        """The delay in whole milliseconds (rounded), for ZSET scores in epoch ms."""
        return round(self.next_delay_s(failed_attempts, rng) * 1000)
