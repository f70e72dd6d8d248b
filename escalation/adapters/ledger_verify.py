"""``audit verify --all`` in parallel: every ledger partition checked by its own process,
all in one exported snapshot, streamed. By default the evidence (hashes, links, seqs, each
chain's tail against its projection head: :func:`verify_partition_evidence`); with the
projection fold also each projection row against what its chain determines
(:func:`verify_partition`, ``audit verify --all --projection``). ADR 0040.

The whole-ledger walk of :meth:`AuditQueries.verify` is split by partition (a chain never
spans partitions: ADR 0007). The calling connection opens a REPEATABLE READ transaction and
exports its snapshot (``pg_export_snapshot``); each worker process imports it (``SET
TRANSACTION SNAPSHOT``), so every partition is read as of the same instant, and streams its
rows through a server-side cursor (constant memory).

Evidence, in the worker (:func:`verify_partition_evidence`), without sorting the partition:

* every row, in physical order, hashed on its own: ``row_hash`` recomputed on the row's own
  ``prev_hash`` with :func:`~escalation.domain.audit_hash.canonical_bytes` (the one
  renderer, :func:`row_hash_holds`);
* in PostgreSQL: every link (seq 1 on the genesis hash, every later row's predecessor
  present with its ``prev_hash`` as ``row_hash``: a hash join of the partition with itself),
  every chain's row count against its last seq (n rows end at seq n: none missing or
  repeated), and, narrowed to the partition's range of ``created_at``, every chain's last
  row against its projection head;
* every chain one of those flags is read again by index in ``(dispute_id, seq)`` order and
  walked by :func:`first_bad_link` (and its tail compared), so its first bad seq is the
  sorted walk's. A chain nothing flags is one the sorted walk passes, so the broken chains
  are the sorted walk's for any edit (``tests/integration/test_audit_verify_evidence.py``).

With the projection fold, per chain, in the worker (:func:`verify_partition`), streamed in
``(dispute_id, seq)`` order:

* every link is checked as :func:`escalation.domain.audit_hash.verify_chain` checks it (seq
  1, 2, 3, ..., ``prev_hash`` the previous ``row_hash``, ``row_hash`` recomputed with
  :func:`~escalation.domain.audit_hash.canonical_bytes`, the one renderer);
* the chains of a batch fetch their projection rows in one index lookup by dispute id,
  narrowed to the partition's range of ``created_at`` (the chain's partition key is its
  dispute's ``escalation_state.created_at``: docs/audit.md, "Partitions and retention"). The
  chain's last row must be the projection head (``last_seq`` / ``last_hash``), and the
  projection row must be what the chain determines (``domain.projection``, the rules
  ``adapters.projection_scan`` applies; the ledger rows taken are those whose
  ``chain_created_at`` is the projection's ``created_at``, as that scan joins them).

A projection row whose chain is in no partition of its month is found by counting: the
workers (of either walk) count the projection rows they met; when that is not every
projection row in the partitions' ranges, one query names the rows without their chain
(:func:`head_mismatches`).
Projection rows outside every partition's range (a month removed by retention) are compared
as before, by dispute id over the whole ledger.

What travels is what the hash needs, in the form the hash takes: PostgreSQL renders the
instants, the UUID and the amount as the canonical strings of docs/audit.md ("Canonical
bytes": ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` in UTC, lower-case hyphenated UUID, ``numeric(18,2)``
as printed) and ``details`` as JSON text, decoded once; ``canonical_bytes`` (the one renderer,
fed the row in this stored shape: :func:`row_canonical_bytes`) takes a string as it is, so
the bytes hashed are the ones the Python values would give. A rendering that
differed would make a sound row read as broken (never the reverse: different values never
render alike), and ``tests/integration/test_audit_incremental_seal.py`` compares this walk
with the one-scan walk (``test_parallel_verify_all_finds_what_one_scan_finds``).
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from itertools import groupby
from operator import itemgetter
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from escalation.adapters.projection_scan import projection_row, render
from escalation.domain.audit_hash import (
    GENESIS,
    HASHED_FIELDS,
    CanonicalJson,
    decode_canonical_json,
    stored_canonical_bytes,
)
from escalation.domain.errors import InvalidInput
from escalation.domain.projection import LedgerStep, compare_projection

_TIME = "to_char({c} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS {c}"
_NAMES: tuple[str, ...] = (
    "dispute_id", "seq", "event", "match_decision", "from_tier", "to_tier", "ladder",
    "ladder_version", "calendar_version", "materiality", "due_at", "next_due_at",
    "regulatory_deadline", "decided_at", "actor", "trace_id", "source_hash", "external_id",
    "fence_token", "details", "prev_hash", "row_hash",
)
_HASHED = _NAMES[:20]
_STORED = _NAMES[:19]
"""The hashed columns but ``details`` (the last hashed one), in stream-row order."""
if set(_HASHED) != set(HASHED_FIELDS) or _HASHED[-1] != "details":  # pragma: no cover
    raise RuntimeError("ledger_verify: the streamed columns are not the hashed fields")
(_SEQ, _EVENT, _TO_TIER, _LADDER, _LADDER_VERSION, _MATERIALITY, _NEXT_DUE, _REG_DEADLINE,
 _TRACE, _SOURCE_HASH, _EXTERNAL, _DETAILS, _PREV, _HASH) = (
    _NAMES.index(n) for n in (
        "seq", "event", "to_tier", "ladder", "ladder_version", "materiality", "next_due_at",
        "regulatory_deadline", "trace_id", "source_hash", "external_id", "details",
        "prev_hash", "row_hash"))
_CREATED = len(_NAMES)
"""Position of ``chain_created_at`` in a worker's stream row (after the hashed columns)."""


def select_list(prefix: str = "") -> str:
    """The ``SELECT`` list of the hashed columns in canonical form (module doc), each
    column read from ``prefix`` (e.g. ``"a."``)."""
    return ", ".join(
        _TIME.format(c=prefix + n).replace(f" AS {prefix}{n}", f" AS {n}")
        if n in ("due_at", "next_due_at", "regulatory_deadline", "decided_at")
        else f"CAST({prefix}{n} AS text) AS {n}" if n in ("dispute_id", "materiality", "details")
        else f"{prefix}{n} AS {n}"
        for n in _NAMES
    )


_SELECT = select_list()
STREAM_ROWS = 5000
"""Rows per round trip of a worker's server-side cursor."""
SORT_MEMORY = "64MB"
"""``work_mem`` of a worker's scan: its sort by ``(dispute_id, seq)`` stays in memory up to
a partition of about 80,000 rows; a bigger one is sorted on disk (in a temporary file). The
evidence walk's hash joins of a partition with itself stay in memory up to about 500,000
rows (more are joined in batches on disk)."""
LOOKUP_CHAINS = 2000
"""Chains whose projection rows a worker fetches in one index lookup."""
_PARTITIONS = sa.text(
    """
    SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname),
           pg_get_expr(c.relpartbound, c.oid)
      FROM pg_inherits i
      JOIN pg_class c ON c.oid = i.inhrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE i.inhparent = 'escalation_audit'::regclass
     ORDER BY c.relname
    """
)
_PROJECTIONS = """
    SELECT CAST(dispute_id AS text) AS key, dispute_id, status, tier, due_at, materiality,
           ladder, ladder_version, regulatory_deadline, trace_id, source_hash, external_id,
           source, CAST(deadlines AS text) AS deadlines,
           CAST(obligations AS text) AS obligations, last_seq, last_hash, created_at
      FROM escalation_state
     WHERE dispute_id = ANY(CAST(%(ids)s AS uuid[]))
       AND created_at >= CAST(%(lo)s AS timestamptz) AND created_at < CAST(%(hi)s AS timestamptz)
"""
_FACT_EVENTS = frozenset({"ENQUEUED", "ACTION_RECORDED", "RESOLVED", "PURGED"})
_FACT_KEYS = ("deadlines", "clocks", "binding", "member", "source")


@dataclass(slots=True)
class PartitionResult:
    """One partition walked: its broken chains ``(dispute_id, first bad seq)`` (links and
    projection heads), its projection rows that differ from their chain ``(dispute_id,
    differing columns)``, rows and chains read, and the projection rows met (``heads``:
    those of its chains, in its range; None when the partition has no range to narrow
    them by, and its chains' heads were not compared here)."""

    broken: list[tuple[UUID, int]] = field(default_factory=list)
    rows: int = 0
    chains: int = 0
    mismatches: list[tuple[UUID, str]] = field(default_factory=list)
    heads: int | None = None


@dataclass(frozen=True, slots=True)
class LedgerWalk:
    """Every partition walked (:func:`verify_all_chains`): broken chains sorted by dispute
    id text, projection mismatches likewise, rows and chains read, and the projection rows
    met in the partitions' ranges (``covered``: those ranges as a ``tstzmultirange``
    literal, None when no partition has one). ``projection``: whether projection rows were
    compared with their chains (False: ``mismatches`` is empty, nothing was compared)."""

    broken: list[tuple[UUID, int]]
    mismatches: list[tuple[UUID, str]]
    rows: int
    chains: int
    heads: int
    covered: str | None
    projection: bool = True


def decoded(row: Sequence[Any]) -> dict[str, Any]:
    """The fields of one ``select_list`` row as ``verify_chain`` takes them."""
    fields = dict(zip(_NAMES, row, strict=True))
    fields["details"] = _json(fields["details"])
    return fields


def _json(text: str) -> Any:
    """``details`` text decoded exactly: integers at any magnitude (orjson would read one
    beyond 64 bits as a float, which the canonical form refuses: a sound row read as
    broken), a fraction or exponent as a float (which it refuses)."""
    try:
        return decode_canonical_json(text).value
    except InvalidInput:
        import json

        return json.loads(text)


def row_canonical_bytes(row: Sequence[Any], details: CanonicalJson) -> bytes:
    """``domain.audit_hash.canonical_bytes`` of one stream row, through its stored-row form
    (``audit_hash.stored_canonical_bytes``: the same bytes by construction): every hashed
    column but ``details`` arrives as a ``str``, ``int`` or None (``select_list`` renders
    the instants, the UUID and the amount as their canonical text; the rest are text or
    integer columns), ``details`` decoded by ``audit_hash.decode_canonical_json``."""
    return stored_canonical_bytes(dict(zip(_STORED, row, strict=False)), details)


def first_bad_link(rows: Sequence[Sequence[Any]],
                   details: list[Any] | None = None) -> int | None:
    """The seq of the first broken link of one chain (``_SELECT`` tuples in seq order), or
    None: exactly :func:`escalation.domain.audit_hash.verify_chain` on :func:`decoded` rows
    (expected seq, ``prev_hash``, recomputed ``row_hash``; a row with no canonical form is
    broken), on the tuples as they come. ``details`` (optional) receives each row's decoded
    ``details`` (None for a row not reached or not decodable as canonical JSON)."""
    expected_prev = GENESIS
    expected_seq = 1
    sha256 = hashlib.sha256
    for row in rows:
        if row[_SEQ] != expected_seq or row[_PREV] != expected_prev:
            return expected_seq
        try:
            value = decode_canonical_json(row[_DETAILS])
            canonical = row_canonical_bytes(row, value)
        except InvalidInput:
            return expected_seq
        if details is not None:
            details.append(value.value)
        computed = sha256(expected_prev + canonical).digest()
        stored = row[_HASH]
        if stored is None or computed != stored:
            return expected_seq
        expected_prev = bytes(stored)
        expected_seq += 1
    return None


@lru_cache(maxsize=8192)
def _utc_text(value: str | None) -> datetime | None:
    """An instant rendered ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (``_TIME``), aware UTC (cached:
    a chain repeats its deadlines)."""
    return None if value is None else datetime.fromisoformat(value)


@lru_cache(maxsize=1024)
def _amount(value: str) -> Decimal:
    """A ``numeric(18,2)`` as printed, exactly (cached: a chain repeats its amount)."""
    return Decimal(value)


def _strip_nulls(value: Any) -> Any:
    """``jsonb_strip_nulls``: object members whose value is null removed, at every depth
    (array elements kept)."""
    if isinstance(value, dict):
        return {k: _strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip_nulls(v) for v in value]
    return value


def _facts(row: Sequence[Any], details: Any) -> dict[str, Any]:
    """The ``details`` keys the projection fold reads, as ``adapters.projection_scan``'s
    scan builds them (``jsonb_strip_nulls`` of the five keys; only on the events that carry
    them). ``details``: the row's decoded ``details``, or None to decode them here."""
    if row[_EVENT] not in _FACT_EVENTS:
        return {}
    if details is None:
        details = _json(row[_DETAILS])
    if not isinstance(details, dict):
        return {}
    if "null" not in row[_DETAILS]:  # no null anywhere: nothing to strip
        return {k: details[k] for k in _FACT_KEYS if k in details}
    return {k: _strip_nulls(details[k]) for k in _FACT_KEYS if details.get(k) is not None}


def ledger_step(row: Sequence[Any], details: Any = None) -> LedgerStep:
    """The projection fold's view of one stream row (``details`` as for :func:`_facts`)."""
    return LedgerStep(
        seq=int(row[_SEQ]), event=row[_EVENT], to_tier=row[_TO_TIER],
        next_due_at=_utc_text(row[_NEXT_DUE]), regulatory_deadline=_utc_text(row[_REG_DEADLINE]),
        ladder=row[_LADDER], ladder_version=int(row[_LADDER_VERSION]),
        materiality=_amount(row[_MATERIALITY]), trace_id=row[_TRACE],
        source_hash=row[_SOURCE_HASH], external_id=row[_EXTERNAL],
        details=_facts(row, details))


def head_bad_seq(state_seq: int, ledger_seq: int | None) -> int:
    """First seq in doubt when the projection head and the chain's last row disagree."""
    if ledger_seq is None:
        return 1
    if ledger_seq == state_seq:
        return state_seq  # same seq, different hash: the last row was rewritten
    return min(ledger_seq, state_seq) + 1


class _Lookup:
    """A worker's batches of walked chains waiting for their projection rows."""

    def __init__(self, conn: Any, bounds: tuple[str, str], out: PartitionResult) -> None:
        self._conn = conn
        self._bounds = bounds
        self._out = out
        self._chains: list[tuple[str, Sequence[Sequence[Any]], list[Any]]] = []
        self._met = 0

    def add(self, key: str, rows: Sequence[Sequence[Any]], details: list[Any]) -> None:
        """One walked chain: its rows and the decoded ``details`` of those reached."""
        self._chains.append((key, rows, details))
        if len(self._chains) >= LOOKUP_CHAINS:
            self.flush()

    def flush(self) -> None:
        """Fetch the batch's projection rows; compare heads and columns."""
        from psycopg.rows import dict_row

        if not self._chains:
            return
        chains = {key: (rows, details) for key, rows, details in self._chains}
        self._chains = []
        lo, hi = self._bounds
        with self._conn.cursor(row_factory=dict_row) as cur:
            cur.execute(_PROJECTIONS, {"ids": list(chains), "lo": lo, "hi": hi})
            found = cur.fetchall()
        out = self._out
        self._met += len(found)
        out.heads = self._met
        for state in found:
            rows, details = chains[state["key"]]
            tail = rows[-1]
            last_seq, last_hash = int(state["last_seq"]), bytes(state["last_hash"])
            if tail[_SEQ] != last_seq or bytes(tail[_HASH] or b"") != last_hash:
                out.broken.append((state["dispute_id"], head_bad_seq(last_seq, tail[_SEQ])))
            created = state["created_at"]
            steps = [ledger_step(r, details[i] if i < len(details) else None)
                     for i, r in enumerate(rows) if r[_CREATED] == created]
            differences = compare_projection(projection_row(state), steps)
            if differences:
                out.mismatches.append((state["dispute_id"], render(differences)))


_CHAINS = """
    WITH c AS MATERIALIZED (
        SELECT a.dispute_id, count(*) AS n, max(a.seq) AS last,
               min(a.seq) FILTER (WHERE CASE
                   WHEN a.seq = 1 THEN a.prev_hash IS DISTINCT FROM CAST(%(genesis)s AS bytea)
                   ELSE b.row_hash IS DISTINCT FROM a.prev_hash END) AS bad,
               max(s.last_seq) AS last_seq,
               bool_or(a.seq = s.last_seq AND a.row_hash = s.last_hash) AS head
          FROM escalation_audit AS a
          LEFT JOIN escalation_audit AS b
            ON b.dispute_id = a.dispute_id AND b.seq = a.seq - 1 AND {b}
          LEFT JOIN escalation_state AS s
            ON s.dispute_id = a.dispute_id AND {s}
         WHERE {a}
         GROUP BY a.dispute_id)
    SELECT CAST(dispute_id AS text), n, last, bad, last_seq, NULL FROM c
     WHERE bad IS NOT NULL OR n <> last
        OR (last_seq IS NOT NULL AND (last <> last_seq OR NOT head))
    UNION ALL
    SELECT NULL, NULL, NULL, NULL, NULL, ARRAY[count(*), count(last_seq)] FROM c
"""
"""Every chain of the partition in one pass of PostgreSQL (hash joins of the partition with
itself on ``(dispute_id, seq - 1)`` and with its projection rows; no sort):

* ``bad``: its lowest seq whose link is broken: seq 1 not on the genesis hash, or a later
  row whose predecessor is missing or has another ``row_hash`` than its ``prev_hash``;
* ``n`` against ``last``: joined rows against the last seq. With every predecessor present,
  its seqs include 1..last, so ``n == last`` only when each seq is there once;
* its projection row in the partition's range of ``created_at``: its last seq must be
  ``last_seq`` and its row at ``last_seq`` must have ``last_hash`` (the tail of a chain
  whose seqs are 1..n).

The problem chains ``(dispute_id, n, last, bad, last_seq)``, then one row: ``[chains,
projection rows met]``."""
_SUSPECT_ROWS = """
    SELECT {sel} FROM escalation_audit
     WHERE dispute_id = ANY(CAST(%(ids)s AS uuid[])) AND {w}
     ORDER BY escalation_audit.dispute_id, seq
"""
_SUSPECT_HEADS = """
    SELECT CAST(dispute_id AS text), last_seq, last_hash FROM escalation_state
     WHERE dispute_id = ANY(CAST(%(ids)s AS uuid[]))
       AND created_at >= CAST(%(lo)s AS timestamptz) AND created_at < CAST(%(hi)s AS timestamptz)
"""


def row_hash_holds(row: Sequence[Any]) -> bool:
    """One stream row on its own: its ``details`` have a canonical form and
    ``sha256(prev_hash || canonical bytes) == row_hash`` (its own stored ``prev_hash``; that
    this is its predecessor's ``row_hash`` is the link check, :data:`_CHAINS`)."""
    prev, stored = row[_PREV], row[_HASH]
    if prev is None or stored is None:
        return False
    try:
        canonical = row_canonical_bytes(row, decode_canonical_json(row[_DETAILS]))
    except InvalidInput:
        return False
    return bool(hashlib.sha256(prev + canonical).digest() == stored)


def verify_partition_evidence(url: str, snapshot: str, table: str,
                              bounds: tuple[str, str] | None = None) -> PartitionResult:
    """Verify one partition's evidence in the exported ``snapshot`` (a worker process's
    task), without sorting it and without the projection fold (module doc, "Evidence"):

    1. every row streamed in physical order and hashed on its own (:func:`row_hash_holds`);
    2. the links, seq continuity and, with ``bounds``, each chain's tail against its
       projection head in PostgreSQL (:data:`_CHAINS`);
    3. each chain a check flagged (a suspect) read again by index in ``(dispute_id, seq)``
       order and walked by :func:`first_bad_link`, so its first bad seq and its tail are
       the sorted walk's (:func:`verify_partition`).

    A chain nothing flags is one the sorted walk passes: its seqs are 1..n (each row after
    the first has its predecessor, n rows end at seq n), each ``prev_hash`` is the previous
    ``row_hash`` (or the genesis hash at seq 1) and each row hashes to its ``row_hash``.
    """
    import psycopg

    where, params = _where(bounds, table)
    out = PartitionResult()
    suspects: dict[str, int] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        _begin(conn, snapshot)
        out.rows = _stream_row_hashes(conn, where(""), params, suspects)
        heads, out.chains, out.heads = _sql_checks(conn, where, params, bounds, suspects)
        out.broken += [(UUID(key), head_bad_seq(last_seq, last))
                       for key, last_seq, last in heads if key not in suspects]
        if suspects:
            out.broken += _walk_suspects(conn, suspects, where, params, bounds)
        conn.execute("COMMIT")
    return out


def _suspect(suspects: dict[str, int], key: str, seq: int) -> None:
    """Flag chain ``key`` at ``seq`` (the lowest flag of a chain kept)."""
    suspects[key] = min(seq, suspects.get(key, seq))


def _stream_row_hashes(conn: Any, where: str, params: dict[str, str],
                       suspects: dict[str, int]) -> int:
    """Stream the partition in physical order through a server-side cursor, each row
    hashed on its own (:func:`row_hash_holds`), a failing row's chain flagged at its seq;
    returns the rows read."""
    rows = 0
    holds = row_hash_holds
    with conn.cursor(name="verify_partition") as cur:
        cur.itersize = STREAM_ROWS
        cur.execute(f"SELECT {_SELECT} FROM escalation_audit WHERE {where}", params)
        for row in cur:
            rows += 1
            if not holds(row):
                _suspect(suspects, row[0], row[_SEQ])
    return rows


def _sql_checks(conn: Any, where: Callable[[str], str], params: dict[str, str],
                bounds: tuple[str, str] | None, suspects: dict[str, int],
                ) -> tuple[list[tuple[str, int, int]], int, int | None]:
    """The links, seq counts and heads of the partition in PostgreSQL (:data:`_CHAINS`), a
    chain whose links or seqs fail flagged. Returns ``(dispute_id, projection last_seq,
    chain's last seq)`` of the chains whose tail is not their projection head, the chains,
    and the projection rows met (None without ``bounds``: no projection head compared
    here)."""
    heads = ("s.created_at >= CAST(%(lo)s AS timestamptz)"
             " AND s.created_at < CAST(%(hi)s AS timestamptz)" if bounds is not None
             else "false")  # no range to narrow the projection rows by: heads left out
    sql = _CHAINS.format(a=where("a."), b=where("b."), s=heads)
    found: list[tuple[str, int, int]] = []
    chains, met = 0, 0
    for key, n, last, bad, last_seq, counts in conn.execute(
            sql, {**params, "genesis": GENESIS}):
        if key is None:
            chains, met = int(counts[0]), int(counts[1])
            continue
        if bad is not None:
            _suspect(suspects, key, int(bad))
        if n != last:
            _suspect(suspects, key, 1)
        if last_seq is not None:
            found.append((key, int(last_seq), int(last)))
    return found, chains, None if bounds is None else met


def _walk_suspects(conn: Any, suspects: dict[str, int], where: Callable[[str], str],
                   params: dict[str, str], bounds: tuple[str, str] | None,
                   ) -> list[tuple[UUID, int]]:
    """The suspect chains walked in seq order (:func:`first_bad_link`) and, with ``bounds``,
    their tails compared with their projection heads, as :func:`verify_partition` does:
    ``(dispute_id, first bad seq)`` of each. A suspect the walk passed (none should: every
    flag is a link the walk refuses) is reported at the seq flagged, never dropped."""
    found: list[tuple[UUID, int]] = []
    ids = sorted(suspects)
    for start in range(0, len(ids), LOOKUP_CHAINS):
        batch = ids[start:start + LOOKUP_CHAINS]
        state: dict[str, tuple[int, bytes]] = {}
        if bounds is not None:
            for key, last_seq, last_hash in conn.execute(
                    _SUSPECT_HEADS, {"ids": batch, "lo": bounds[0], "hi": bounds[1]}):
                state[key] = (int(last_seq), bytes(last_hash))
        walked: set[str] = set()
        cur = conn.execute(_SUSPECT_ROWS.format(sel=_SELECT, w=where("")),
                           {**params, "ids": batch})
        for key, chain in groupby(cur, key=itemgetter(0)):
            rows = list(chain)
            walked.add(key)
            seqs = [s for s in (first_bad_link(rows),) if s is not None]
            if key in state:
                tail = rows[-1]
                last_seq, last_hash = state[key]
                if tail[_SEQ] != last_seq or bytes(tail[_HASH] or b"") != last_hash:
                    seqs.append(head_bad_seq(last_seq, tail[_SEQ]))
            found.append((UUID(key), min(seqs) if seqs else suspects[key]))
        found += [(UUID(k), suspects[k]) for k in batch if k not in walked]
    return found


def _where(bounds: tuple[str, str] | None,
           table: str) -> tuple[Callable[[str], str], dict[str, str]]:
    """The rows of one partition (``prefix`` -> SQL condition) and its parameters: the range
    of its partition key (the scan pruned to it) or, with no range, its ``tableoid``."""
    if bounds is not None:
        return (lambda p: f"{p}chain_created_at >= CAST(%(lo)s AS timestamptz)"
                          f" AND {p}chain_created_at < CAST(%(hi)s AS timestamptz)",
                {"lo": bounds[0], "hi": bounds[1]})
    return (lambda p: f"{p}tableoid = CAST(%(t)s AS regclass)"), {"t": table}


def _begin(conn: Any, snapshot: str) -> None:
    """A worker's transaction: read only, in the exported snapshot, no parallel workers
    (one process per partition already), ``work_mem`` for its sort or hash joins."""
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    conn.execute(f"SET TRANSACTION SNAPSHOT '{snapshot}'")
    conn.execute("SET LOCAL max_parallel_workers_per_gather = 0")
    conn.execute(f"SET LOCAL work_mem = '{SORT_MEMORY}'")


_BOUND = re.compile(r"^FOR VALUES FROM \((?P<lo>.+)\) TO \((?P<hi>.+)\)$", re.DOTALL)
_LITERAL = re.compile(r"^'((?:[^']|'')*)'$")


def partition_bounds(bound: str | None) -> tuple[str, str] | None:
    """``(from, to)`` of a range partition's ``chain_created_at`` as the server prints them
    (``pg_get_expr`` of its bound, e.g. ``FOR VALUES FROM ('2026-12-01 00:00:00+00') TO
    (...)``: an instant with its offset), or None for any other bound (MINVALUE, DEFAULT)."""
    match = _BOUND.match(bound or "")
    if match is None:
        return None
    lo, hi = (_LITERAL.match(match[k].strip()) for k in ("lo", "hi"))
    if lo is None or hi is None:
        return None
    return lo[1].replace("''", "'"), hi[1].replace("''", "'")


def verify_partition(url: str, snapshot: str, table: str,
                     bounds: tuple[str, str] | None = None) -> PartitionResult:
    """Walk one partition in the exported ``snapshot`` (a worker process's task): every
    chain's links and, with ``bounds``, its projection head and row (module doc).

    The rows are read through the parent ``escalation_audit``, the table the roles that
    verify (``escalation_app``, ``escalation_auditor``, ``escalation_sealer``) may read: its
    partitions are not granted to them. With the partition's ``bounds`` the range on the
    partition key prunes the scan to that one partition; without, ``tableoid`` selects its
    rows (correct, but every partition is scanned) and its chains' projection rows are left
    to the caller (``heads`` None).
    """
    import psycopg

    where, params = _where(bounds, table)
    out = PartitionResult()
    with psycopg.connect(url, autocommit=True) as conn:
        _begin(conn, snapshot)
        lookup = None if bounds is None else _Lookup(conn, bounds, out)
        with conn.cursor(name="verify_partition") as cur:
            cur.itersize = STREAM_ROWS
            cur.execute(f"SELECT {_SELECT}, chain_created_at FROM escalation_audit"
                        f" WHERE {where('')} ORDER BY escalation_audit.dispute_id, seq", params)
            for key, chain in groupby(cur, key=itemgetter(0)):
                rows = list(chain)
                out.chains += 1
                out.rows += len(rows)
                details: list[Any] = []
                bad = first_bad_link(rows, details)
                if bad is not None:
                    out.broken.append((UUID(key), bad))
                if lookup is not None:
                    lookup.add(key, rows, details)
        if lookup is not None:
            lookup.flush()
        conn.execute("COMMIT")
    return out


def _psycopg_url(engine: sa.Engine) -> str:
    """The libpq connection string of ``engine``'s connections, parameters as the engine's
    driver passes them (a URL ``options`` such as ``-c role=...`` included: a worker connects
    with the same identity and role as the parent). Not the rendered URL: libpq reads a
    ``+`` in a URI query as itself, not as the space SQLAlchemy encodes it for."""
    from psycopg.conninfo import make_conninfo

    _, params = engine.dialect.create_connect_args(engine.url)
    kept = {k: v for k, v in params.items()
            if v is not None and isinstance(v, str | int) and not isinstance(v, bool)}
    return make_conninfo("", **kept)


def default_jobs() -> int:
    """Worker processes: the cores this process may use (at least 1, at most 8)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


def _multirange(ranges: Sequence[tuple[str, str]]) -> str | None:
    """A ``tstzmultirange`` literal of ``[from, to)`` ranges (None for none)."""
    if not ranges:
        return None
    return "{" + ",".join(f'["{lo}","{hi}")' for lo, hi in ranges) + "}"


def verify_all_chains(
    conn: sa.Connection, engine: sa.Engine, jobs: int | None = None,
    progress: Callable[[str, int, int | None], None] | None = None,
    projection: bool = True,
) -> LedgerWalk:
    """Walk every partition in ``jobs`` processes, in ``conn``'s snapshot (``conn`` must be
    inside a REPEATABLE READ transaction that stays open until this returns): with
    ``projection``, the sorted walk with the projection fold (:func:`verify_partition`);
    without, the evidence only (:func:`verify_partition_evidence`: the same broken chains,
    no projection row compared, ``mismatches`` empty).

    ``progress("chains", chains so far, None)`` is called as partitions finish (when a
    thousand more chains were checked), and ``("chains", chains, chains)`` at the end.
    The heads of projection rows outside the partitions' ranges, and of those whose chain
    is not in their month's partition, are left to :func:`head_mismatches`.
    """
    tables = [(str(t), partition_bounds(b)) for t, b in conn.execute(_PARTITIONS)]
    snapshot = str(conn.execute(sa.text("SELECT pg_export_snapshot()")).scalar_one())
    url = _psycopg_url(engine)
    n = max(1, min(jobs or default_jobs(), len(tables) or 1))
    total = PartitionResult(heads=0)
    task = verify_partition if projection else verify_partition_evidence

    def add(res: PartitionResult) -> None:
        total.broken += res.broken
        total.mismatches += res.mismatches
        total.rows += res.rows
        before, total.chains = total.chains, total.chains + res.chains
        total.heads = (total.heads or 0) + (res.heads or 0)
        if progress is not None and total.chains // 1000 > before // 1000:
            progress("chains", total.chains, None)

    if n == 1:
        for t, b in tables:
            add(task(url, snapshot, t, b))
    else:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(n, mp_context=ctx) as pool:
            futures = [pool.submit(task, url, snapshot, t, b)
                       for t, b in tables]
            for fut in as_completed(futures):
                add(fut.result())
    if progress is not None:
        progress("chains", total.chains, total.chains)
    return LedgerWalk(sorted(total.broken, key=lambda item: str(item[0])),
                      sorted(total.mismatches, key=lambda item: str(item[0])),
                      total.rows, total.chains, total.heads or 0,
                      _multirange([b for _, b in tables if b is not None]), projection)
