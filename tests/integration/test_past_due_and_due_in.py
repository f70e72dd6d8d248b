"""A due time in the past beyond the tolerance is accepted and flagged (past_due on the
ENQUEUED ledger row and in the result); ``due_in`` counts from Redis TIME; bad input names
the field and writes nothing. Real Redis and PostgreSQL, the service layer and the CLI."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from escalation.domain.errors import InvalidInput
from escalation.domain.timeutil import to_ms
from escalation.service_layer.core import CorePorts
from escalation.service_layer.enqueue import (
    DUE_IN_MAX,
    PAST_DUE_TOLERANCE,
    EnqueueMany,
    EnqueueRequest,
    enqueue_many,
)
from tests.e2e.test_cli_bad_input import GOOD_HASH
from tests.helpers import run_cli


def _enqueue(app: Any, **kw: Any) -> Any:
    req = EnqueueRequest(dispute_id=kw.pop("dispute_id", uuid.uuid4()), materiality="10.00",
                         source_hash=GOOD_HASH, **kw)
    (res,) = enqueue_many(
        EnqueueMany(requests=[req], actor="test", default_ladder=app.settings.default_ladder),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
    )
    return res


def test_a_due_at_beyond_the_tolerance_is_flagged_on_the_ledger_and_in_the_result(
    app: Any,
) -> None:
    now = app.scheduler.time()
    late = _enqueue(app, due_at=now - timedelta(hours=2))
    assert late.created and late.past_due_ms is not None
    assert 2 * 3_600_000 <= late.past_due_ms < 2 * 3_600_000 + 60_000
    (row,) = app.store.trail(late.escalation.dispute_id)
    assert row.details["past_due"]["behind_ms"] == late.past_due_ms
    assert row.details["past_due"]["tolerance_ms"] == PAST_DUE_TOLERANCE // timedelta(
        milliseconds=1)
    assert app.redis.zscore(app.scheduler.keys_for(late.escalation.dispute_id).pending,
                            str(late.escalation.dispute_id)) is not None  # scheduled, due

    within = _enqueue(app, due_at=now - timedelta(minutes=1))
    assert within.past_due_ms is None
    assert "past_due" not in app.store.trail(within.escalation.dispute_id)[0].details
    again = _enqueue(app, dispute_id=late.escalation.dispute_id, due_at=now - timedelta(hours=2))
    assert not again.created and again.past_due_ms is None  # a replay writes no flag


def test_a_due_time_from_opened_at_in_the_past_is_flagged_the_same_way(app: Any) -> None:
    """dispute_review's first tier (standard) has a 24-hour window (ladders/dispute_review.v1
    .toml): opened 3 days ago, it was due 2 days ago, beyond the 5 min tolerance: flagged on
    the ENQUEUED row (from opened_at) and in the result. Opened an hour ago: due in 23 h, no
    flag."""
    now = app.scheduler.time()
    old = _enqueue(app, opened_at=now - timedelta(days=3))
    due = old.escalation.due_at
    assert due < now - timedelta(days=1)
    assert old.created and old.past_due_ms is not None
    assert 0 <= old.past_due_ms - (now - due) // timedelta(milliseconds=1) < 60_000
    (row,) = app.store.trail(old.escalation.dispute_id)
    assert row.details["past_due"]["behind_ms"] == old.past_due_ms
    assert row.details["past_due"]["from"] == "opened_at"
    fresh = _enqueue(app, opened_at=now - timedelta(hours=1))
    assert fresh.escalation.due_at > now and fresh.past_due_ms is None
    assert "past_due" not in app.store.trail(fresh.escalation.dispute_id)[0].details


def test_due_in_counts_from_redis_time(app: Any) -> None:
    before = to_ms(app.scheduler.time())
    res = _enqueue(app, due_in=timedelta(hours=36))
    after = to_ms(app.scheduler.time())
    due = to_ms(res.escalation.due_at)
    assert before + 36 * 3_600_000 <= due <= after + 36 * 3_600_000
    assert res.past_due_ms is None


@pytest.mark.parametrize(("kw", "field"), [
    ({"due_in": timedelta(hours=1), "due_at": datetime(2030, 1, 1, tzinfo=UTC)}, "due_in"),
    ({"due_in": timedelta(hours=1), "opened_at": datetime(2030, 1, 1, tzinfo=UTC)}, "due_in"),
    ({"due_in": timedelta(seconds=-1)}, "due_in must be 0"),
    ({"due_in": DUE_IN_MAX + timedelta(days=1)}, "due_in must be 0"),
])
def test_bad_due_in_is_refused_naming_the_field_and_nothing_is_written(
    app: Any, kw: dict[str, Any], field: str,
) -> None:
    did = uuid.uuid4()
    with pytest.raises(InvalidInput, match=field):
        _enqueue(app, dispute_id=did, **kw)
    assert app.store.get(did) is None


def test_cli_due_in_and_the_past_due_note(cli_env: dict[str, str]) -> None:
    did = str(uuid.uuid4())
    res = run_cli(cli_env, "enqueue", "--dispute-id", did, "--source-hash", GOOD_HASH,
                  "--due-in", "2d", "--json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    due = datetime.fromisoformat(info["due_at"])
    assert timedelta(days=2) - timedelta(minutes=2) < due - datetime.now(UTC) <= timedelta(days=2)
    assert info["past_due_ms"] is None

    late = (datetime.now(UTC) - timedelta(hours=3)).isoformat()
    res = run_cli(cli_env, "enqueue", "--dispute-id", str(uuid.uuid4()), "--source-hash",
                  GOOD_HASH, "--due-at", late, "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["past_due_ms"] >= 3 * 3_600_000
    assert "flagged past_due" in res.stderr and "--due-in" in res.stderr

    opened = (datetime.now(UTC) - timedelta(days=3)).isoformat()
    res = run_cli(cli_env, "enqueue", "--dispute-id", str(uuid.uuid4()), "--source-hash",
                  GOOD_HASH, "--opened-at", opened, "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["past_due_ms"] >= 2 * 24 * 3_600_000 - 60_000
    assert "--opened-at" in res.stderr and "flagged past_due" in res.stderr

    res = run_cli(cli_env, "enqueue", "--dispute-id", str(uuid.uuid4()), "--source-hash",
                  GOOD_HASH, "--due-in", "1.5h")
    assert res.returncode == 2 and "--due-in must be a duration" in res.stderr, res.stderr
