"""Retry policy: a backoff ladder with full jitter across each gap of the ladder (pure).

Formula. After failed delivery attempt ``n`` (1-based, ``1 <= n <= len(ladder)``), with
``step = ladder[n - 1]`` and ``next = ladder[n]`` (0 after the last step)::

    upper_n     = max(next, 2 * step)
    delay_s(n, u) = step + u * (upper_n - step),      u ~ Uniform[0, 1)

i.e. the retry lands uniformly anywhere between this step and the next one: with the default
ladder 5 s, 30 s, 5 min, 1 h the first retry is spread over [5 s, 30 s), the second over
[30 s, 5 min), the third over [5 min, 1 h), the fourth over [1 h, 2 h). After attempt
``len(ladder) + 1`` fails there is no further delay: the item is dead-lettered. So a
notification is attempted at most ``1 + len(ladder)`` times (default 5).

Why this shape. This is "full jitter" (M. Brooker, *Exponential Backoff And Jitter*, AWS
Architecture Blog, 2015: ``sleep = random_between(0, min(cap, base * 2**attempt))``) applied to
each gap of an explicit ladder, with the step itself as a floor. When thousands of deliveries
fail together during a downstream outage, a narrow +/-20 % band around 5 s put half of the
first retries into one second -- a retry storm that knocks the receiver over again. Spreading
over the whole gap puts at most a few percent of the herd into any one second (4 % per second
for the first retry with the default ladder), while the floor keeps the minimum wait the ladder
promises and successive retries never overlap (attempt ``n + 1`` always waits at least as
long as attempt ``n``). The same spread is used for every step: no jitter fraction to tune.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from escalation.domain.errors import InvalidInput

DEFAULT_LADDER_S: tuple[float, ...] = (5.0, 30.0, 300.0, 3600.0)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Backoff ladder (seconds); each delay is drawn uniformly over the gap to the next step.

    Attributes:
        ladder_s: minimum delay before retry ``n+1`` after failed attempt ``n``, seconds,
            each in (0, 604800].

    Raises:
        InvalidInput: an empty ladder (or more than 32 steps), a non-positive or non-finite
            step.
    """

    ladder_s: tuple[float, ...] = DEFAULT_LADDER_S

    def __post_init__(self) -> None:
        if not self.ladder_s or len(self.ladder_s) > 32:
            raise InvalidInput("retry ladder must have 1-32 steps")
        for step in self.ladder_s:
            if not 0 < float(step) <= 7 * 86_400:
                raise InvalidInput(f"retry step must be in (0, 604800] seconds, got {step!r}")

    @property
    def max_attempts(self) -> int:
        """Delivery attempts before dead-lettering: ``1 + len(ladder_s)``."""
        return 1 + len(self.ladder_s)

    def exhausted(self, failed_attempts: int) -> bool:
        """True when ``failed_attempts`` (>= 1) leaves no retry: dead-letter the item."""
        return failed_attempts >= self.max_attempts

    def window_s(self, failed_attempts: int) -> tuple[float, float]:
        """``(step, upper)``: the retry after ``failed_attempts`` lands in [step, upper), seconds.

        Raises:
            InvalidInput: ``failed_attempts`` outside 1..len(ladder_s).
        """
        if not 1 <= failed_attempts <= len(self.ladder_s):
            raise InvalidInput(
                f"failed_attempts must be 1-{len(self.ladder_s)}, got {failed_attempts}"
            )
        step = float(self.ladder_s[failed_attempts - 1])
        nxt = (float(self.ladder_s[failed_attempts])
               if failed_attempts < len(self.ladder_s) else 0.0)
        return step, max(nxt, 2.0 * step)

    def delay_s(self, failed_attempts: int, u: float) -> float:
        """Delay in seconds after ``failed_attempts`` failures, for a uniform draw ``u``.

        Args:
            failed_attempts: 1..len(ladder_s).
            u: a number in [0, 1) (``random.random()``); 0 gives the step itself.

        Raises:
            InvalidInput: ``failed_attempts`` outside 1..len(ladder_s) or ``u`` outside [0, 1].
        """
        step, upper = self.window_s(failed_attempts)
        if not 0.0 <= u <= 1.0:
            raise InvalidInput(f"u must be in [0, 1], got {u!r}")
        return step + u * (upper - step)

    def next_delay_s(self, failed_attempts: int, rng: random.Random) -> float:
        """``delay_s(failed_attempts, rng.random())``: the delay to use, in seconds."""
        return self.delay_s(failed_attempts, rng.random())

    def next_delay_ms(self, failed_attempts: int, rng: random.Random) -> int:
        """The delay in whole milliseconds (rounded), for ZSET scores in epoch ms."""
        return round(self.next_delay_s(failed_attempts, rng) * 1000)
