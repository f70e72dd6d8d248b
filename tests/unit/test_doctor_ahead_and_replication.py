"""doctor's REDIS_AHEAD and PG_REPLICATION verdicts from what the servers answer
(service_layer/doctor.py; the real-server runs are tests/integration/test_redis_ahead.py and
tests/postgres/test_async_failover.py)."""

from __future__ import annotations

from typing import Any

import pytest

from escalation.service_layer.doctor import _redis_ahead, _replication


class _Probe:
    def __init__(self, seen: dict[str, Any] | None) -> None:
        self.seen = seen

    def replication(self) -> dict[str, Any] | None:
        return self.seen


class _Mark:
    def __init__(self, mark: dict[str, Any] | None) -> None:
        self.mark = mark

    def resync(self) -> dict[str, Any] | None:
        return self.mark

    def mark_resync(self, reason: str, detail: str = "") -> None:
        raise AssertionError("doctor never writes")

    def clear_resync(self) -> bool:
        raise AssertionError("doctor never writes")


@pytest.mark.parametrize(("seen", "status"), [
    ({"in_recovery": False, "synchronous_standby_names": "", "standbys": []}, "ok"),
    ({"in_recovery": False, "synchronous_standby_names": "replica",
      "standbys": [("replica", "sync")]}, "ok"),
    ({"in_recovery": False, "synchronous_standby_names": "ANY 1 (a, b)",
      "standbys": [("a", "quorum"), ("b", "quorum")]}, "ok"),
    ({"in_recovery": False, "synchronous_standby_names": "",
      "standbys": [("replica", "async")]}, "WARN"),
    ({"in_recovery": False, "synchronous_standby_names": "a",
      "standbys": [("a", "sync"), ("b", "async")]}, "WARN"),
    ({"in_recovery": False, "synchronous_standby_names": "a",
      "standbys": [("a", "potential")]}, "WARN"),
    ({"in_recovery": True, "synchronous_standby_names": "", "standbys": []}, "FAIL"),
    (None, "unknown"),
])
def test_replication_verdicts(seen: dict[str, Any] | None, status: str) -> None:
    check = _replication(_Probe(seen))  # type: ignore[arg-type]
    assert check.status == status
    if status == "WARN":
        assert check.ok  # a warning never changes doctor's exit code
        assert "synchronous_standby_names" in check.advice
        assert "docs/operations.md" in check.advice


def test_redis_ahead_fails_on_the_mark_or_on_members_ahead_naming_the_command() -> None:
    assert _redis_ahead(_Mark(None), []).status == "ok"  # type: ignore[arg-type]
    marked = _redis_ahead(_Mark({"reason": "restored", "detail": "db upgrade --restored",
                                 "since_ms": 1}), [])  # type: ignore[arg-type]
    assert marked.status == "FAIL" and "restored" in marked.detail
    assert "escalation reconcile" in marked.advice
    found = _redis_ahead(_Mark(None), ["a", "b"])  # type: ignore[arg-type]
    assert found.status == "FAIL" and "2 scheduled member(s) ahead" in found.detail
