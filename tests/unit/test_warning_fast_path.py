"""The worker's integer-ms warning path gives exactly the instants of the generic one."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from escalation.domain.calendars import UTC_CALENDAR, SlaWindow, WindowUnit
from escalation.domain.escalation import Escalation
from escalation.domain.materiality import Materiality
from escalation.domain.sla_timing import fraction_label, warning_times
from escalation.domain.timeutil import to_ms
from escalation.service_layer.warnings import _elapsed_members

FRACTIONS = st.lists(
    st.decimals(min_value=Decimal("0.01"), max_value=Decimal("0.99"), places=2),
    min_size=1, max_size=4, unique=True,
).map(tuple)


@settings(deadline=None)
@given(
    entered_us=st.integers(min_value=0, max_value=4_000_000_000_000_000),
    window_us=st.integers(min_value=0, max_value=400 * 86_400_000_000),
    fractions=FRACTIONS,
)
def test_fast_path_matches_warning_times(
    entered_us: int, window_us: int, fractions: tuple[Decimal, ...]
) -> None:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    entered = epoch + timedelta(microseconds=entered_us)
    due = entered + timedelta(microseconds=window_us)
    esc = Escalation(
        dispute_id=uuid.uuid4(), tier="standard", due_at=due,
        materiality=Materiality(Decimal("1.00")), source_hash="ab", ladder="l",
        ladder_version=1, seq=2, entered_tier_at=entered, trace_id="t",
    )
    window = SlaWindow(1, WindowUnit.CALENDAR_HOURS)
    expected = [
        (fraction_label(f), to_ms(at))
        for f, at in warning_times(window, UTC_CALENDAR, entered, due, fractions)
        if at < due
    ]
    got = [(m.member.split(":")[-1] if ":" in m.member else m.member, m.due_ms)
           for m in _elapsed_members(esc, fractions)]
    assert [ms for _, ms in got] == [ms for _, ms in expected]
    assert len(got) == len(expected)
