"""Human units for durations shown by the CLI (``escalation status``)."""

from __future__ import annotations

import pytest

from escalation.entrypoints.render import figure_row, human_ms


@pytest.mark.parametrize(("ms", "text"), [
    (None, "-"), (0, "0 ms"), (850, "850 ms"), (1_000, "1 s"), (42_500, "42 s"),
    (60_000, "1 min"), (725_000, "12 min 5 s"), (11_520_000, "3 h 12 min"),
    (3_600_000, "1 h"), (187_200_000, "2 d 4 h"), (-90_000, "-1 min 30 s"),
])
def test_human_ms(ms: int | None, text: str) -> None:
    assert human_ms(ms) == text


def test_figure_row_converts_only_ms_figures() -> None:
    assert figure_row("redis.oldest_overdue_ms", 7_200_000) == ("redis.oldest_overdue", "2 h")
    assert figure_row("redis.pending", 5) == ("redis.pending", "5")
    assert figure_row("redis.oldest_overdue_ms", None) == ("redis.oldest_overdue", "-")
