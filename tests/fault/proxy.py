"""A small TCP proxy for fault injection of network faults (Toxiproxy is not available as
a Python package, so a ~100-line asyncio proxy stands in).

It runs its own asyncio loop in a daemon thread and forwards ``127.0.0.1:<port>`` to an
upstream ``host:port``. Knobs, callable from the test thread at any time:

- ``latency_s``: added before each chunk is forwarded, in both directions (seconds);
- ``drop_all()``: close (RST) every open client and upstream connection now;
- ``refuse``: while True, new connections are accepted and closed at once (a reset);
- ``blackhole``: while True, bytes are silently dropped in both directions (no reset, no
  FIN: packets lost on a silent network). A connection accepted during the black hole never
  reaches the upstream (like a SYN that got no answer); open ones forward again once it ends.

Counters: ``connections`` (accepted so far), ``dropped`` (closed by ``drop_all``),
``swallowed`` (chunks dropped by the black hole).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Coroutine
from typing import Any

_CHUNK = 65536


class TcpProxy:
    """Forward a loopback port to ``upstream_host:upstream_port`` with injectable faults.

    Usage::

        proxy = TcpProxy("127.0.0.1", 6379); proxy.start()
        url = f"redis://127.0.0.1:{proxy.port}/9"
        proxy.latency_s = 0.03; proxy.drop_all(); proxy.stop()
    """

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.latency_s = 0.0
        self.refuse = False
        self.blackhole = False
        self.swallowed = 0
        self.connections = 0
        self.dropped = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="tcp-proxy")
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    # ----------------------------------------------------------------- control (any thread)

    def start(self) -> None:
        """Start the loop thread and listen on a free loopback port (``self.port``)."""
        self._thread.start()
        self._call(self._listen())

    def stop(self) -> None:
        """Close everything, stop the loop thread and close the loop (an event loop left
        open holds its selector and self-pipe sockets until the garbage collector finds it,
        which then warns ``unclosed event loop`` inside whichever test runs at that time)."""
        if self._loop.is_closed():
            return
        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                self._call(self._shutdown())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            if self._thread.is_alive():
                raise RuntimeError("tcp-proxy loop thread did not stop within 5 s")
        self._loop.close()

    def drop_all(self) -> int:
        """Reset every open connection (both sides); returns how many sockets were closed."""
        return int(self._call(self._drop()))

    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    # ----------------------------------------------------------------- loop side

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._drop()
        # the connection handlers still running (a black-holed read, a pipe, a connect to
        # the upstream): cancelled and awaited, or closing the loop would leave them pending
        # ("Task was destroyed but it is pending") with their sockets open
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in others:
            t.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        # a closed transport closes its socket in a callback of the next loop iterations
        for _ in range(3):
            await asyncio.sleep(0)

    async def _drop(self) -> int:
        n = 0
        for w in list(self._writers):
            _reset(w)
            n += 1
        self._writers.clear()
        self.dropped += n
        return n

    async def _handle(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self._serve(c_reader, c_writer)
        except asyncio.CancelledError:
            # only _shutdown cancels; returning normally spares Python 3.11's start_server
            # callback, which calls task.exception() on a cancelled task and logs the
            # CancelledError as "Exception in callback"
            pass
        finally:
            self._writers.discard(c_writer)
            _reset(c_writer)

    async def _serve(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        if self.refuse:
            return
        if self.blackhole:
            self._writers.add(c_writer)
            with contextlib.suppress(Exception):
                while await c_reader.read(_CHUNK):
                    self.swallowed += 1
            return
        try:
            u_reader, u_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            return
        self._writers |= {c_writer, u_writer}
        try:
            await asyncio.gather(self._pipe(c_reader, u_writer), self._pipe(u_reader, c_writer),
                                 return_exceptions=True)
        finally:
            self._writers.discard(u_writer)
            _reset(u_writer)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(_CHUNK):
                if self.blackhole:
                    self.swallowed += 1
                    continue
                if self.latency_s > 0:
                    await asyncio.sleep(self.latency_s)
                writer.write(data)
                await writer.drain()
        finally:
            _reset(writer)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0), like a dropped network path, not a polite FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(Exception):
        writer.close()
