"""The incremental reconcile's state and the arithmetic of its sweep (pure).

The sweep walks the dispute id space (UUIDs as 128-bit integers, ascending) a slice per run:
each run covers ``elapsed / period`` of the space, where ``elapsed`` is the time since the
previous slice (Redis time), at most :data:`MAX_STEP_S`; the first slice assumes
:data:`DEFAULT_STEP_S`. At the end of the space the cursor wraps to 0 and a lap is counted.
Since dispute ids are UUIDs (random, or SHA-1 based for source + external id) the pending
escalations spread evenly over the space, so a slice holds about ``fraction`` of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

ID_SPACE = 1 << 128
"""Size of the dispute id space the sweep cursor walks."""
MAX_STEP_S = 900
"""The most elapsed time one slice accounts for (seconds): after a long pause the sweep goes
on at three 5-minute runs' worth per run instead of reading the backlog at once."""
DEFAULT_STEP_S = 300
"""The elapsed time assumed by a sweep's first slice (the maintenance period, seconds)."""


@dataclass(frozen=True, slots=True)
class ReconcileState:
    """What an incremental reconcile run leaves for the next one.

    Attributes:
        watermark: the horizon of the last run (aware UTC, the database's clock): every
            ledger row recorded before it was checked by a run.
        database: the namespace's database identity stamp the watermark belongs to.
        sweep_cursor: the next dispute id (an integer in [0, 2**128)) the sweep reads.
        sweep_at_ms: Redis time (epoch ms) of the previous sweep slice; None before the first.
        lap_started_ms: Redis time (epoch ms) when the current sweep lap began.
        member_cursors: ZSCAN cursor per scheduled ZSET key (-1: wrapped this lap).
        laps: sweep laps completed.
        stream_ms: Redis time (epoch ms) up to which the review streams were read (the
            disputes named by the decisions notified since are checked too).
    """

    watermark: datetime
    database: str | None
    sweep_cursor: int = 0
    sweep_at_ms: int | None = None
    lap_started_ms: int | None = None
    member_cursors: dict[str, int] = field(default_factory=dict)
    laps: int = 0
    stream_ms: int | None = None


@dataclass(frozen=True, slots=True)
class SweepSlice:
    """One run's slice: ids in [low, high), ``fraction`` of the space (and of each ZSET)."""

    low: int
    high: int
    fraction: float

    @property
    def wraps(self) -> bool:
        """The slice reaches the end of the id space (the lap is complete after it)."""
        return self.high >= ID_SPACE


def next_slice(state: ReconcileState, now_ms: int, period_s: int) -> SweepSlice:
    """The slice a run at ``now_ms`` (Redis time, epoch ms) reads, for a sweep ``period_s``
    seconds long (> 0)."""
    elapsed_ms = (DEFAULT_STEP_S * 1000 if state.sweep_at_ms is None
                  else max(0, now_ms - state.sweep_at_ms))
    elapsed_ms = min(elapsed_ms, MAX_STEP_S * 1000)
    period_ms = period_s * 1000
    step = -(-ID_SPACE * elapsed_ms // period_ms)  # rounded up: period / interval runs a lap
    low = state.sweep_cursor
    return SweepSlice(low, min(ID_SPACE, low + step), elapsed_ms / period_ms)
