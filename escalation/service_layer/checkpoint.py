"""Audit checkpoints and the full verification behind ``escalation audit verify``.

A checkpoint seals the current chain heads of every dispute:

* heads = for each dispute, its last ledger row ``(dispute_id, seq, row_hash)``, sorted by
  dispute id (16-byte big-endian UUID order, which is PostgreSQL's uuid order);
* ``heads_root`` = RFC 6962 Merkle root over :func:`escalation.domain.merkle.head_leaf`;
* ``checkpoint_hash`` = :func:`escalation.domain.merkle.checkpoint_hash` over id, head
  count, root and the previous checkpoint's hash (32 zero bytes for the first).

Rows go to ``audit_checkpoint`` / ``audit_checkpoint_head`` (append-only tables; adapter
``adapters.checkpoints.PostgresCheckpoints``) and a JSON
digest (:func:`digest_of`) can be written to a file kept elsewhere (WORM storage, a ticket):
whoever holds the digest can later prove the database still holds the same heads.

Why: the per-dispute hash chain alone cannot catch a superuser who edits a row and then
recomputes every later hash of that chain plus the projection head. The checkpoint's head
for that dispute no longer matches the rewritten row at the same seq, so :func:`verify`
reports it (docs/audit.md).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

from escalation.domain.errors import EscalationError, InvalidInput
from escalation.domain.merkle import checkpoint_hash, head_leaf, merkle_root, retention_hash
from escalation.ports import Checkpoint as Checkpoint  # noqa: PLC0414 -- re-export
from escalation.ports import (
    CheckpointSignature,
    CheckpointSnapshot,
    CheckpointStore,
    DigestSigner,
    DigestVerifier,
    LedgerCheck,
    RetentionRecord,
    SealedHead,
    SignatureStatus,
)
from escalation.service_layer.progress_report import Progress

DIGEST_FORMAT = "escalation-checkpoint-digest/1"
GENESIS = bytes(32)
MIN_RETENTION_DAYS = 365
"""The shortest retention period a retention row may claim (also the database's check)."""
_PARTITION_NAME = re.compile(r"^escalation_audit_y(\d{4})m(\d{2})$")


@dataclass(slots=True)
class VerifyReport:
    """Everything :func:`verify` found; ``ok`` when nothing is broken.

    ``broken_chains``: ``(dispute_id, first_bad_seq)`` from the hash chains and projection
    heads. ``projection_mismatches``: ``(dispute_id, columns)`` whose projection row
    (``escalation_state``) differs from what its ledger determines, each differing column
    named with both values (``domain.projection``). ``checkpoint_mismatches``:
    ``(dispute_id, seq)`` whose row no longer has the hash sealed in the last checkpoint (or
    is gone).
    ``checkpoint_errors``: the checkpoint chain itself or the digest file disagree (text).
    ``sealed_by``: the checkpoint (id) whose sealed head each checkpoint mismatch differs
    from (the last signed one, or the digest file's). ``signature_problems``: checkpoint
    rows whose stored signature is absent (after a signed one) or does not verify under the
    configured public key. ``retention_problems``: ``(partition name, why)`` of retention
    rows that do not pass the retention checks (:func:`retention_fault`). ``notes``: what
    was not checked or not trusted, which is no failure by itself. ``disputes`` / ``rows``:
    how much of the ledger was checked. ``checkpoint_id``: the checkpoint the heads were
    compared with (the last one whose signature verifies). ``projection_compared``: whether
    projection rows were compared with their chains (False: ``projection_mismatches`` is
    empty because nothing was compared, and a note says so).
    """

    broken_chains: list[tuple[UUID, int]] = field(default_factory=list)
    projection_mismatches: list[tuple[UUID, str]] = field(default_factory=list)
    checkpoint_mismatches: list[tuple[UUID, int]] = field(default_factory=list)
    checkpoint_errors: list[str] = field(default_factory=list)
    checkpoint_id: int | None = None
    sealed_by: dict[tuple[UUID, int], int] = field(default_factory=dict)
    signature_problems: list[tuple[int, SignatureStatus]] = field(default_factory=list)
    retention_problems: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    disputes: int | None = None
    rows: int | None = None
    projection_compared: bool = True

    @property
    def ok(self) -> bool:
        """True when no chain, head, checkpoint, signature or retention problem was found."""
        return not (self.broken_chains or self.projection_mismatches
                    or self.checkpoint_mismatches or self.checkpoint_errors
                    or self.signature_problems or self.retention_problems)


def _sort_heads(heads: Sequence[SealedHead]) -> list[SealedHead]:
    return sorted(heads, key=lambda h: h.dispute_id.bytes)


class SealRefused(EscalationError):
    """The ledger does not verify against the previous checkpoint: nothing is sealed."""


def create_checkpoint(
    store: CheckpointStore, actor: str, signer: DigestSigner | None = None,
    verifier: DigestVerifier | None = None, retention_days: int | None = None,
) -> Checkpoint:
    """Seal the current chain heads into a new checkpoint (see the module doc; one
    transaction in a consistent snapshot, one sealer at a time).

    Before sealing, every hash chain and projection head is recomputed, the projection is
    compared with the ledger, every retention row is checked (:func:`retention_fault`), and
    the last checkpoint whose stored signature verifies under ``verifier`` (its hash chain,
    the retention rows it covers and every head it sealed) is compared with the ledger in
    the same snapshot the new heads are read from, under the sealer's lock. A forged chain
    -- even one recomputed end to end with its projection head, or covered by an unsigned
    checkpoint row inserted after it -- is never sealed as if it were genuine. Concurrent
    appends are fine: the checkpoint covers the snapshot.

    Args:
        signer: signs the new checkpoint's digest; the signature is stored with it
            (None: an unsigned row, for tests of the checks only).
        verifier: the configured public key (None: the last checkpoint is trusted as stored,
            signature or not).
        retention_days: the configured retention period (``ESCALATION_AUDIT_RETENTION_DAYS``);
            a retention row younger than it is premature.

    Returns:
        The new :class:`Checkpoint` (with its signature).

    Raises:
        SealRefused: a broken chain or projection head, a head that differs from the last
            signed checkpoint, a broken checkpoint chain, an unsigned or wrongly signed
            checkpoint row, or a forged or premature retention row (the message counts each
            kind and names the first few).
    """
    return seal_checkpoint(store, actor, signer, verifier, retention_days)[0]


@dataclass(frozen=True, slots=True)
class SealCheck:
    """What a seal verified. ``since``: the signed checkpoint an incremental seal started
    from (None: a full seal, every chain). ``chains`` / ``rows``: chains recomputed and
    ledger rows read for that (an incremental seal reads only the chains changed since
    ``since``)."""

    since: int | None
    chains: int
    rows: int


def seal_checkpoint(
    store: CheckpointStore, actor: str, signer: DigestSigner | None = None,
    verifier: DigestVerifier | None = None, retention_days: int | None = None,
) -> tuple[Checkpoint, SealCheck]:
    """:func:`create_checkpoint`, and what it verified.

    **Full seal** (no checkpoint yet, or none trusted: no signed one under ``verifier``, or
    no ``verifier``): every chain is recomputed and every projection row compared, as
    :func:`verify` does, and the new checkpoint seals every chain's last ledger row.

    **Incremental seal** (a trusted checkpoint T exists): only the chains changed since T
    are read -- those whose current head (projection ``last_seq`` / ``last_hash``, a ladder
    chain's on ``ladder_release``) differs from the head T sealed, or that T did not seal.
    Each is recomputed end to end, its tail compared with its current head, its row at T's
    sealed seq with T's sealed hash, and its projection row with its ledger. T's stored heads
    must still give T's signed Merkle root, the checkpoint and signature chain and the
    retention rows are checked as in a full seal. The new checkpoint seals the current
    heads: for an unchanged chain that is exactly the head T signed. What an incremental
    seal does not do -- re-read unchanged chains -- is the job of a full ``audit verify``
    (docs/audit.md, "Incremental seals").
    """
    seen: list[SealCheck] = []

    def refuse_unless_verified(snap: CheckpointSnapshot) -> None:
        cps = snap.checkpoints()
        probe = VerifyReport()
        trusted = _trusted(cps, verifier, probe) if verifier is not None else None
        if trusted is None:
            check = _ledger_report(store.check_ledger())
            trusted = _check_snapshot(snap, check, None, verifier, retention_days)
            seen.append(SealCheck(None, check.disputes or 0, check.rows or 0))
        else:
            check = VerifyReport()
            _check_checkpoint_chain(cps, check)
            trusted = _trusted(cps, verifier, check) or trusted
            check.checkpoint_id = trusted.checkpoint_id
            _check_retention(snap, trusted, retention_days, check)
            _check_root(snap.stored_heads(trusted.checkpoint_id), trusted, check)
            changed = snap.changed_since(trusted.checkpoint_id)
            check.broken_chains = changed.broken
            check.projection_mismatches = changed.projection_mismatches
            for d, seq in changed.sealed_mismatches:
                check.checkpoint_mismatches.append((d, seq))
                check.sealed_by[(d, seq)] = trusted.checkpoint_id
            snap.seal_current_heads()
            seen.append(SealCheck(trusted.checkpoint_id, changed.chains, changed.rows))
        if not check.ok:
            raise SealRefused(_refusal(check, trusted))

    sign = None
    if signer is not None:
        key = signer

        def sign(cp: Checkpoint) -> CheckpointSignature:
            return key.sign_digest(digest_of(cp))

    cp = store.seal(actor, refuse_unless_verified, sign)
    return cp, seen[-1]


def _check_root(heads: list[SealedHead], cp: Checkpoint, report: VerifyReport) -> None:
    """The stored heads of ``cp`` still give its signed Merkle root and count (the heads an
    incremental seal carries forward are the ones that checkpoint signed)."""
    sealed = _sort_heads(heads)
    root = merkle_root([head_leaf(h.dispute_id, h.seq, h.sealed_hash) for h in sealed])
    if root != cp.heads_root or len(sealed) != cp.head_count:
        report.checkpoint_errors.append(
            f"checkpoint {cp.checkpoint_id}: stored heads do not give its Merkle root"
        )


def _refusal(check: VerifyReport, previous: Checkpoint | None) -> str:
    """The one-line reason a seal is refused: each kind of problem counted, first few named."""
    return (
        "refusing to seal a checkpoint: "
        f"{len(check.broken_chains)} broken chain(s) "
        f"{[f'{d}@{q}' for d, q in check.broken_chains[:3]]}, "
        f"{len(check.projection_mismatches)} projection row(s) disagreeing with "
        f"the ledger {[str(d) for d, _ in check.projection_mismatches[:3]]}, "
        f"{len(check.checkpoint_mismatches)} head(s) differ from checkpoint "
        f"{previous.checkpoint_id if previous else '-'} "
        f"{[f'{d}@{q}' for d, q in check.checkpoint_mismatches[:3]]}, "
        f"{len(check.checkpoint_errors)} checkpoint error(s) "
        f"{check.checkpoint_errors[:2]}, "
        f"{len(check.signature_problems)} checkpoint signature problem(s) "
        f"{[f'{i}: {st.value}' for i, st in check.signature_problems[:3]]}, "
        f"{len(check.retention_problems)} retention row(s) failing their checks "
        f"{[n for n, _ in check.retention_problems[:3]]}; run `escalation audit verify`")


def digest_of(cp: Checkpoint) -> dict[str, Any]:
    """The JSON-ready digest of a checkpoint (hashes lower-case hex, time UTC ISO-8601),
    without its signature: the bytes signed are its canonical JSON (``adapters.signing``).
    A checkpoint that covers retention rows carries ``retention_count`` and
    ``retention_hash`` (``merkle.retention_hash``)."""
    digest: dict[str, Any] = {
        "format": DIGEST_FORMAT,
        "checkpoint_id": cp.checkpoint_id,
        "created_at": cp.created_at.isoformat().replace("+00:00", "Z"),
        "head_count": cp.head_count,
        "heads_root": cp.heads_root.hex(),
        "prev_checkpoint_hash": cp.prev_checkpoint_hash.hex(),
        "checkpoint_hash": cp.checkpoint_hash.hex(),
        "merkle": "RFC 6962 SHA-256; leaf = uuid(16) || seq(8, BE) || row_hash(32)",
    }
    if cp.retention_hash is not None:
        digest["retention_count"] = cp.retention_count
        digest["retention_hash"] = cp.retention_hash.hex()
    return digest


def signed_digest(cp: Checkpoint) -> dict[str, Any]:
    """:func:`digest_of` with the ``signature`` member of the signature stored with the
    checkpoint (``{alg: Ed25519, public_key, value}``, base64); without one when unsigned."""
    digest = digest_of(cp)
    if cp.signature is not None:
        digest["signature"] = {
            "alg": "Ed25519",
            "public_key": base64.b64encode(cp.signature.public_key).decode(),
            "value": base64.b64encode(cp.signature.value).decode()}
    return digest


def write_digest(cp: Checkpoint, path: Path) -> None:
    """Write :func:`signed_digest` as pretty JSON to ``path``."""
    path.write_text(json.dumps(signed_digest(cp), indent=2, sort_keys=True) + "\n", "utf-8")


def read_digest(path: Path) -> dict[str, Any]:
    """Load a digest file. Raises InvalidInput when unreadable or of another format."""
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"cannot read digest {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != DIGEST_FORMAT:
        raise InvalidInput(f"{path} is not an {DIGEST_FORMAT} file")
    return data


def _check_checkpoint_chain(cps: list[Checkpoint], report: VerifyReport) -> Checkpoint | None:
    """Recompute every checkpoint's hash link and the last one's Merkle root."""
    prev = GENESIS
    for i, cp in enumerate(cps, start=1):
        if cp.checkpoint_id != i:
            report.checkpoint_errors.append(f"checkpoint ids not 1..n: found {cp.checkpoint_id}")
        if cp.prev_checkpoint_hash != prev:
            report.checkpoint_errors.append(f"checkpoint {cp.checkpoint_id}: prev hash mismatch")
        expect = checkpoint_hash(cp.checkpoint_id, cp.head_count, cp.heads_root, prev)
        if expect != cp.checkpoint_hash:
            report.checkpoint_errors.append(f"checkpoint {cp.checkpoint_id}: hash mismatch")
        prev = cp.checkpoint_hash
    return cps[-1] if cps else None


def _trusted(cps: list[Checkpoint], verifier: DigestVerifier | None,
             report: VerifyReport) -> Checkpoint | None:
    """The checkpoint to compare the ledger with: the last one whose stored signature
    verifies under ``verifier``. A wrongly signed row, or an unsigned one after a signed one,
    is a signature problem; unsigned rows before the first signed one were sealed before
    signatures were stored (a note). Without ``verifier``, or before any signed checkpoint,
    the last checkpoint as stored (a note says its signature is not trusted)."""
    if not cps:
        return None
    if verifier is None:
        report.notes.append("checkpoint signatures not checked: no public key configured "
                            "(--public-key or ESCALATION_CHECKPOINT_PUBLIC_KEY_FILE)")
        return cps[-1]
    trusted: Checkpoint | None = None
    legacy: list[int] = []
    for cp in cps:
        status = verifier.check_digest(digest_of(cp), cp.signature)
        if status is SignatureStatus.VALID:
            trusted = cp
        elif status is SignatureStatus.UNSIGNED and trusted is None:
            legacy.append(cp.checkpoint_id)
        else:
            report.signature_problems.append((cp.checkpoint_id, status))
    if legacy:
        report.notes.append(f"checkpoint(s) {legacy[0]}-{legacy[-1]} carry no stored "
                            "signature (sealed before signatures were stored)")
    if trusted is None and legacy:
        report.notes.append(f"no checkpoint signed by the configured public key yet: "
                            f"checkpoint {legacy[-1]} is compared as stored")
        return cps[legacy[-1] - 1] if cps[legacy[-1] - 1].checkpoint_id == legacy[-1] else None
    return trusted


def retention_fault(record: RetentionRecord, tables: dict[str, bool], now: datetime,
                    retention_days: int | None) -> str | None:
    """Why a retention row is not evidence of a legitimate removal, or None.

    A row must name a ledger partition (``escalation_audit_yYYYYmMM``) with that month's
    UTC range; be done no later than ``now`` (the database clock); its range and newest row
    must end at or before ``done_at - days``, where ``days`` is the larger of the row's
    retention period, ``retention_days`` (the configured one) and 365; and its partition
    must really be gone (``dropped``: no such table; ``detached``: not attached).
    """
    name = record.partition_name
    forged = _range_fault(record)
    if forged is not None:
        return forged
    if record.done_at > now:
        return f"forged: removed at {_iso(record.done_at)}, after the database clock {_iso(now)}"
    days = max(record.retention_days, retention_days or 0, MIN_RETENTION_DAYS)
    cutoff = record.done_at - timedelta(days=days)
    newest = record.max_recorded_at
    if record.range_to > cutoff or (newest is not None and newest > cutoff):
        return (f"premature: removed at {_iso(record.done_at)}, but its range ends "
                f"{_iso(record.range_to)}"
                + ("" if newest is None else f" and its newest row is of {_iso(newest)}")
                + f": not older than the retention period of {days} days (cutoff "
                f"{_iso(cutoff)})")
    if record.action == "dropped" and name in tables:
        return f"partition {name} still exists, though the row says dropped"
    if record.action == "detached" and tables.get(name, False):
        return f"partition {name} is still attached, though the row says detached"
    return None


def _range_fault(record: RetentionRecord) -> str | None:
    """Why a retention row's name or range is not a ledger partition's month, or None."""
    name = record.partition_name
    match = _PARTITION_NAME.match(name)
    if match is None or not 1 <= int(match[2]) <= 12:
        return f"forged: {name!r} is not a ledger partition name"
    year, month = int(match[1]), int(match[2])
    first = datetime(year, month, 1, tzinfo=UTC)
    nxt = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    if (record.range_from, record.range_to) != (first, nxt):
        return (f"forged: range [{_iso(record.range_from)}, {_iso(record.range_to)}) is not "
                f"the month of {name}")
    return None


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _check_retention(snap: CheckpointSnapshot, trusted: Checkpoint | None,
                     retention_days: int | None, report: VerifyReport) -> list[RetentionRecord]:
    """Check every retention row (:func:`retention_fault`) and that the rows ``trusted``
    covers are still exactly those; return the rows that pass (they alone excuse a sealed
    head that is gone)."""
    records = snap.retention_records()
    if not records and (trusted is None or not trusted.retention_count):
        return []
    tables = snap.ledger_tables()
    now = snap.database_now()
    valid = []
    for r in records:
        why = retention_fault(r, tables, now, retention_days)
        if why is None:
            valid.append(r)
        else:
            report.retention_problems.append((r.partition_name, why))
    keys = set(() if trusted is None else trusted.retention_covered or ())
    if trusted is not None and trusted.retention_hash is not None:
        covered = [r for r in records if r.key in keys]
        got = retention_hash([(r.partition_name, r.action, r.range_from, r.range_to,
                               r.row_count) for r in covered])
        if len(covered) != trusted.retention_count or got != trusted.retention_hash:
            report.checkpoint_errors.append(
                f"checkpoint {trusted.checkpoint_id}: the retention rows it covers "
                f"({trusted.retention_count}) differ from the {len(covered)} stored now")
    later = [r.partition_name for r in records if r.key not in keys]
    if later:
        report.notes.append(f"retention row(s) not yet covered by a signed checkpoint: "
                            f"{', '.join(later[:5])}")
    return valid


def _check_snapshot(snap: CheckpointSnapshot, report: VerifyReport, dispute_id: UUID | None,
                    verifier: DigestVerifier | None,
                    retention_days: int | None) -> Checkpoint | None:
    """Everything of :func:`verify` that reads the snapshot except the digest file; returns
    the trusted checkpoint."""
    if report.disputes is None:  # not counted by CheckpointStore.check_ledger
        report.projection_mismatches = snap.projection_mismatches(dispute_id)
        report.disputes, report.rows = snap.ledger_counts(dispute_id)
    cps = snap.checkpoints()
    _check_checkpoint_chain(cps, report)
    trusted = _trusted(cps, verifier, report)
    valid = _check_retention(snap, trusted, retention_days, report)
    if trusted is not None:
        report.checkpoint_id = trusted.checkpoint_id
        _check_heads(snap.sealed_heads(trusted.checkpoint_id), trusted, report, dispute_id,
                     valid)
    return trusted


PROJECTION_NOT_COMPARED = (
    "projection rows (escalation_state) were NOT compared with the rows their chains "
    "determine: this verified the evidence (hashes, links, seq, projection heads, "
    "checkpoints, signatures, retention rows); run `escalation audit verify --all "
    "--projection` to compare them too")


def _ledger_report(check: LedgerCheck) -> VerifyReport:
    """A report begun with the whole-ledger check (chains, projection heads and rows,
    counts); :func:`_check_snapshot` adds the rest. A check that compared no projection row
    says so in a note (:data:`PROJECTION_NOT_COMPARED`)."""
    report = VerifyReport(broken_chains=check.broken,
                          projection_mismatches=check.projection_mismatches,
                          disputes=check.disputes, rows=check.rows,
                          projection_compared=check.projection_compared)
    if not check.projection_compared:
        report.notes.append(PROJECTION_NOT_COMPARED)
    return report


def _check_heads(heads: list[SealedHead], cp: Checkpoint, report: VerifyReport,
                 dispute_id: UUID | None, retained: Sequence[RetentionRecord]) -> None:
    """Compare checkpoint ``cp``'s sealed heads with the ledger rows at the same seq (and
    the stored heads with ``cp.heads_root``). A head that is gone is excused only by a
    retention row in ``retained`` (rows that passed their checks) whose month holds its
    chain."""
    sealed = _sort_heads(heads)
    root = merkle_root([head_leaf(h.dispute_id, h.seq, h.sealed_hash) for h in sealed])
    if root != cp.heads_root or len(sealed) != cp.head_count:
        report.checkpoint_errors.append(
            f"checkpoint {cp.checkpoint_id}: stored heads do not give its Merkle root"
        )
    for h in heads:
        if dispute_id is not None and h.dispute_id != dispute_id:
            continue
        if h.current_hash is None and any(
            r.range_from <= h.chain_created_at < r.range_to for r in retained
        ):
            continue  # the chain's partition was removed by retention
        differs = h.current_hash is None or h.current_hash != h.sealed_hash
        if differs and (h.dispute_id, h.seq) not in report.sealed_by:
            report.checkpoint_mismatches.append((h.dispute_id, h.seq))
            report.sealed_by[(h.dispute_id, h.seq)] = cp.checkpoint_id


@dataclass(frozen=True, slots=True)
class VerifyLedger:
    """Verify the ledger (the command of :func:`verify_ledger`).

    ``dispute_id``: one dispute, or None for all (checkpoint, signature and retention
    problems are the whole ledger's and are reported either way). ``digest``: a digest
    loaded with :func:`read_digest` to compare with the stored checkpoint of the same id (an
    attacker who rewrote the checkpoint tables too is caught by the copy kept elsewhere).
    ``retention_days``: the configured retention period in days (see
    :func:`retention_fault`; None: not checked against a period). ``projection``: compare
    every projection row with the row its chain determines (the projection fold; one
    dispute's row is compared either way); False verifies the evidence only, with the same
    broken chains, and notes that projection rows were not compared (docs/audit.md, ADR
    0040; ``audit verify --all`` without ``--projection``).
    """

    dispute_id: UUID | None = None
    digest: dict[str, Any] | None = None
    retention_days: int | None = None
    projection: bool = True


def verify(store: CheckpointStore, dispute_id: UUID | None = None) -> VerifyReport:
    """:func:`verify_ledger` of one dispute (or all: None) with no digest, no public key, no
    retention period and no progress (the console, the case file and the tests)."""
    return verify_ledger(VerifyLedger(dispute_id), store)


def verify_ledger(cmd: VerifyLedger, store: CheckpointStore,
                  verifier: DigestVerifier | None = None,
                  progress: Progress | None = None) -> VerifyReport:
    """Recompute chains, compare projection heads, the checkpoint chain, its signatures,
    the retention rows and the heads of the last signed checkpoint.

    Args:
        cmd: what to verify (:class:`VerifyLedger`).
        store: the checkpoint store (the ledger, its checkpoints and retention rows).
        verifier: the configured public key; the heads are compared with the last
            checkpoint whose stored signature verifies under it (None: the last stored
            one, and a note says signatures were not checked).
        progress: called ``("chains", chains checked, None)`` while the chains are walked.

    Returns:
        A :class:`VerifyReport`.
    """
    dispute_id, digest, retention_days = cmd.dispute_id, cmd.digest, cmd.retention_days
    report = (_ledger_report(store.check_ledger(progress, cmd.projection))
              if dispute_id is None
              else VerifyReport(broken_chains=store.broken_chains(dispute_id, progress)))
    with store.snapshot() as snap:
        trusted = _check_snapshot(snap, report, dispute_id, verifier, retention_days)
        if digest is not None:
            held = _check_digest(snap, digest, report)
            if held is not None and (trusted is None
                                     or held.checkpoint_id != trusted.checkpoint_id):
                valid = [r for r in snap.retention_records()
                         if r.partition_name not in {n for n, _ in report.retention_problems}]
                _check_heads(snap.sealed_heads(held.checkpoint_id), held, report, dispute_id,
                             valid)
    return report


def _check_digest(snap: CheckpointSnapshot, digest: dict[str, Any],
                  report: VerifyReport) -> Checkpoint | None:
    """Compare the digest file with the stored checkpoint of its id; return that checkpoint
    *as the file describes it* (its root from the file), so its heads are checked against
    the file's root, not against tables an attacker could have rewritten."""
    cp_id = digest.get("checkpoint_id")
    cp = snap.checkpoint(cp_id)
    if cp is None:
        report.checkpoint_errors.append(f"digest checkpoint {cp_id} is not in the database")
        return None
    if (
        cp.checkpoint_hash.hex() != digest.get("checkpoint_hash")
        or cp.heads_root.hex() != digest.get("heads_root")
        or cp.head_count != digest.get("head_count")
    ):
        report.checkpoint_errors.append(
            f"checkpoint {cp_id} in the database differs from the digest file"
        )
    try:
        return Checkpoint(int(str(cp_id)), datetime.now(UTC), int(digest["head_count"]),
                          bytes.fromhex(str(digest["heads_root"])), GENESIS,
                          bytes.fromhex(str(digest["checkpoint_hash"])))
    except (KeyError, ValueError, TypeError):
        report.checkpoint_errors.append(f"digest checkpoint {cp_id}: malformed fields")
        return None
