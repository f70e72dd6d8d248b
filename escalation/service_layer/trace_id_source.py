"""New trace ids for requests that bring none: random version-4 UUIDs as 32 lower-case hex
digits (``uuid.uuid4().hex``'s form; RFC 9562, section 5.4).

``uuid.uuid4()`` asks the operating system for 16 random bytes per call; a CSV import of
200,000 rows spent more time in those calls than in hashing its ledger rows. The bytes are
drawn here in blocks of :data:`BLOCK` ids instead (the same source, ``os.urandom``), under a
lock (threads share the block), and the block is discarded in a forked child so parent and
child never hand out the same id.
"""

from __future__ import annotations

import os
import threading

BLOCK = 1_024
"""Ids drawn from the operating system per ``os.urandom`` call."""


class _Block:
    """The current block of random bytes and the position of its next unused id."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.data = b""
        self.pos = 0

    def take(self) -> bytearray:
        """The next 16 unused random bytes (a new block when this one is used up)."""
        with self.lock:
            if self.pos >= len(self.data):
                self.data, self.pos = os.urandom(16 * BLOCK), 0
            raw = bytearray(self.data[self.pos : self.pos + 16])
            self.pos += 16
        return raw

    def forget(self) -> None:
        """Drop the block (in a forked child: its ids are the parent's too)."""
        self.data, self.pos = b"", 0
        self.lock = threading.Lock()


_BLOCK = _Block()
os.register_at_fork(after_in_child=_BLOCK.forget)


def new_trace_id() -> str:
    """A fresh random trace id: 32 hex digits of a version-4, RFC 9562-variant UUID."""
    raw = _BLOCK.take()
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # variant 10xx (RFC 9562)
    return raw.hex()
