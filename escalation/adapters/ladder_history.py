"""PostgreSQL side of ladder releases and migrations: the ``ladder_history`` table, the pending
escalations of one ladder, and the one-transaction-per-batch migration write.

* :meth:`LadderHistoryStore.migrate_batch` locks the batch's projection rows (sorted by
  dispute id, like every lock in the audit store, so it cannot deadlock with workers), checks
  each row's ``last_seq`` against the planned one (a worker decision in between makes the item
  re-planned from the locked state, never overwritten), appends one chained
  ``LADDER_MIGRATED`` ledger row per escalation, updates the projection (ladder_version,
  tier, due_at) and advances the run's counters and resume point -- all in ONE transaction.
* ``ladder_history`` rows are the Flyway-style record: checksum of the applied file, plan
  hash, who and why, when, counts, status running|done|failed.
* ``ladder_release`` rows say which versions are live: the checksum of each file as
  released, who released it and why (docs/adr/0004-ladder-release.md).
* Each release, baseline release and ended apply run is also a row on the version's own
  ledger chain (LADDER_RELEASED / LADDER_BASELINE / LADDER_APPLIED / LADDER_APPLY_FAILED),
  appended in the same transaction; the chain head is on the version's ``ladder_release``
  row, locked for the append (docs/adr/0012-ladder-events-on-the-ledger.md).
"""

from __future__ import annotations

import threading
from collections import ChainMap, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg

from escalation.adapters.audit_store import (
    RowFacts,
    chained_row,
    escalation_from_state,
    utc,
    utc_opt,
)
from escalation.adapters.audit_store import array_literal as _array_literal
from escalation.adapters.audit_store import copy_ledger as _copy_ledger
from escalation.adapters.tables import (
    escalation_audit,
    escalation_state,
    ladder_history,
    ladder_release,
)
from escalation.domain.audit_hash import GENESIS
from escalation.domain.errors import ConflictError, NotFound
from escalation.domain.escalation import Escalation, Status
from escalation.domain.ladder_ledger import LadderEvent, ReleaseEvent, ladder_chain_id, run_event
from escalation.domain.ladder_plan import PlanItem
from escalation.domain.migration_rule import OPEN, Checked, LockedHead, check_batch
from escalation.ports import (
    ALL_OPEN,
    BatchResult,
    HistoryRow,
    MigrationBatch,
    NewRelease,
    NewRun,
    OpenFilter,
    Page,
    ReleaseRow,
    Replan,
)

__all__ = ["BatchResult", "HistoryRow", "LadderHistoryStore", "Page", "ReleaseRow", "Replan"]

_S = escalation_state
_H = ladder_history
_R = ladder_release
_A = escalation_audit
_UUIDS = pg.ARRAY(pg.UUID(as_uuid=True))
_OPEN = tuple(sorted(s.value for s in OPEN))  # the statuses a migration moves
MAX_PAGE = 10_000

# One statement moves every migrated projection row of a batch (arrays as text literals,
# like audit_store._BULK_UPDATE): per-row UPDATEs were ~70% of apply time (py-spy).
_MIGRATE_STATES = sa.text(
    """
    UPDATE escalation_state AS s
       SET ladder_version = v.ladder_version, tier = v.tier, due_at = v.due_at,
           last_seq = v.last_seq, last_hash = decode(v.last_hash, 'hex'),
           updated_at = clock_timestamp()
      FROM unnest(CAST(CAST(:ids AS text) AS uuid[]),
                  CAST(CAST(:versions AS text) AS integer[]),
                  CAST(CAST(:tiers AS text) AS text[]),
                  CAST(CAST(:due AS text) AS timestamptz[]),
                  CAST(CAST(:seqs AS text) AS bigint[]),
                  CAST(CAST(:hashes AS text) AS text[]))
           AS v(dispute_id, ladder_version, tier, due_at, last_seq, last_hash)
     WHERE s.dispute_id = v.dispute_id
    """
)

"""Re-plan one escalation from its locked current state -> (item, resolved due) or Blocked."""


def _release_row(r: Mapping[Any, Any], first: Mapping[str, Any] | None = None) -> ReleaseRow:
    """A ``ladder_release`` row as :class:`ReleaseRow`; ``first``: the ``event`` and
    ``row_hash`` of its chain's seq 1, when the release is on the ledger."""
    ledger = None
    if first is not None and r.get("chain_id") is not None:
        ledger = ReleaseEvent(ladder=r["ladder"], version=int(r["version"]),
                              event=LadderEvent(first["event"]), chain_id=r["chain_id"], seq=1,
                              row_hash=bytes(first["row_hash"]).hex(),
                              released_by=r["released_by"], released_at=utc(r["released_at"]))
    return ReleaseRow(ladder=r["ladder"], version=int(r["version"]), checksum=r["checksum"],
                      released_at=utc(r["released_at"]), released_by=r["released_by"],
                      reason=r["reason"], ledger=ledger)


# The release rows with the event and hash of their chain's seq 1 (the release event).
_RELEASES = (
    sa.select(_R, _A.c.event.label("first_event"), _A.c.row_hash.label("first_hash"))
    .select_from(_R.outerjoin(_A, sa.and_(
        _A.c.dispute_id == _R.c.chain_id, _A.c.seq == 1,
        _A.c.chain_created_at == _R.c.chain_created_at,
        _A.c.event.in_((LadderEvent.RELEASED.value, LadderEvent.BASELINE.value)))))
    .order_by(_R.c.ladder, _R.c.version)
)


def _release_of(r: Mapping[Any, Any]) -> ReleaseRow:
    first = (None if r["first_event"] is None
             else {"event": r["first_event"], "row_hash": r["first_hash"]})
    return _release_row(r, first)


@dataclass(frozen=True, slots=True)
class _Stamp:
    """Who wrote a ledger row of this store, when (aware), and the row's details."""

    actor: str
    decided_at: datetime
    details: Mapping[str, Any]


def _append_event(
    conn: sa.Connection, head: Mapping[Any, Any], event: LadderEvent, stamp: _Stamp,
) -> dict[str, Any]:
    """Append ``event`` to the chain of the ``ladder_release`` row ``head`` (locked by the
    caller, or inserted in this transaction) and move the head; returns the ledger row.

    A version released before ladder events were ledger rows has no chain yet: this row
    starts it (seq 1), with ``chain_created_at`` = the database's clock now.
    """
    chain_id = head["chain_id"]
    created = head["chain_created_at"]
    if chain_id is None:
        chain_id = ladder_chain_id(head["ladder"], int(head["version"]))
        created = conn.execute(sa.select(sa.func.clock_timestamp())).scalar_one()
    state = {
        "dispute_id": chain_id, "last_seq": head["last_seq"] or 0,
        "last_hash": head["last_hash"] or GENESIS, "ladder": head["ladder"],
        "ladder_version": int(head["version"]), "materiality": Decimal("0.00"),
        "regulatory_deadline": None, "trace_id": "", "source_hash": head["checksum"],
        "external_id": None, "created_at": created,
    }
    row = chained_row(state, RowFacts(
        event=event.value, match_decision=event.value, actor=stamp.actor,
        decided_at=stamp.decided_at, from_tier=None, to_tier=None, due_at=None,
        next_due_at=None, details=stamp.details))
    _copy_ledger(conn, [row])
    conn.execute(
        sa.update(_R).where(_R.c.ladder == head["ladder"], _R.c.version == head["version"])
        .values(chain_id=chain_id, last_seq=row["seq"], last_hash=row["row_hash"],
                chain_created_at=created))
    return row


def _insert_release(
    conn: sa.Connection, event: LadderEvent, values: Mapping[str, Any],
) -> ReleaseRow | None:
    """Insert a ``ladder_release`` row and its release event (seq 1 of the version's chain);
    None when the version already has a release row."""
    new = conn.execute(
        pg.insert(_R).values(**values).on_conflict_do_nothing().returning(*_R.c)
    ).mappings().first()
    if new is None:
        return None
    row = _append_event(conn, new, event, _Stamp(
        values["released_by"], values["released_at"],
        {"reason": values["reason"], "checksum": values["checksum"]}))
    head = {**new, "chain_id": row["dispute_id"], "chain_created_at": row["chain_created_at"]}
    return _release_row(head, row)


def _row(r: Mapping[Any, Any]) -> HistoryRow:
    return HistoryRow(**{
        **dict(r),
        "started_at": utc(r["started_at"]),
        "finished_at": utc_opt(r["finished_at"]),
    })


class LadderHistoryStore:
    """``ladder_history`` and the migration writes (PostgreSQL); implements
    ``escalation.ports.LadderHistory``.

    Args:
        engine: a psycopg 3 engine on a database at the Alembic head.
    """

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine
        self._served = _ServedPages()
        self._notes: dict[int, tuple[UUID, int]] = {}
        self._notes_lock = threading.Lock()

    def _take_note(self, run_id: int) -> tuple[UUID, int] | None:
        """The Redis resume point noted for ``run_id`` since its last write (and forget it)."""
        with self._notes_lock:
            return self._notes.pop(run_id, None)

    # ------------------------------------------------------------------ releases
    def releases(self, ladder: str | None = None) -> dict[tuple[str, int], ReleaseRow]:
        """Every released version (optionally of one ladder) by ``(ladder, version)``."""
        stmt = _RELEASES
        if ladder is not None:
            stmt = stmt.where(_R.c.ladder == ladder)
        with self._engine.connect() as conn:
            return {(r["ladder"], r["version"]): _release_of(r)
                    for r in conn.execute(stmt).mappings()}

    def released_checksums(self) -> dict[tuple[str, int], str]:
        """``(ladder, version) -> checksum`` of every released version."""
        with self._engine.connect() as conn:
            return {(r.ladder, r.version): r.checksum
                    for r in conn.execute(sa.select(_R.c.ladder, _R.c.version, _R.c.checksum))}

    def release(self, rel: NewRelease) -> tuple[ReleaseRow, bool]:
        """Record ``ladder@version`` as released with ``checksum``.

        Returns:
            ``(row, True)`` when released now; ``(existing row, False)`` when it already was,
            with the same checksum (a repeated release is a no-op).

        Raises:
            ConflictError: it was released with a different checksum (the file was edited
                after release: a released file is never edited, add a new version instead).
        """
        ladder, version, checksum = rel.ladder, rel.version, rel.checksum
        released_by, reason, released_at = rel.released_by, rel.reason, rel.released_at
        values = {"ladder": ladder, "version": version, "checksum": checksum,
                  "released_by": released_by, "reason": reason, "released_at": released_at}
        with self._engine.begin() as conn:
            new = _insert_release(conn, LadderEvent.RELEASED, values)
            if new is not None:
                return new, True
            old = conn.execute(
                _RELEASES.where(_R.c.ladder == ladder, _R.c.version == version)
            ).mappings().one()
        row = _release_of(old)
        if row.checksum != checksum:
            raise ConflictError(
                f"{ladder}@{version} was released with checksum {row.checksum[:12]} but the "
                f"file now has {checksum[:12]}: a released file is never edited; restore it "
                f"and put the change in a new version")
        return row, False

    def baseline(
        self, files: Mapping[str, Sequence[tuple[int, str]]], *, released_by: str, reason: str,
        released_at: datetime,
    ) -> list[ReleaseRow]:
        """Release ``files`` (ladder -> ``[(version, checksum)]``) of the ladders that have no
        release at all yet, in one transaction (an advisory lock serialises concurrent first
        uses; a ladder with any release is left alone). Returns the rows inserted."""
        if not files:
            return []
        out: list[ReleaseRow] = []
        with self._engine.begin() as conn:
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext('ladder_release'))"))
            known = set(conn.execute(sa.select(_R.c.ladder).distinct()).scalars())
            for name, versions in sorted(files.items()):
                if name in known:
                    continue
                for version, checksum in versions:
                    row = _insert_release(conn, LadderEvent.BASELINE, {
                        "ladder": name, "version": version, "checksum": checksum,
                        "released_by": released_by, "reason": reason,
                        "released_at": released_at})
                    if row is not None:
                        out.append(row)
        return out

    # ------------------------------------------------------------------ history
    def applied_checksums(self) -> dict[tuple[str, int], str]:
        """``(ladder, version) -> checksum`` of every released version and of every apply
        run that is running or done (a release wins over a run; the latest run wins)."""
        stmt = (
            sa.select(_H.c.ladder, _H.c.version, _H.c.checksum)
            .where(_H.c.status.in_(("running", "done")))
            .order_by(_H.c.run_id)
        )
        with self._engine.connect() as conn:
            runs = {(r.ladder, r.version): r.checksum for r in conn.execute(stmt)}
        return {**runs, **self.released_checksums()}

    def history(self, ladder: str | None = None) -> list[HistoryRow]:
        """Every run (optionally of one ladder), oldest first."""
        stmt = sa.select(_H).order_by(_H.c.run_id)
        if ladder is not None:
            stmt = stmt.where(_H.c.ladder == ladder)
        with self._engine.connect() as conn:
            return [_row(r) for r in conn.execute(stmt).mappings()]

    def open_run(self, ladder: str, version: int) -> HistoryRow | None:
        """The latest run of ``ladder@version`` that did not finish (running or failed)."""
        stmt = (
            sa.select(_H)
            .where(_H.c.ladder == ladder, _H.c.version == version)
            .order_by(_H.c.run_id.desc())
            .limit(1)
        )
        with self._engine.connect() as conn:
            r = conn.execute(stmt).mappings().first()
        if r is None or r["status"] == "done":
            return None
        return _row(r)

    def start(self, run: NewRun) -> int:
        """Insert a ``running`` row; returns its ``run_id``.

        Raises:
            ConflictError: another apply of this ladder version is running.
        """
        ladder, version, checksum, plan_hash = run.ladder, run.version, run.checksum, run.plan_hash
        applied_by, started_at, planned, reason = (run.applied_by, run.started_at, run.planned,
                                                   run.reason)
        try:
            with self._engine.begin() as conn:
                run_id = conn.execute(
                    sa.insert(_H)
                    .values(ladder=ladder, version=version, checksum=checksum,
                            plan_hash=plan_hash, applied_by=applied_by, started_at=started_at,
                            status="running", planned=planned, reason=reason)
                    .returning(_H.c.run_id)
                ).scalar_one()
        except sa.exc.IntegrityError:
            raise ConflictError(
                f"another `ladder apply` of {ladder}@{version} is running (ladder history)"
            ) from None
        return int(run_id)

    def resume(self, run_id: int, applied_by: str, reason: str = "") -> None:
        """Mark a failed run ``running`` again (a resumed apply). Raises ConflictError."""
        try:
            with self._engine.begin() as conn:
                conn.execute(
                    sa.update(_H).where(_H.c.run_id == run_id)
                    .values(status="running", applied_by=applied_by, error=None, reason=reason)
                )
        except sa.exc.IntegrityError:
            raise ConflictError(f"another `ladder apply` is running (run {run_id})") from None

    def finish(
        self, run_id: int, status: str, finished_at: datetime, error: str | None = None
    ) -> None:
        """Set the run's final ``status`` (done|failed), ``finished_at`` and ``error``, and
        append the run's LADDER_APPLIED (done) or LADDER_APPLY_FAILED (failed) row to the
        ledger chain of its version, in one transaction (the version's ``ladder_release``
        row locked first). The row's ``actor`` is who applied, ``decided_at`` the finish
        time; ``details`` hold the plan hash, checksum, reason, counts and error.

        Raises:
            InvalidInput: ``status`` is neither done nor failed.
            NotFound: no such run, or its version has no release row.
        """
        event = run_event(status)
        note = self._take_note(run_id)
        with self._engine.begin() as conn:
            run = conn.execute(
                sa.update(_H).where(_H.c.run_id == run_id)
                .values(status=status, finished_at=finished_at, error=error,
                        **_redis_values(note))
                .returning(*_H.c)
            ).mappings().first()
            if run is None:
                raise NotFound(f"no ladder history run {run_id}")
            head = conn.execute(
                sa.select(_R).where(_R.c.ladder == run["ladder"], _R.c.version == run["version"])
                .with_for_update()
            ).mappings().first()
            if head is None:
                raise NotFound(f"{run['ladder']}@{run['version']} has no release row")
            _append_event(conn, head, event,
                          _Stamp(run["applied_by"], finished_at, _run_details(run)))

    def note_redis(self, run_id: int, through: UUID, not_owner: int) -> None:
        """Advance the Redis resume point and add ``not_owner`` to its counter, with the
        run's next write (:meth:`migrate_batch` or :meth:`finish`): no transaction of its
        own per batch. A crash before that write leaves the older point, from which a
        resume restores again (idempotent)."""
        with self._notes_lock:
            old = self._notes.get(run_id)
            self._notes[run_id] = (through, not_owner + (old[1] if old else 0))

    # ------------------------------------------------------------------ reads
    def open_escalations(self, ladder: str, after: UUID | None, limit: int,
                         flt: OpenFilter = ALL_OPEN) -> list[Escalation]:
        """A keyset page (dispute id > ``after``, ascending) of pending/paused escalations
        of ``ladder``, pinned below ``below_version`` or at ``at_version``, ids <= ``through``.

        Raises:
            ValueError: ``limit`` outside 1..10000.
        """
        below_version, at_version, through = flt.below_version, flt.at_version, flt.through
        if not 1 <= limit <= MAX_PAGE:
            raise ValueError(f"page limit must be 1-{MAX_PAGE}, got {limit}")
        stmt = sa.select(_S).where(_S.c.ladder == ladder, _S.c.status.in_(_OPEN))
        if below_version is not None:
            stmt = stmt.where(_S.c.ladder_version < below_version)
        if at_version is not None:
            stmt = stmt.where(_S.c.ladder_version == at_version)
        if after is not None:
            stmt = stmt.where(_S.c.dispute_id > after)
        if through is not None:
            stmt = stmt.where(_S.c.dispute_id <= through)
        stmt = stmt.order_by(_S.c.dispute_id).limit(limit)
        with self._engine.connect() as conn:
            return [escalation_from_state(r) for r in conn.execute(stmt).mappings()]

    def open_page(
        self, ladder: str, after: UUID | None, limit: int, *, below_version: int,
    ) -> Page:
        """Like :meth:`open_escalations` (pinned below ``below_version``), keeping the raw
        rows too: :meth:`migrate_batch` of a batch of this page (the two latest pages are
        kept) reuses a row whose seq did not move instead of reading it again under its
        lock."""
        if not 1 <= limit <= MAX_PAGE:
            raise ValueError(f"page limit must be 1-{MAX_PAGE}, got {limit}")
        stmt = sa.select(_S).where(_S.c.ladder == ladder, _S.c.status.in_(_OPEN),
                                   _S.c.ladder_version < below_version)
        if after is not None:
            stmt = stmt.where(_S.c.dispute_id > after)
        stmt = stmt.order_by(_S.c.dispute_id).limit(limit)
        with self._engine.connect() as conn:
            result = conn.execute(stmt)
            cols = list(result.keys())
            rows = [dict(zip(cols, r, strict=True)) for r in result]
        page = Page({r["dispute_id"]: r for r in rows},
                    [escalation_from_state(r) for r in rows])
        self._served.add(page)
        return page

    def count_open(self, ladder: str, below_version: int) -> int:
        """How many pending/paused escalations of ``ladder`` are pinned below
        ``below_version`` (the total of a plan or apply, for its progress bar)."""
        stmt = sa.select(sa.func.count()).select_from(_S).where(
            _S.c.ladder == ladder, _S.c.status.in_(_OPEN), _S.c.ladder_version < below_version)
        with self._engine.connect() as conn:
            return int(conn.execute(stmt).scalar_one())

    def states(self, ids: Sequence[UUID]) -> dict[UUID, Escalation]:
        """Current projection states of ``ids`` (missing ids are absent)."""
        if not ids:
            return {}
        stmt = sa.select(_S).where(_S.c.dispute_id == sa.any_(sa.bindparam("ids", type_=_UUIDS)))
        with self._engine.connect() as conn:
            return {
                r["dispute_id"]: escalation_from_state(r)
                for r in conn.execute(stmt, {"ids": list(ids)}).mappings()
            }

    # ------------------------------------------------------------------ the write
    def migrate_batch(self, batch_in: MigrationBatch, replan: Replan) -> BatchResult:
        """Migrate one batch in ONE transaction (see the module docstring).

        ``batch_in`` (:class:`~escalation.ports.MigrationBatch`) says what to write;
        ``replan`` re-plans an item whose seq moved, from its locked state. Under the lock
        only ``last_seq``/status/version are read again for a row of a page this store
        served (:meth:`open_page`), and a row whose seq moved is read in full; a migrated
        escalation whose locked row did not move is built from its page object (only tier,
        version, seq and due time change) instead of from the row again. A Redis resume
        point noted since the run's last write (:meth:`note_redis`) is recorded in this
        transaction.

        Returns:
            A :class:`BatchResult`.
        """
        run_id, batch, target_version = batch_in.run_id, batch_in.items, batch_in.target_version
        stamp = _Stamp(batch_in.actor, batch_in.decided_at, batch_in.details)
        through, blocked = batch_in.through, batch_in.blocked
        page_rows, page_escalations = self._served.rows(), self._served.escalations()
        redis_note = self._take_note(run_id)
        result = BatchResult()
        if not batch and through is None:
            return result
        ordered = sorted(batch, key=lambda b: b[0].dispute_id)
        with self._engine.begin() as conn:
            ids = [item.dispute_id for item, _ in ordered]
            locked: Mapping[UUID, Mapping[str, Any]] = (
                _lock_states(conn, ids) if not page_rows
                else _lock_reuse(conn, ids, page_rows))
            checked = _check(locked, ordered, target_version, replan)
            result.replanned, result.skipped = checked.replanned, checked.skipped
            result.blocked, result.suppressed = checked.blocked, checked.suppressed
            ledger: list[dict[str, Any]] = []
            moved: list[dict[str, Any]] = []
            for item, due in checked.moves:
                row, after = _migrate_one(locked[item.dispute_id], item, due, stamp)
                ledger.append(row)
                moved.append(after)
            if ledger:
                _copy_ledger(conn, ledger)
                conn.execute(_MIGRATE_STATES, _state_arrays(moved))
                pages = page_escalations or {}
                result.migrated = [_migrated(a, pages.get(a["dispute_id"])) for a in moved]
            conn.execute(
                sa.update(_H).where(_H.c.run_id == run_id).values(
                    migrated=_H.c.migrated + len(moved),
                    replanned=_H.c.replanned + result.replanned,
                    skipped=_H.c.skipped + result.skipped,
                    blocked=_H.c.blocked + len(result.blocked) + blocked,
                    last_dispute_id=through or ordered[-1][0].dispute_id,
                    **_redis_values(redis_note),
                )
            )
        return result


class _ServedPages:
    """The two pages :meth:`LadderHistoryStore.open_page` served last (the page being
    migrated and the one read ahead of it), by dispute id: rows and domain objects."""

    def __init__(self) -> None:
        self._pages: deque[tuple[Mapping[UUID, Mapping[str, Any]],
                                 Mapping[UUID, Escalation]]] = deque(maxlen=2)
        self._lock = threading.Lock()  # pages are read ahead on another thread

    def add(self, page: Page) -> None:
        """Keep ``page`` (the oldest kept one is forgotten)."""
        by_id = {e.dispute_id: e for e in page.escalations}
        with self._lock:
            self._pages.append((page.rows, by_id))

    def rows(self) -> Mapping[UUID, Mapping[str, Any]]:
        """The raw rows of the kept pages, by dispute id."""
        with self._lock:
            return ChainMap(*(p[0] for p in reversed(self._pages)))

    def escalations(self) -> Mapping[UUID, Escalation]:
        """The domain objects of the kept pages, by dispute id."""
        with self._lock:
            return ChainMap(*(p[1] for p in reversed(self._pages)))


def _run_details(run: Mapping[Any, Any]) -> dict[str, Any]:
    """The ``details`` of a run's ledger row: what was applied, why, and what it did."""
    return {
        "run_id": int(run["run_id"]), "status": run["status"], "plan_hash": run["plan_hash"],
        "checksum": run["checksum"], "reason": run["reason"],
        "started_at": utc(run["started_at"]).isoformat(),
        **{k: int(run[k]) for k in ("planned", "migrated", "replanned", "skipped", "blocked",
                                     "not_owner")},
        "error": run["error"],
    }


def _lock_states(conn: sa.Connection, ids: list[UUID]) -> dict[UUID, dict[str, Any]]:
    """``SELECT ... FOR UPDATE`` of the projection rows of ``ids`` (sorted: the same lock
    order as every writer, so no deadlock with workers)."""
    stmt = (
        sa.select(_S)
        .where(_S.c.dispute_id == sa.any_(sa.bindparam("ids", type_=_UUIDS)))
        .order_by(_S.c.dispute_id)
        .with_for_update()
    )
    return {r["dispute_id"]: dict(r) for r in conn.execute(stmt, {"ids": ids}).mappings()}


_LOCK_LIGHT = sa.text(
    """
    SELECT dispute_id, last_seq, status, ladder_version FROM escalation_state
     WHERE dispute_id = ANY(CAST(CAST(:ids AS text) AS uuid[]))
     ORDER BY dispute_id FOR UPDATE
    """
)


def _lock_reuse(conn: sa.Connection, ids: list[UUID],
                page_rows: Mapping[UUID, Mapping[str, Any]],
                ) -> dict[UUID, Mapping[str, Any]]:
    """Lock ``ids`` (sorted) reading only seq/status/version; reuse the page's row (not
    copied: nothing below writes to it) where those did not move, read the full row
    (already locked) where they did."""
    light = conn.execute(_LOCK_LIGHT, {"ids": _array_literal(ids)}).all()
    out: dict[UUID, Mapping[str, Any]] = {}
    moved: list[UUID] = []
    for did, seq, status, version in light:
        row = page_rows.get(did)
        if row is not None and (row["last_seq"], row["status"], row["ladder_version"]) == (
                seq, status, version):
            out[did] = row
        else:
            moved.append(did)
    if moved:
        out.update(_lock_states(conn, moved))
    return out


def _migrated(after: Mapping[str, Any], before: Escalation | None) -> Escalation:
    """The Escalation of the migrated projection row ``after``: from ``before`` (the same
    dispute as the page read it) with the four fields a migration changes, when the row was
    otherwise unchanged at lock time (same seq before the migration row, status); else
    rebuilt from the row."""
    if (before is None or before.seq != int(after["last_seq"]) - 1
            or before.status.value != after["status"]):
        return escalation_from_state(after)
    due = after["due_at"]
    return Escalation(
        dispute_id=before.dispute_id, tier=after["tier"],
        due_at=before.entered_tier_at if due is None else due.astimezone(UTC),
        materiality=before.materiality, source_hash=before.source_hash, ladder=before.ladder,
        ladder_version=int(after["ladder_version"]), seq=int(after["last_seq"]),
        entered_tier_at=before.entered_tier_at, trace_id=before.trace_id,
        external_id=before.external_id, regulatory_deadline=before.regulatory_deadline,
        status=before.status, deadlines=before.deadlines,
        institution_tz=before.institution_tz, institution_calendar=before.institution_calendar,
        source=before.source,
    )


def _redis_values(note: tuple[UUID, int] | None) -> dict[str, Any]:
    if note is None:
        return {}
    return {"redis_synced_through": note[0], "not_owner": _H.c.not_owner + note[1]}


def _check(
    locked: Mapping[UUID, Mapping[str, Any]],
    batch: Sequence[tuple[PlanItem, datetime | None]],
    target_version: int,
    replan: Replan,
) -> Checked:
    """The per-dispute seq guard (``domain.migration_rule.check_batch``) over the locked
    rows; an item whose row moved is re-planned from its locked row."""
    heads = {did: LockedHead(Status(r["status"]), int(r["last_seq"]), int(r["ladder_version"]))
             for did, r in locked.items()}
    return check_batch(batch, heads, target_version,
                       lambda did: replan(escalation_from_state(locked[did])))


def _state_arrays(moved: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The ``_MIGRATE_STATES`` parameters (array text literals) of the migrated rows."""
    return {
        "ids": _array_literal([a["dispute_id"] for a in moved]),
        "versions": _array_literal([a["ladder_version"] for a in moved]),
        "tiers": _array_literal([a["tier"] for a in moved]),
        "due": _array_literal([a["due_at"] for a in moved]),
        "seqs": _array_literal([a["last_seq"] for a in moved]),
        "hashes": _array_literal([bytes(a["last_hash"]).hex() for a in moved]),
    }


def _migrate_one(
    state: Mapping[str, Any],
    item: PlanItem,
    due: datetime | None,
    stamp: _Stamp,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The LADDER_MIGRATED ledger row of one locked escalation and its new projection state
    (``(row, state)``; the caller writes both for the whole batch)."""
    old_due = utc_opt(state["due_at"])
    after = {**state, "ladder_version": item.to_version, "tier": item.to_tier}
    if state["status"] == Status.PENDING.value:
        after["due_at"] = due
    row = chained_row(after, RowFacts(
        event="LADDER_MIGRATED",
        match_decision="LADDER_MIGRATED",
        actor=stamp.actor,
        decided_at=stamp.decided_at,
        from_tier=item.from_tier,
        to_tier=item.to_tier,
        due_at=old_due,
        next_due_at=after["due_at"],
        details={
            **stamp.details,
            "from_version": item.from_version,
            "to_version": item.to_version,
            "old_tier": item.from_tier,
            "new_tier": item.to_tier,
            "old_next_tier": item.old_next,
            "new_next_tier": item.new_next,
            "old_due_at": None if old_due is None else old_due.isoformat(),
            "new_due_at": None if after["due_at"] is None else after["due_at"].isoformat(),
            "due_rule": item.due.rule.value,
            "breach_suppressed_by_migration": item.due.floor_set(due),
            **({"deadline": item.deadline} if item.deadline is not None else {}),
        }))
    after.update(last_seq=row["seq"], last_hash=row["row_hash"])
    return row, after
