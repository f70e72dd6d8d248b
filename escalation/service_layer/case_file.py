"""Export the examiner's case file of one dispute or a filtered set (format and offline
verifier: ``domain.case_file``; docs/audit.md "The examiner's case file"; ADR 0016).

The use case refuses to export evidence it cannot stand behind: every exported dispute must
first pass ``checkpoint.verify`` (its chain, projection head and the last checkpoint's sealed
head), and a checkpoint must exist. Then it gathers, for each dispute, every ledger row with
its canonical bytes, the RFC 6962 inclusion proof of the head the last checkpoint sealed,
and every deadline with its rule text, citation and state (met, missed, at risk, pending,
undetermined: ``deadline_outcomes``); for the set, the ladder files and calendars the rows
name; signs the checkpoint's digest and the whole document with the checkpoint key and
returns the file's bytes. :func:`seal_export` does the same for a whole-ledger export: its
manifest names the covering checkpoint and is signed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol
from uuid import UUID

import structlog

from escalation.domain.audit_hash import GENESIS, canonical_bytes, row_hash
from escalation.domain.calendars import CalendarRegistry
from escalation.domain.case_file import FORMAT, MAX_DISPUTES, encode
from escalation.domain.errors import EscalationError, InvalidInput, NotFound
from escalation.domain.ladder import Ladder
from escalation.domain.merkle import head_leaf, inclusion_proofs
from escalation.ports import (
    AuditFilter,
    Checkpoint,
    CheckpointStore,
    DocumentSigner,
    EventLog,
    EvidenceFile,
    LedgerReports,
    LedgerRow,
    LedgerSearch,
    SealedHead,
)
from escalation.service_layer.checkpoint import digest_of, signed_digest, verify
from escalation.service_layer.sla_report import DisputeDeadlines, dispute_deadlines


class CaseFileSources(Protocol):
    """The files behind a dispute's rows (adapter: ``adapters.evidence.EvidenceFiles``)."""

    def ladder_file(self, ladder: str, version: int) -> EvidenceFile | None:
        """The released file of ``ladder@version`` (its SHA-256 is the released checksum),
        or None when the deployment no longer has it."""
        ...

    def calendar_files(self) -> list[EvidenceFile]:
        """The institution calendars file, when one is configured (else the built-in
        calendars, which have no file: an empty list)."""
        ...


log = structlog.get_logger("escalation.case_file")

HASH_SPEC = "docs/audit.md, Canonical bytes (hash version 1): row_hash = SHA-256(prev_hash || C)"


class CaseFileRefused(EscalationError):
    """A dispute does not verify, or there is no checkpoint: no case file is written."""


@dataclass(frozen=True, slots=True)
class ExportCaseFile:
    """The command: which disputes, and who asks.

    Attributes:
        dispute_ids: the disputes, in the order wanted (duplicates ignored); may be empty
            when ``search`` names them.
        search: an audit search whose matching rows' disputes are added (the CLI's and the
            API's filters); None for none.
        actor: who exports (recorded in the file and the log).
    """

    dispute_ids: tuple[UUID, ...]
    actor: str
    search: AuditFilter | None = None


@dataclass(frozen=True, slots=True)
class CaseFilePorts:
    """What the use case reads through: the ledger's trail (``EventLog``), search
    (``LedgerSearch``) and report rows (``LedgerReports``), the checkpoints, the ladder
    versions and calendars, the files behind them and the signing key."""

    events: EventLog
    ledger: LedgerSearch
    reports: LedgerReports
    checkpoints: CheckpointStore
    ladders: Callable[[str, int], Ladder]
    calendars: CalendarRegistry
    files: CaseFileSources
    signer: DocumentSigner


def _dispute_ids(cmd: ExportCaseFile, ledger: LedgerSearch) -> list[UUID]:
    """The command's disputes, in order, without duplicates.

    Raises:
        InvalidInput: none named, or more than ``MAX_DISPUTES``.
    """
    wanted = list(dict.fromkeys(cmd.dispute_ids))
    if cmd.search is not None:
        for row in ledger.search(cmd.search, 10_000):
            if row.dispute_id not in wanted:
                wanted.append(row.dispute_id)
            if len(wanted) > MAX_DISPUTES:
                break
    if not wanted:
        raise InvalidInput("dispute_ids: name at least one dispute (or a search that "
                           "matches one)", field="dispute_ids")
    if len(wanted) > MAX_DISPUTES:
        raise InvalidInput(f"dispute_ids: at most {MAX_DISPUTES} disputes per case file; "
                           f"narrow the search", field="dispute_ids")
    return wanted


def _row_entry(row: LedgerRow, prev: bytes) -> tuple[dict[str, Any], bytes]:
    """One row of the file and its hash; refuses a row whose stored hash does not
    recompute (``verify`` passed just before, so only a concurrent rewrite gets here)."""
    fields = asdict(row)
    text = canonical_bytes(fields)
    digest = row_hash(prev, fields)
    if digest.hex() != row.row_hash or row.prev_hash != prev.hex():
        raise CaseFileRefused(f"dispute {row.dispute_id} seq {row.seq}: stored hash does not "
                              f"recompute; run `escalation audit verify --dispute "
                              f"{row.dispute_id}`")
    return {
        "canonical": text.decode("utf-8"),
        "prev_hash": row.prev_hash,
        "row_hash": row.row_hash,
        "recorded_at": _iso(row.recorded_at),
        "chain_created_at": _iso(row.chain_created_at),
    }, digest


def _iso(value: datetime | None) -> str | None:
    """``YYYY-MM-DDTHH:MM:SS.ffffffZ`` in UTC, or None."""
    if value is None:
        return None
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _deadlines(ports: CaseFilePorts, did: UUID) -> list[dict[str, Any]]:
    """Every deadline of ``did``: the console's CSV columns plus the rule text."""
    found = dispute_deadlines(DisputeDeadlines(did, None), ports.reports, ports.calendars,
                              ports.ladders)
    return [{**o.as_row(), "rule": o.outcome.rule} for o in found]


def _calendar_entry(version: str, calendars: CalendarRegistry,
                    years: Sequence[int]) -> dict[str, Any]:
    """What a calendar version meant: id, zone, working days, hours, the holidays of
    ``years`` (when the deployment still has that version), else only the version."""
    cal = next((c for c in calendars.values() if c.version == version), None)
    entry: dict[str, Any] = {"version": version, "known": cal is not None}
    if cal is None:
        return entry
    entry["id"] = cal.id
    for name in ("tz", "open", "close"):
        if hasattr(cal, name):
            entry[name] = str(getattr(cal, name))
    if hasattr(cal, "working_days"):
        entry["working_days"] = sorted(int(d) for d in cal.working_days)
    holiday = getattr(cal, "is_holiday", None)
    if holiday is not None and years:
        day, end = date(min(years), 1, 1), date(max(years), 12, 31)
        found: list[str] = []
        while day <= end:
            if holiday(day):
                found.append(day.isoformat())
            day += timedelta(days=1)
        entry["holidays"] = found
    return entry


def _years(rows: Iterable[LedgerRow]) -> list[int]:
    """The years the rows' instants fall in, plus the next one (deadlines run past them)."""
    years: set[int] = set()
    for row in rows:
        for t in (row.decided_at, row.due_at, row.next_due_at, row.regulatory_deadline):
            if t is not None:
                years.add(t.astimezone(UTC).year)
    return sorted(years | {max(years) + 1}) if years else []


def _sealed_entries(heads: list[SealedHead], wanted: Sequence[UUID]
                    ) -> dict[UUID, dict[str, Any]]:
    """The sealed head, leaf index and inclusion proof of each wanted dispute the
    checkpoint covers (heads in the checkpoint's order: by the UUID's 16 bytes)."""
    ordered = sorted(heads, key=lambda h: h.dispute_id.bytes)
    index = {h.dispute_id: i for i, h in enumerate(ordered)}
    present = [index[d] for d in wanted if d in index]
    leaves = [head_leaf(h.dispute_id, h.seq, h.sealed_hash) for h in ordered]
    proofs = inclusion_proofs(leaves, present)
    return {ordered[i].dispute_id: {"seq": ordered[i].seq, "leaf_index": i,
                                    "sealed_hash": ordered[i].sealed_hash.hex(),
                                    "proof": [p.hex() for p in proofs[i]]}
            for i in present}


def trusted_checkpoint(checkpoints: Sequence[Checkpoint], signer: DocumentSigner
                       ) -> tuple[Checkpoint, dict[str, Any]] | None:
    """The newest checkpoint whose stored signature is the signing key's own, with its
    signed digest; None when there is none.

    Ed25519 is deterministic (RFC 8032): the key's signature of a digest is one fixed value,
    so a stored signature equal to the one the key makes now is that key's, and any other
    (an unsigned row, a row signed by another key, a forged value) is passed over: evidence
    never rests on a checkpoint row someone could insert without the key.
    """
    for cp in reversed(checkpoints):
        stored = signed_digest(cp)
        if cp.signature is not None and signer.sign(digest_of(cp)) == stored:
            return cp, stored
    return None


def export_case_file(cmd: ExportCaseFile, ports: CaseFilePorts) -> bytes:
    """Build and sign the case file of the command's disputes; return its bytes
    (``domain.case_file.encode``: canonical JSON and a newline).

    Raises:
        InvalidInput: no dispute named or too many (nothing written).
        NotFound: a dispute has no ledger rows.
        CaseFileRefused: no checkpoint yet, or a dispute does not verify against its ledger
            and the last checkpoint (the message names it and what broke).
    """
    wanted = _dispute_ids(cmd, ports.ledger)
    trails: dict[UUID, list[LedgerRow]] = {}
    for did in wanted:
        trail = ports.events.trail(did)
        if not trail:
            raise NotFound(f"dispute_ids: no audit rows for dispute {did}")
        trails[did] = trail
        report = verify(ports.checkpoints, did)
        if not report.ok:
            breaks = [*(f"chain broken at seq {seq}" for _, seq in report.broken_chains[:2]),
                     *(f"projection differs ({cols})"
                       for _, cols in report.projection_mismatches[:2]),
                     *(f"sealed head differs (seq {seq})"
                       for _, seq in report.checkpoint_mismatches[:2]),
                     *(f"checkpoint: {e}" for e in report.checkpoint_errors[:2])]
            raise CaseFileRefused(
                f"dispute {did} does not verify ({'; '.join(breaks) or 'see verify'}); run "
                f"`escalation audit verify --dispute {did}`")
    with ports.checkpoints.snapshot() as snap:
        trusted = trusted_checkpoint(snap.checkpoints(), ports.signer)
        if trusted is None:
            raise CaseFileRefused("no checkpoint yet signed by the configured key: run "
                                  "`escalation audit checkpoint` first, so the case file can "
                                  "prove its chains against a signed root")
        last, digest = trusted
        sealed = _sealed_entries(snap.sealed_heads(last.checkpoint_id), wanted)
    disputes: list[dict[str, Any]] = []
    ladders: set[tuple[str, int]] = set()
    versions: set[str] = set()
    every_row: list[LedgerRow] = []
    for did in wanted:
        rows: list[dict[str, Any]] = []
        prev = GENESIS
        for row in trails[did]:
            entry, prev = _row_entry(row, prev)
            rows.append(entry)
            ladders.add((row.ladder, row.ladder_version))
            if row.calendar_version is not None:
                versions.add(row.calendar_version)
        head = sealed.get(did)
        if head is not None and trails[did][head["seq"] - 1].row_hash != head["sealed_hash"]:
            raise CaseFileRefused(f"dispute {did}: the row at seq {head['seq']} differs from "
                                  f"checkpoint {last.checkpoint_id}")
        every_row.extend(trails[did])
        disputes.append({"dispute_id": str(did), "external_id": trails[did][-1].external_id,
                         "rows": rows, "sealed": head, "deadlines": _deadlines(ports, did)})
    ladder_files = []
    for name, version in sorted(ladders):
        found = ports.files.ladder_file(name, version)
        ladder_files.append({"ladder": name, "version": version,
                             "file": None if found is None else found.name,
                             "sha256": None if found is None else found.sha256,
                             "text": None if found is None else found.text})
    years = _years(every_row)
    doc = {
        "format": FORMAT,
        "created_at": _iso(datetime.now(UTC)),
        "created_by": cmd.actor,
        "hash_spec": HASH_SPEC,
        "checkpoint": digest,
        "public_key_pem": ports.signer.public_key_pem(),
        "disputes": disputes,
        "ladders": ladder_files,
        "calendars": {
            "versions": sorted(versions),
            "definitions": [_calendar_entry(v, ports.calendars, years) for v in sorted(versions)],
            "files": [{"name": f.name, "sha256": f.sha256, "text": f.text}
                      for f in ports.files.calendar_files()],
        },
    }
    data = encode(ports.signer.sign(doc))
    log.info("case_file.exported", actor=cmd.actor, disputes=len(disputes),
             rows=len(every_row), checkpoint_id=last.checkpoint_id,
             trace_id=[trails[d][-1].trace_id for d in wanted][:20],
             source_hash=[trails[d][-1].source_hash for d in wanted][:20],
             match_decision=[trails[d][-1].match_decision for d in wanted][:20])
    return data


def heads_path(out: Path) -> Path:
    """Where the sealed heads of an export's checkpoint go: ``<out>.heads.csv``."""
    return out.with_name(out.name + ".heads.csv")


def seal_export(out: Path, manifest_file: Path, checkpoints: CheckpointStore,
                signer: DocumentSigner | None) -> dict[str, Any]:
    """Name the checkpoint that covers an ``audit export`` in its manifest and sign it.

    The manifest gains ``checkpoint = {digest, heads_file, heads_sha256}``: the signed digest
    of the newest checkpoint signed by the configured key (:func:`trusted_checkpoint`) and
    the file :func:`heads_path` of every head it sealed (``dispute_id,seq,row_hash`` per
    line, in Merkle leaf order), from which ``verify-bundle`` rebuilds the signed root; then
    the manifest is signed. Without a key (or before any such checkpoint) the manifest says
    ``checkpoint: null`` and is left unsigned, and ``verify-bundle`` warns about it.

    Returns:
        The manifest as written.
    """
    manifest: dict[str, Any] = json.loads(manifest_file.read_text("utf-8"))
    manifest["checkpoint"] = None
    found = None
    if signer is not None:
        with checkpoints.snapshot() as snap:
            found = trusted_checkpoint(snap.checkpoints(), signer)
            heads = snap.sealed_heads(found[0].checkpoint_id) if found is not None else []
    if found is not None:
        text = "".join(f"{h.dispute_id},{h.seq},{h.sealed_hash.hex()}\n"
                       for h in sorted(heads, key=lambda h: h.dispute_id.bytes))
        data = text.encode("ascii")
        heads_path(out).write_bytes(data)
        manifest["checkpoint"] = {"digest": found[1], "heads_file": heads_path(out).name,
                                  "heads_sha256": hashlib.sha256(data).hexdigest()}
    if signer is not None:
        manifest = signer.sign(manifest)
    manifest_file.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n",
                             "utf-8")
    log.info("audit_export.sealed", file=out.name, rows=manifest.get("row_count"),
             checkpoint_id=None if found is None else found[0].checkpoint_id,
             signed=signer is not None)
    return manifest
