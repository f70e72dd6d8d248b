"""Use case helpers for bulk input: validate every request with line numbers, then enqueue."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from escalation.domain.calendars import CalendarRegistry
from escalation.domain.errors import InvalidInput
from escalation.ports import LadderSource, Scheduler
from escalation.service_layer.core import CorePorts
from escalation.service_layer.enqueue import (
    EnqueueMany,
    EnqueueRequest,
    EnqueueResult,
    OnScheduled,
    build_escalation,
    enqueue_many,
)


@dataclass
class BulkResult:
    """Outcome of a bulk enqueue: created / already present, and bad rows (line, message)."""

    created: int = 0
    existing: int = 0
    errors: list[tuple[int, str]] = field(default_factory=list)
    results: list[EnqueueResult] = field(default_factory=list)


def validate_requests(
    requests: Sequence[tuple[int, EnqueueRequest]],
    *,
    scheduler: Scheduler,
    ladders: LadderSource,
    calendars: CalendarRegistry,
    default_ladder: str,
) -> list[tuple[int, str]]:
    """Every (line, message) for requests that would be refused (unknown tier, bad date...).

    Raises:
        LadderError: a ladder named by the requests (or the default) does not exist.
    """
    for name in sorted({req.ladder or default_ladder for _, req in requests}):
        ladders.latest(name)  # an unknown ladder is one error for the file, not one per row
    now = scheduler.time()
    errors: list[tuple[int, str]] = []
    for line, req in requests:
        try:
            build_escalation(req, ladders.latest(req.ladder or default_ladder), calendars, now)
        except InvalidInput as exc:
            errors.append((line, str(exc)))
    return errors


@dataclass(frozen=True, slots=True)
class BulkEnqueue:
    """Enqueue many requests, each known by its line number (the command of
    :func:`bulk_enqueue`).

    ``requests``: ``(line number, request)`` pairs. ``actor``: who enqueues (ledger
    ``actor``). ``default_ladder``: the ladder of a request that names none.
    ``prior_errors``: ``(line, message)`` of lines that did not even parse. ``skip_invalid``:
    enqueue the good ones when some are bad (default: nothing is written then).
    """

    requests: Sequence[tuple[int, EnqueueRequest]]
    actor: str
    default_ladder: str
    prior_errors: Sequence[tuple[int, str]] = ()
    skip_invalid: bool = False


def bulk_enqueue(cmd: BulkEnqueue, ports: CorePorts,
                 on_scheduled: OnScheduled | None = None) -> BulkResult:
    """Validate all, then enqueue the valid ones.

    ``on_scheduled``: as for ``enqueue_many`` (the CLI passes the warnings hook, so imported
    escalations get their pre-breach warnings like enqueued ones).

    With any bad row (including ``prior_errors`` from parsing) and not ``skip_invalid``,
    nothing is written and the result carries only the errors.
    """
    requests = cmd.requests
    errors = list(cmd.prior_errors) + validate_requests(
        requests, scheduler=ports.scheduler, ladders=ports.ladders, calendars=ports.calendars,
        default_ladder=cmd.default_ladder,
    )
    result = BulkResult(errors=sorted(errors))
    if errors and not cmd.skip_invalid:
        return result
    bad = {line for line, _ in errors}
    good = [req for line, req in requests if line not in bad]
    result.results = enqueue_many(EnqueueMany(good, cmd.actor, cmd.default_ladder), ports,
                                  on_scheduled)
    result.created = sum(1 for r in result.results if r.created)
    result.existing = len(result.results) - result.created
    return result
