"""Group commit of single creates (``POST /v1/escalations``) within one worker process.

Each request is validated for JSON types and dispute reference in its own handler, then
handed to the process's :class:`CreateBatcher`. The batcher writes what has queued up with
one ``enqueue_many`` call per token (one Redis TIME, one PostgreSQL transaction, one enqueue
script call, one warnings call) in a dedicated thread, while the event loop keeps reading
requests. There is no timer: a request that finds the batcher idle is written at once (no
added latency at low load); requests arriving while a write is under way form the next
batch, so batches grow with the load (natural batching).

Every request still gets its own answer:

* 201 for the request that created the dispute's escalation, 200 with the recorded state
  for any other request of the same dispute (a batch holds at most one request per
  dispute: a repeat waits for the next batch);
* its own 422 for a bad value (a time that cannot be parsed, an unknown tier, ...): when
  ``enqueue_many`` refuses a batch (it validates every request before writing anything), each
  request is validated on its own with the batch's Redis TIME, the bad ones get their own
  error, and the rest are written; a bad request never fails its neighbours;
* 409 when the dispute's escalation is terminal or cancelled (as ``enqueue_on_breach``);
* a backing-service error (Redis or PostgreSQL down) fails the requests of the batch that met
  it (503), as it would have failed each of them alone.

The ledger rows carry the token's name as actor: a batch holding requests of several tokens
is written with one ``enqueue_many`` per token.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy.exc

from escalation.bootstrap import App, schedule_for, writer_ledger_for
from escalation.domain.errors import ConflictError, InvalidInput, about
from escalation.domain.escalation import ENDED
from escalation.service_layer.core import CorePorts
from escalation.service_layer.enqueue import (
    EnqueueMany,
    EnqueueRequest,
    EnqueueResult,
    build_with_provenance,
    enqueue_many,
)

MAX_BATCH = 500
"""Most single creates written by one ``enqueue_many`` call (``enqueue.ENQUEUE_CHUNK``)."""
WRITERS = 2
"""Batches written at the same time per process: while one waits for its commit, the next
one is written (a write is mostly waiting on PostgreSQL and Redis, not on this process)."""


@dataclass(frozen=True, slots=True)
class Created:
    """A single create's outcome: the result and the Redis TIME of its batch (the instant
    the response's deadline states are judged at)."""

    result: EnqueueResult
    now: datetime


@dataclass(slots=True)
class _Pending:
    request: EnqueueRequest
    actor: str
    future: asyncio.Future[Created]


Outcome = Created | BaseException


class CreateBatcher:
    """Collects the single creates of one event loop and writes them in batches.

    ``submit`` must be awaited on the event loop the batcher is used from; the writes run in
    one dedicated thread (so at most one batch per process is being written at a time, and
    the next one gathers meanwhile). ``close`` stops the thread after the current write.
    """

    def __init__(self, core: App, max_batch: int = MAX_BATCH, writers: int = WRITERS) -> None:
        self._core = core
        self._max = max_batch
        self._hook = schedule_for(core)
        self._queue: list[_Pending] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers = writers
        self._executor = ThreadPoolExecutor(writers, thread_name_prefix="create-batch")
        # the writers' own pool, without a pre-ping round trip per checkout: a batch that
        # meets a dropped connection is written again once (_enqueue)
        self._ledger = writer_ledger_for(core, writers)
        self.batches = 0
        """Batches written so far (tests and diagnostics)."""
        self.largest = 0
        """Most requests written in one batch so far."""

    async def submit(self, request: EnqueueRequest, actor: str) -> Created:
        """Queue one create and wait for its outcome.

        Raises:
            InvalidInput / UnknownTier / LadderError (422): this request's bad value.
            ConflictError (409): the dispute's escalation is terminal or cancelled.
            redis / sqlalchemy errors: a backing service failed during the batch's write.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Created] = loop.create_future()
        self._queue.append(_Pending(request, actor, future))
        if len(self._tasks) < self._writers:
            task = loop.create_task(self._drain())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await future

    async def _drain(self) -> None:
        """One writer: write what is queued, then what queued meanwhile, until none is."""
        loop = asyncio.get_running_loop()
        while self._queue:
            batch, self._queue = _take(self._queue, self._max)
            self.batches += 1
            self.largest = max(self.largest, len(batch))
            try:
                outcomes = await loop.run_in_executor(self._executor, self._write, batch)
            except BaseException as exc:  # handed to every waiter
                outcomes = [exc] * len(batch)
            for item, outcome in zip(batch, outcomes, strict=True):
                if item.future.done():  # the client went away; the write stands
                    continue
                if isinstance(outcome, BaseException):
                    item.future.set_exception(outcome)
                else:
                    item.future.set_result(outcome)

    # ------------------------------------------------------------------ in the write thread
    def _write(self, batch: list[_Pending]) -> list[Outcome]:
        """One Redis TIME for the batch, then one ``enqueue_many`` per actor."""
        try:
            now = self._core.scheduler.time()
        except Exception as exc:  # every request of the batch gets it
            return [exc] * len(batch)
        by_actor: dict[str, list[int]] = {}
        for i, item in enumerate(batch):
            by_actor.setdefault(item.actor, []).append(i)
        outcomes: list[Outcome] = [RuntimeError("not written")] * len(batch)
        for actor, idx in by_actor.items():
            written = self._write_group([batch[i].request for i in idx], actor, now)
            for i, outcome in zip(idx, written, strict=True):
                outcomes[i] = outcome
        return outcomes

    def _enqueue(self, requests: list[EnqueueRequest], actor: str,
                 now: datetime) -> list[EnqueueResult]:
        """``enqueue_many``; once more on a fresh connection when the pooled one had been
        dropped (server restart, idle timeout). The retry is safe: ``enqueue_many`` is
        idempotent per dispute (a batch whose commit went through but whose reply was lost
        answers 200 instead of 201 on the retry)."""
        c = self._core
        for attempt in (1, 2):
            try:
                return enqueue_many(
                    EnqueueMany(requests=requests, actor=actor,
                                default_ladder=c.settings.default_ladder, now=now),
                    CorePorts(c.scheduler, self._ledger.store, c.ladders, c.calendars),
                    self._hook,
                )
            except sqlalchemy.exc.DBAPIError as exc:
                if attempt == 2 or not exc.connection_invalidated:
                    raise
        raise AssertionError("unreachable")

    def _write_group(self, requests: list[EnqueueRequest], actor: str,
                     now: datetime) -> list[Outcome]:
        try:
            return [_answer(r, now) for r in self._enqueue(requests, actor, now)]
        except InvalidInput as exc:
            if len(requests) == 1:
                return [exc]
        except Exception as exc:  # a backing service failed: all of them
            return [exc] * len(requests)
        # At least one request is bad and nothing was written: judge each one on its own
        # (with the batch's clock), answer the bad ones, write the others.
        checks = [self._check(r, now) for r in requests]
        good = [r for r, err in zip(requests, checks, strict=True) if err is None]
        written: list[Outcome] = []
        if good:
            try:
                written = [_answer(r, now) for r in self._enqueue(good, actor, now)]
            except InvalidInput:  # not foreseen by _check: fall back to one by one
                written = [self._write_one(r, actor, now) for r in good]
            except Exception as exc:
                written = [exc] * len(good)
        it = iter(written)
        return [err if err is not None else next(it) for err in checks]

    def _write_one(self, request: EnqueueRequest, actor: str, now: datetime) -> Outcome:
        try:
            return _answer(self._enqueue([request], actor, now)[0], now)
        except Exception as exc:  # this request's own error
            return exc

    def _check(self, request: EnqueueRequest, now: datetime) -> InvalidInput | None:
        """The error ``enqueue_many([request])`` would raise while validating, or None."""
        c = self._core
        try:
            with about("ladder"):
                ladder = c.ladders.latest(request.ladder or c.settings.default_ladder)
            build_with_provenance(request, ladder, c.calendars, now)
        except InvalidInput as exc:
            return exc
        return None

    def close(self) -> None:
        """Stop the write threads (after the writes under way, if any); close the pool."""
        self._executor.shutdown(wait=True)
        self._ledger.close()


def _take(queue: list[_Pending], most: int) -> tuple[list[_Pending], list[_Pending]]:
    """``(batch, rest)``: up to ``most`` queued requests in order, at most one per dispute.

    A later request for a dispute already in the batch waits for the next batch: each
    single create is then its own replay of what the earlier one recorded (``enqueue_many``
    would answer a repeat within one call from the recorded state too; keeping them apart
    also keeps one request's validation error from being shared by another's write).
    """
    batch: list[_Pending] = []
    rest: list[_Pending] = []
    disputes: set[object] = set()
    for item in queue:
        did = item.request.dispute_id
        if len(batch) < most and did not in disputes:
            batch.append(item)
            disputes.add(did)
        else:
            rest.append(item)
    return batch, rest


def _answer(result: EnqueueResult, now: datetime) -> Outcome:
    """As ``enqueue_on_breach``: a terminal or cancelled escalation is a conflict."""
    if not result.created and result.status in ENDED:
        return ConflictError(
            f"dispute {result.escalation.dispute_id} already has a {result.status.value} "
            "escalation; nothing changed"
        )
    return Created(result, now)
