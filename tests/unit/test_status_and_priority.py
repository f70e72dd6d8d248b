"""``status`` (service_layer.status) merges the Redis and PostgreSQL figures as their ports
give them; ``priority.weight_fn`` weighs an escalation by its pinned ladder's materiality
bands, 0 where it cannot tell."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from escalation.domain.calendars import SlaWindow, WindowUnit
from escalation.domain.ladder import Ladder, MaterialityBand, Tier
from escalation.service_layer.priority import weight_fn
from escalation.service_layer.status import status
from tests.fakes import FakeLadders


class _Figures:
    def __init__(self, figures: dict[str, Any]) -> None:
        self.figures = figures

    def stats(self) -> dict[str, Any]:
        return dict(self.figures)

    def counts(self) -> dict[str, Any]:
        return dict(self.figures)


def test_status_is_redis_beside_postgres() -> None:
    got = status(scheduler=_Figures({"pending": 3, "due_now": 1}),
                 store=_Figures({"pending": 4, "by_tier": {"standard": 4}}))
    assert got == {"redis": {"pending": 3, "due_now": 1},
                   "postgres": {"pending": 4, "by_tier": {"standard": 4}}}


LADDER = Ladder(
    name="dispute_review", version=1,
    tiers=(Tier("standard", "Standard", 10, SlaWindow(24, WindowUnit.CALENDAR_HOURS)),
           Tier("senior", "Senior", 20, SlaWindow(48, WindowUnit.CALENDAR_HOURS))),
    terminal_tier="senior",
    bands=(MaterialityBand("high", Decimal("10000"), "senior"),
                       MaterialityBand("mid", Decimal("1000"), None)),
)


def test_weight_is_one_plus_the_band_index_in_ascending_order() -> None:
    weight = weight_fn(FakeLadders([LADDER]))
    assert weight("dispute_review@1", "999.99") == 0  # below every band
    assert weight("dispute_review@1", "1000.00") == 1
    assert weight("dispute_review@1", "25000.00") == 2


def test_an_unknown_ladder_or_a_bad_amount_weighs_nothing() -> None:
    weight = weight_fn(FakeLadders([LADDER]))
    assert weight("dispute_review@2", "25000.00") == 0
    assert weight("no_such_ladder@1", "25000.00") == 0
    assert weight("dispute_review@x", "25000.00") == 0
    assert weight("dispute_review@1", "lots") == 0
