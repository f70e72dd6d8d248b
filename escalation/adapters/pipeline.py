"""``Overlapped``: the :class:`~escalation.service_layer.core.Pipeline` that overlaps the
two servers' waits of a batched write on helper threads.

A batched write (enqueue, import pass 2, ladder apply) records batch k in PostgreSQL, then
writes it to Redis. Here the Redis step of batch k (``behind``) runs on one helper thread
while the caller records batch k+1, and with ``read_ahead`` a second helper thread reads and
prepares batch k+1 (``source``) while the caller records batch k. The last batch's Redis
step runs in the caller's thread. The use cases state the steps and their order; which
pipeline they run under is the composition root's choice (``bootstrap``).
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar, cast

A = TypeVar("A")
B = TypeVar("B")
R = TypeVar("R")
_END = object()


class Overlapped:
    """Steps of consecutive batches overlapped on helper threads (one ``behind`` step in
    flight; with ``read_ahead`` the next item of ``source`` is computed meanwhile)."""

    def __init__(self, name: str, *, read_ahead: bool = False) -> None:
        """``name``: prefix of the helper threads' names; ``read_ahead``: compute the next
        item of ``source`` on a helper thread while the caller records this one (``source``
        is then advanced by one thread at a time, never by two at once)."""
        self.name = name
        self.read_ahead = read_ahead

    def run(self, source: Iterable[A], record: Callable[[A], B], behind: Callable[[B], R],
            done: Callable[[B, R], None]) -> Iterator[B]:
        """See :class:`~escalation.service_layer.core.Pipeline`."""
        workers = 2 if self.read_ahead else 1
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=self.name) as pool:
            items = _read_ahead(pool, iter(source)) if self.read_ahead else iter(source)
            flight: tuple[B, Future[R]] | None = None
            try:
                current: object = next(items, _END)
                while current is not _END:
                    if flight is not None and flight[1].done():  # finished meanwhile
                        job, flight = flight, None
                        done(job[0], job[1].result())
                    recorded = record(cast(A, current))
                    if flight is not None:  # one behind step in flight at most
                        job, flight = flight, None
                        done(job[0], job[1].result())
                    # read after the wait: two batches in memory, not three
                    following: object = next(items, _END)
                    if following is _END:  # the last one: here and now
                        done(recorded, behind(recorded))
                    else:
                        flight = (recorded, pool.submit(behind, recorded))
                    yield recorded
                    current = following
            except BaseException:
                _settle(flight, done)
                raise


def _settle(flight: tuple[B, Future[R]] | None, done: Callable[[B, R], None]) -> None:
    """On failure: wait for the step in flight and run its ``done`` (best effort: the
    caller re-raises the original error, which is the one to report)."""
    if flight is None:
        return
    with contextlib.suppress(Exception):
        done(flight[0], flight[1].result())


def _read_ahead(pool: ThreadPoolExecutor, items: Iterator[A]) -> Iterator[A]:
    """Yield ``items``, computing the next one on ``pool`` while the caller uses this one
    (one future in flight: ``items`` is advanced by one thread at a time)."""
    ahead: Future[object] = pool.submit(next, items, _END)
    while True:
        item = ahead.result()
        if item is _END:
            return
        ahead = pool.submit(next, items, _END)
        yield cast(A, item)


class Threads:
    """The :class:`~escalation.service_layer.core.Fanout` that runs up to ``threads`` calls
    at once on helper threads (for calls that wait on PostgreSQL and Redis round trips:
    the threads overlap the waits)."""

    def __init__(self, threads: int, name: str, *, ahead: int | None = None) -> None:
        """``threads``: calls at once (at least 1); ``name``: prefix of the threads' names;
        ``ahead``: items submitted before their results are read (default 8 per thread)."""
        self.threads = max(1, threads)
        self.name = name
        self.ahead = max(self.threads, ahead if ahead is not None else 8 * self.threads)

    def map(self, fn: Callable[[A], R], items: Iterable[A]) -> Iterator[R]:
        """See :class:`~escalation.service_layer.core.Fanout`: ``fn`` of each item, in
        order, at most ``ahead`` items submitted and not yet read back."""
        with ThreadPoolExecutor(max_workers=self.threads,
                                thread_name_prefix=self.name) as pool:
            yield from _map_on(pool, fn, items, self.ahead)


class KeptThreads:
    """The :class:`~escalation.service_layer.core.Fanout` of a long-running consumer: like
    :class:`Threads` (up to ``threads`` calls at once, results in the items' order), but its
    helper threads are started once and kept from one ``map`` to the next, so that a loop
    of short steps does not start and stop them each time. The owner calls :meth:`close`.
    """

    def __init__(self, threads: int, name: str) -> None:
        """``threads``: calls at once (at least 1); ``name``: prefix of the threads' names.
        At most ``8 * threads`` items are submitted and not yet read back."""
        self.threads = max(1, threads)
        self.name = name
        self._pool: ThreadPoolExecutor | None = None

    def map(self, fn: Callable[[A], R], items: Iterable[A]) -> Iterator[R]:
        """See :class:`~escalation.service_layer.core.Fanout` (one ``map`` at a time)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.threads,
                                            thread_name_prefix=self.name)
        return _map_on(self._pool, fn, items, 8 * self.threads)

    def close(self) -> None:
        """Wait for the calls under way and stop the threads (idempotent; a later ``map``
        starts them again)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _map_on(pool: ThreadPoolExecutor, fn: Callable[[A], R], items: Iterable[A],
            ahead: int) -> Iterator[R]:
    """``fn`` of each item on ``pool``, in order, at most ``ahead`` submitted and not yet
    read back; an error or an abandoned map cancels the calls not started."""
    flight: deque[Future[R]] = deque()
    try:
        for item in items:
            flight.append(pool.submit(fn, item))
            if len(flight) >= ahead:
                yield flight.popleft().result()
        while flight:
            yield flight.popleft().result()
    finally:  # an error or an abandoned map: the calls not started never start
        for fut in flight:
            fut.cancel()
