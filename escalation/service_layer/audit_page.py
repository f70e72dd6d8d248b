"""Audit search in pages: keyset (cursor) pagination over the ledger.

Rows are ordered by ``(decided_at, dispute_id, seq)`` -- the order of ``audit search`` --
and a page ends with an opaque cursor, the URL-safe base64 of that key of its last row. The
next page starts strictly after it, so rows appended meanwhile never shift a page and no row
is returned twice. Filters are ``ports.AuditFilter`` (the CLI's ``audit search``).
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from uuid import UUID

from escalation.domain.errors import InvalidInput, InvalidParameter
from escalation.domain.escalation import check_instant, parse_dispute_id
from escalation.ports import AuditFilter, LedgerRow, LedgerSearch

MAX_LIMIT = 1000


def encode_cursor(row: LedgerRow) -> str:
    """The cursor after ``row``."""
    key = [row.decided_at.isoformat(), str(row.dispute_id), row.seq]
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, UUID, int]:
    """(decided_at, dispute id, seq) of a cursor. Raises InvalidInput for a malformed one."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, did, seq = json.loads(raw)
        if not isinstance(seq, int) or isinstance(seq, bool) or not isinstance(at, str):
            raise ValueError(seq)
        return check_instant(datetime.fromisoformat(at), "cursor"), parse_dispute_id(did), seq
    except (ValueError, TypeError, binascii.Error, InvalidInput, UnicodeDecodeError):
        raise InvalidParameter("{cursor} is malformed; pass back next_cursor unchanged",
                               "cursor") from None


def search_page(
    ledger: LedgerSearch, flt: AuditFilter, limit: int = 100, cursor: str | None = None
) -> tuple[list[LedgerRow], str | None]:
    """One page of ledger rows matching ``flt`` and the cursor of the next (None = last page).

    Raises:
        InvalidInput: ``limit`` outside 1-1000, a malformed cursor, a naive time.
    """
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidParameter("{limit} must be 1-{top}, got {got}", "limit", top=MAX_LIMIT,
                               got=limit)
    after = decode_cursor(cursor) if cursor is not None else None
    rows = ledger.search(flt, limit + 1, after=after)
    if len(rows) > limit:
        return rows[:limit], encode_cursor(rows[limit - 1])
    return rows, None
