"""``ForkedHelper``: the :class:`~escalation.service_layer.core.HelperProcess` that runs a
job in one ``os.fork`` child (the CSV import's two-process pass 1: ADR 0008).

The child runs ``job(send)``; each message travels through a one-way pipe (pickled), then a
``("done", None)`` or, when the job raised, ``("error", exc)``. The caller reads them
through the context manager :meth:`ForkedHelper.start` gives.

Fork safety: the child touches no connection its parent opened unless the job does. A
PostgreSQL engine made by ``db.make_engine`` discards, in a child, every pooled connection of
its parent without closing it (a query opens a new one); Redis pools reconnect in a child by
themselves. The child ends with ``os._exit`` (no exit handler of the parent runs twice) and
is waited for, or killed and waited for if the parent fails first.

While the child lives, the objects that exist at the fork are left out of the garbage
collector's passes in both processes (``gc.freeze``, its documented use before a fork): a
full collection writes into every tracked object, which would give each process its own copy
of every page they share (measured on the import: the child's private memory grew from 12 to
50 MiB at the parent's first full collection).
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
from collections.abc import Callable, Iterator
from multiprocessing import Pipe
from multiprocessing.connection import Connection

ENDED = "the helper process ended without its results"
"""The ``RuntimeError`` message of a child that ended without ``done`` or an error."""


class ForkedHelper:
    """Runs a job in one forked child process (module docstring); one job at a time."""

    @contextlib.contextmanager
    def start(self, job: Callable[[Callable[[object], None]], None]) -> Iterator[Iterator[object]]:
        """Fork, run ``job(send)`` in the child, give its messages to the caller.

        Raises:
            OSError: the fork failed. RuntimeError: the child ended without its results
                (while the messages are read). Whatever ``job`` raised in the child (pickled
                back), while the messages are read.
        """
        receive, send = Pipe(duplex=False)
        frozen_before = gc.get_freeze_count()  # a caller's own frozen objects stay frozen
        gc.freeze()
        try:
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child's coverage is not collected
                receive.close()
                _child(job, send)
            send.close()
            messages = _Messages(receive)
            try:
                yield messages
            except BaseException:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                raise
            else:
                if not messages.ended:  # the caller stopped reading: stop the child
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            finally:
                receive.close()
                os.waitpid(pid, 0)
        finally:
            if frozen_before == 0:
                gc.unfreeze()


class _Messages:
    """The child's messages as an iterator; ``ended`` once its ``done`` or error arrived."""

    def __init__(self, receive: Connection) -> None:
        self._receive = receive
        self.ended = False

    def __iter__(self) -> Iterator[object]:
        return self

    def __next__(self) -> object:
        if self.ended:
            raise StopIteration
        try:
            kind, payload = self._receive.recv()
        except EOFError:
            self.ended = True
            raise RuntimeError(ENDED) from None
        if kind == "message":
            return payload
        self.ended = True
        if kind == "error":
            raise payload
        raise StopIteration


def _child(job: Callable[[Callable[[object], None]], None], send: Connection) -> None:
    """The child: run ``job``, then send ``("done", None)``, or ``("error", exc)`` when it
    raised. Never returns (``os._exit``: 0, or 1 after an exception)."""
    code = 0
    try:
        job(lambda message: send.send(("message", message)))
        send.send(("done", None))
    except BaseException as exc:  # every failure goes to the parent
        code = 1
        with contextlib.suppress(BaseException):  # else the parent sees EOF
            send.send(("error", exc))
    finally:
        os._exit(code)
