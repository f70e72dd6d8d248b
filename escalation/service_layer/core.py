"""The collaborators most use cases act on, handed over as one value.

A use case takes its command (one frozen input dataclass, defined beside it) plus the ports
it needs (docs/adr/0028-use-case-commands.md). Four of them travel together through the
firing, enqueue, import and migration paths: the scheduler (Redis), the audit log (the
PostgreSQL ledger and projection), the released ladder versions and the calendars. The
composition root builds a :class:`CorePorts` once per process; tests build one over the
in-memory fakes (tests/fakes.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol, TypeVar

from escalation.domain.calendars import CalendarRegistry
from escalation.ports import AuditLog, LadderSource, Scheduler

A = TypeVar("A")
B = TypeVar("B")
R = TypeVar("R")


class Pipeline(Protocol):
    """How the steps of a batched write overlap. The use case states the steps, in the
    order the business needs them; the edge (bootstrap) decides whether they run one after
    the other (:data:`IN_ORDER`) or overlapped on helper threads
    (``adapters.pipeline.Overlapped``). Either way:

    * ``record(a)`` runs in the caller's thread, once per item of ``source``, in order;
    * ``behind(b)`` runs once ``record`` has returned ``b``, in order, at most one at a time;
    * ``done(b, behind(b))`` runs in the caller's thread, in order, before the ``behind``
      of the item after next starts;
    * each ``b`` is yielded once its ``behind`` has started; the generator ends after every
      ``behind`` and ``done`` ended. An error of any step is raised after the ``behind`` in
      flight ended (its ``done`` then runs best effort, its own errors suppressed).
    """

    def run(self, source: Iterable[A], record: Callable[[A], B], behind: Callable[[B], R],
            done: Callable[[B, R], None]) -> Iterator[B]:
        """Run the steps over ``source`` (see the class docstring)."""
        ...


class InOrder:
    """The :class:`Pipeline` that runs each item's steps one after the other, here."""

    def run(self, source: Iterable[A], record: Callable[[A], B], behind: Callable[[B], R],
            done: Callable[[B, R], None]) -> Iterator[B]:
        """record, behind, done, yield: item by item."""
        for item in source:
            recorded = record(item)
            done(recorded, behind(recorded))
            yield recorded


IN_ORDER = InOrder()
"""Steps one after the other (tests, and any caller the edge gave no other pipeline)."""


class Fanout(Protocol):
    """How the independent calls of one step run: one after the other (:data:`ONE_BY_ONE`)
    or several at once on helper threads (``adapters.pipeline.Threads``), as the edge
    (bootstrap) decides. Either way ``map(fn, items)`` yields ``fn(item)`` for each item,
    in the items' order, reading ``items`` in the caller's thread (a bounded number ahead
    of the results); an error of a call is raised when its result is reached, and the calls
    still under way end before it propagates. The caller's ``fn`` must be safe to run on
    several items at once (e.g. each item one dispute)."""

    def map(self, fn: Callable[[A], R], items: Iterable[A]) -> Iterator[R]:
        """``fn`` of each of ``items``, in order (see the class docstring)."""
        ...


class OneByOne:
    """The :class:`Fanout` that calls ``fn`` on each item in turn, here."""

    def map(self, fn: Callable[[A], R], items: Iterable[A]) -> Iterator[R]:
        """``fn(item)`` for each item, in order, in the caller's thread."""
        for item in items:
            yield fn(item)


ONE_BY_ONE = OneByOne()
"""Calls one after the other (tests, and any caller the edge gave no other fanout)."""

Send = Callable[[object], None]
"""How a helper's job hands one message (a picklable value) back to its caller."""


class HelperProcess(Protocol):
    """Runs a job beside the caller, in a helper process the edge starts (``os.fork``:
    ``adapters.helper_process.ForkedHelper``), so that two cores share a CPU-bound pass.

    ``start(job)`` starts ``job(send)`` in the helper: it sees the caller's memory and open
    files as they were at the call (its own copy: what it changes stays its own, except
    what it writes to a file). The context manager gives the messages ``job`` sends, in
    order; they end when ``job`` has returned. When ``job`` raised, its exception is raised
    after the messages sent before; when the helper ended without either, ``RuntimeError``
    ("the helper process ended without its results"). Leaving the context waits for the
    helper, stopping it first when its messages were not all read (the caller failed).
    Tests use an in-process helper that runs ``job`` at once (tests/fakes.py).
    """

    def start(self, job: Callable[[Send], None]) -> AbstractContextManager[Iterator[object]]:
        """Start ``job`` in the helper; the context gives its messages (class docstring)."""
        ...


@dataclass(frozen=True, slots=True)
class CorePorts:
    """The scheduler, the ledger, the ladder versions and the calendars of one process.

    ``scheduler`` schedules and claims (Redis TIME is its clock); ``store`` records on the
    ledger and reads the projection; ``ladders`` resolves a ladder name (and version) to a
    released :class:`~escalation.domain.ladder.Ladder`; ``calendars`` resolves the calendar
    ids SLA windows count in; ``pipeline`` how a batched write overlaps its steps.
    """

    scheduler: Scheduler
    store: AuditLog
    ladders: LadderSource
    calendars: CalendarRegistry
    pipeline: Pipeline = IN_ORDER
    """How batched writes overlap their PostgreSQL and Redis steps (:class:`Pipeline`)."""
