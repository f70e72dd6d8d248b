"""``escalation audit ...`` (show, verify, checkpoint, partitions, search, export) and
``escalation report sla``. See docs/audit.md.

Exit codes: 0 ok; 1 verification failed / refused operation (EscalationError); 2 usage.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from uuid import UUID

import typer
from rich.table import Table

from escalation.domain.errors import ConfigError, InvalidInput, NotFound
from escalation.domain.timeutil import parse_time
from escalation.entrypoints.cli_common import _app, _print_json, _settings, err, json_default, out

if TYPE_CHECKING:  # SQLAlchemy is imported by the commands that reach the database
    import sqlalchemy as sa

    from escalation.domain.calendars import CalendarRegistry
    from escalation.domain.ladder import Ladder

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]

audit_app = typer.Typer(help="The audit ledger.", no_args_is_help=True)
partitions_app = typer.Typer(
    help="Monthly ledger partitions: create ahead (--ahead N), drop expired ones."
)
report_app = typer.Typer(help="Compliance reports.", no_args_is_help=True)
audit_app.add_typer(partitions_app, name="partitions")


@contextmanager
def _engine() -> Iterator[sa.Engine]:
    """An engine on the configured database at the Alembic head (see bootstrap)."""
    from escalation.composition_cli import ledger_engine

    with ledger_engine(_settings()) as engine:
        yield engine


def _ladder_versions() -> list[Ladder]:
    """Every ladder version of ``ESCALATION_LADDERS_DIR`` (for the decisions they can record:
    a search for one no dispute has reached yet finds no rows instead of being refused; and
    for the tier ids a filter may name)."""
    from escalation.composition_cli import ladder_versions

    return ladder_versions(_settings())


def _ladder_lookup(calendars: CalendarRegistry) -> Callable[[str, int], Ladder]:
    """``(name, version) -> Ladder`` over ``ESCALATION_LADDERS_DIR`` (LadderError when
    unknown): the deadlines' ``met_by`` and clocks for ``report sla`` and ``audit search
    --deadlines``, as the console reads them."""
    from escalation.composition_cli import ladder_lookup

    return ladder_lookup(_settings(), calendars)


def _uuid(value: str | None) -> Any:
    if value is None:
        return None
    from escalation.domain.escalation import parse_dispute_id

    return parse_dispute_id(value)


# --------------------------------------------------------------------------- show
@audit_app.command("show")
def audit_show(
    dispute_id: Annotated[str, typer.Argument(help="Dispute id (UUID) or external id.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
) -> None:
    """One dispute's audit trail, oldest first."""
    from escalation.entrypoints.render import FULL_TRAIL_WIDTH, compact_trail_table, trail_table
    from escalation.service_layer.disputes import dispute_named

    a = _app(actor="cli")
    try:
        did = dispute_named(dispute_id, a.store.find_by_external_id)
        rows = a.store.trail(did)
    finally:
        a.close()
    if not rows:
        raise NotFound(f"no audit rows for dispute {did}")
    if as_json:
        for r in rows:
            sys.stdout.write(json.dumps(asdict(r), default=json_default) + "\n")
        return
    if out.width >= FULL_TRAIL_WIDTH:
        out.print(trail_table(rows))
        return
    out.print(compact_trail_table(rows))
    out.print(f"(the full table -- ladder, deadlines, calendar, hashes -- needs "
              f"{FULL_TRAIL_WIDTH} columns, this output has {out.width}: widen it, set "
              f"COLUMNS, or use --json)", markup=False, highlight=False,
              soft_wrap=False)  # a note beside a table fits the table's width


# --------------------------------------------------------------------------- verify
@audit_app.command("verify")
def audit_verify(  # noqa: PLR0913 - a typer command: one parameter per option (ADR 0036)
    dispute: Annotated[str | None, typer.Option("--dispute", help="One dispute (UUID).")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Every chain (default).")] = False,
    digest: Annotated[
        Path | None, typer.Option(help="A checkpoint digest file kept elsewhere: the ledger is "
                                       "compared with the heads of that checkpoint.")
    ] = None,
    public_key: Annotated[
        Path | None, typer.Option(help="Ed25519 public key (PEM) checkpoints are trusted under: "
                                       "the stored checkpoints and --digest must be signed by "
                                       "it (default: ESCALATION_CHECKPOINT_PUBLIC_KEY_FILE, "
                                       "else the signing key's public half).")
    ] = None,
    projection: Annotated[bool, typer.Option(
        "--projection", help="With every chain: also compare each projection row with the row "
                             "its chain determines (the projection fold; slower). Without it "
                             "the evidence is verified and the report says projection rows "
                             "were not compared. One dispute's row is compared either way.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Recompute hash chains, projection heads, checkpoints, their signatures and the
    retention rows; compare the ledger with the last signed checkpoint; exit 1 on any break.
    Every chain's projection row is compared with its chain only with --projection."""
    from escalation.bootstrap import checkpoint_store_for, digest_verifier_for, event_log_for
    from escalation.composition_cli import configured_digest_checker
    from escalation.entrypoints.progress_bars import cli_progress
    from escalation.service_layer.checkpoint import VerifyLedger, read_digest, verify_ledger

    if dispute is not None and all_:
        raise InvalidInput("give --dispute ID or --all, not both")
    dig = None if digest is None else read_digest(digest)
    verifier = digest_verifier_for(public_key)
    bad_signature = None
    signature_checked: bool | None = None  # None: no --digest
    if dig is not None:
        check = configured_digest_checker(public_key)
        signature_checked = check is not None
        if check is None:
            err.print(f"WARNING: the signature of {digest} was NOT checked: no public key "
                      "(give --public-key or set ESCALATION_CHECKPOINT_PUBLIC_KEY_FILE); the "
                      "digest file is trusted as it stands", markup=False, highlight=False)
        else:
            bad_signature = check(dig)
    did = _uuid(dispute)
    with _engine() as engine, cli_progress("audit verify") as progress:
        known = did is None or event_log_for(engine).get(did) is not None
        report = verify_ledger(
            VerifyLedger(did, dig, retention_days=_settings().audit_retention_days,
                         projection=projection),
            checkpoint_store_for(engine), verifier, progress)
    if bad_signature is not None:
        report.checkpoint_errors.insert(0, f"{digest}: {bad_signature}")
    if report.ok and not known:
        # nothing to verify is not "intact": a mistyped id must not read as a pass (a
        # sealed dispute whose rows are gone is a checkpoint mismatch, reported below)
        raise NotFound(f"no audit rows for dispute {did}")
    if as_json:
        _verify_json(report, digest_signature_checked=signature_checked)
    elif report.ok:
        _verify_ok(report, signed=verifier is not None)
    else:
        _verify_problems(report)
    if not as_json:
        for note in report.notes:
            err.print(f"note: {note}", markup=False, highlight=False)
    if not report.ok:
        raise typer.Exit(1)


def _verify_ok(report: Any, signed: bool) -> None:
    """The one line of a passed ``audit verify`` on stdout."""
    cp = report.checkpoint_id
    # a chain is a dispute's or a ladder's (ADR 0012): both are counted, as chains
    counted = f"{report.rows} row(s) of {report.disputes} chain(s) checked"
    unfolded = ("; projection rows compared with their chains" if report.projection_compared
                else "; projection rows NOT compared with their chains (add --projection)")
    if cp:
        out.print((f"ok: chains intact, {counted}; last signed checkpoint {cp} matches"
                   if signed else f"ok: chains intact, {counted}; last checkpoint {cp} matches")
                  + unfolded, markup=False, highlight=False)
    else:
        out.print(f"ok: chains intact, {counted}; no checkpoint yet "
                  f"(run `escalation audit checkpoint`){unfolded}", markup=False,
                  highlight=False)


def _verify_json(report: Any, digest_signature_checked: bool | None = None) -> None:
    """The ``audit verify --json`` report on stdout (one line)."""
    sys.stdout.write(
        json.dumps(
            {
                "ok": report.ok,
                "rows": report.rows,
                "disputes": report.disputes,
                "signature_problems": [[i, st.value] for i, st in report.signature_problems],
                "retention_problems": [[n, why] for n, why in report.retention_problems],
                "notes": report.notes,
                "digest_signature_checked": digest_signature_checked,
                "broken_chains": [[str(d), s] for d, s in report.broken_chains],
                "checkpoint_mismatches": [
                    [str(d), s] for d, s in report.checkpoint_mismatches
                ],
                "checkpoint_errors": report.checkpoint_errors,
                "projection_mismatches": [
                    [str(d), f] for d, f in report.projection_mismatches
                ],
                "checkpoint_id": report.checkpoint_id,
                "projection_compared": report.projection_compared,
            }
        )
        + "\n"
    )


def _verify_problems(report: Any) -> None:
    """Each problem of a failed ``audit verify`` as one line on stderr."""
    for d, seq in report.broken_chains:
        err.print(f"broken chain: dispute {d}, first broken link at seq {seq}")
    for d, fields in report.projection_mismatches:
        err.print(f"projection mismatch: dispute {d}: escalation_state differs from the "
                  f"ledger in {fields}", markup=False, highlight=False)
    for d, seq in report.checkpoint_mismatches:
        err.print(
            f"checkpoint mismatch: dispute {d} seq {seq} differs from checkpoint "
            f"{report.sealed_by.get((d, seq), report.checkpoint_id)}"
        )
    for cp_id, status in report.signature_problems:
        err.print(f"checkpoint signature: checkpoint {cp_id} is "
                  + ("not signed" if status.value == "unsigned" else
                     "signed by another key" if status.value == "wrong_key" else
                     "signed, but the signature does not verify")
                  + " under the configured public key: not trusted",
                  markup=False, highlight=False)
    for name, why in report.retention_problems:
        err.print(f"retention row {name}: {why}", markup=False, highlight=False)
    for text in report.checkpoint_errors:
        err.print(f"checkpoint error: {text}")


@audit_app.command("checkpoint")
def audit_checkpoint(
    out_file: Annotated[
        Path | None, typer.Option("--out", help="Write the digest JSON to this file.")
    ] = None,
    actor: Annotated[str, typer.Option(help="Who seals the checkpoint.")] = "cli",
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print JSON (the signed digest is printed as JSON either way).")]
        = False,
) -> None:
    """Seal a checkpoint: verify every chain changed since the last signed checkpoint (every
    chain for the first one) and the retention rows against it (refuse on any break), then a
    Merkle root over all chain heads, chained to the previous one, signed with Ed25519
    (ESCALATION_CHECKPOINT_KEY_FILE or ESCALATION_CHECKPOINT_KEY); the signature is stored
    with it. Needs a database role that may insert checkpoints (escalation_sealer or the
    owner), not escalation_app."""
    from escalation.bootstrap import checkpoint_store_for, digest_signer_for, digest_verifier_for
    from escalation.composition_cli import SIGNING_KEY_ENV, SIGNING_KEY_FILE_ENV
    from escalation.service_layer.checkpoint import seal_checkpoint, signed_digest

    signer = digest_signer_for()
    if signer is None:
        raise InvalidInput(f"set {SIGNING_KEY_FILE_ENV} (or {SIGNING_KEY_ENV}) to an Ed25519 "
                           "private key: "
                           "checkpoints are signed (generate one with `escalation audit keygen`)")
    from sqlalchemy.exc import DBAPIError

    with _engine() as engine:
        try:
            cp, check = seal_checkpoint(checkpoint_store_for(engine), actor, signer,
                                        digest_verifier_for(),
                                        retention_days=_settings().audit_retention_days)
        except DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) != "42501":
                raise
            raise ConfigError(
                f"the database role {engine.url.username!r} may not seal checkpoints "
                f"({str(exc.orig).splitlines()[0]}): run `audit checkpoint` as "
                "escalation_sealer or the owner (docs/audit.md, Defence in depth)") from None
    since = ("every chain" if check.since is None
             else f"the chains changed since checkpoint {check.since}")
    err.print(f"checkpoint {cp.checkpoint_id}: verified {since}: {check.chains} chain(s), "
              f"{check.rows} row(s)", markup=False, highlight=False)
    signed = signed_digest(cp)
    if out_file is not None:
        out_file.write_text(json.dumps(signed, indent=2, sort_keys=True) + "\n", "utf-8")
    out.print_json(json.dumps(signed))


@audit_app.command("keygen")
def audit_keygen(
    private_out: Annotated[Path, typer.Option(help="Private key file to create (0600).")],
    public_out: Annotated[Path, typer.Option(help="Public key file to write (publish it).")],
    as_json: JsonOpt = False,
) -> None:
    """Generate an Ed25519 checkpoint signing key pair (PEM)."""
    from escalation.composition_cli import generate_signing_keypair

    generate_signing_keypair(private_out, public_out)
    if as_json:
        _print_json({"private_key": str(private_out), "public_key": str(public_out)})
        return
    out.print(f"private key {private_out} (keep secret), public key {public_out} (publish)",
              markup=False, highlight=False)


@audit_app.command("public-key")
def audit_public_key() -> None:
    """Print the public key (PEM) of the configured checkpoint signing key."""
    from escalation.composition_cli import SIGNING_KEY_FILE_ENV, configured_public_pem

    pem = configured_public_pem()
    if pem is None:
        raise InvalidInput(f"no signing key configured ({SIGNING_KEY_FILE_ENV})")
    sys.stdout.write(pem.decode())


@audit_app.command("verify-digest")
def audit_verify_digest(
    digest: Annotated[Path, typer.Argument(help="Signed checkpoint digest (JSON).")],
    public_key: Annotated[Path, typer.Option(help="Ed25519 public key (PEM).")],
    previous: Annotated[Path | None, typer.Option(
        help="The digest of the checkpoint before it: its hash must be the new one's link.")
    ] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print JSON: ok, checkpoint_id, chained_to, problems.")] = False,
) -> None:
    """Offline: check a digest's signature (and its link to the previous digest), no database.
    Exit 1 when it does not verify."""
    from escalation.composition_cli import digest_checker
    from escalation.service_layer.checkpoint import read_digest

    check = digest_checker(public_key)
    dig = read_digest(digest)
    problems = [p for p in [check(dig)] if p]
    if previous is not None:
        prev = read_digest(previous)
        problems += [f"{previous}: {p}" for p in [check(prev)] if p]
        pid, did = int(prev.get("checkpoint_id", -1)), int(dig.get("checkpoint_id", -2))
        if pid + 1 != did:
            # the link is checked or the digest is refused: it printed "ok" for a --previous
            # two checkpoints back, or after it, without comparing anything
            wanted = (f"give the digest of checkpoint {did - 1}" if did > 1 else
                      f"checkpoint {did} is the first: it has no previous one")
            if pid >= did:
                wanted = f"--previous takes the older digest; {wanted}"
            problems.append(f"{previous} is checkpoint {pid}, not the one just before "
                            f"checkpoint {did}: {wanted}")
        elif prev.get("checkpoint_hash") != dig.get("prev_checkpoint_hash"):
            problems.append(f"{digest} does not chain to {previous}")
    if as_json:
        _print_json({"ok": not problems, "checkpoint_id": dig.get("checkpoint_id"),
                     "chained_to": None if previous is None else prev.get("checkpoint_id"),
                     "problems": problems})
        if problems:
            raise typer.Exit(1)
        return
    for p in problems:
        err.print(f"error: {p}", markup=False, highlight=False)
    if problems:
        raise typer.Exit(1)
    link = (f", chained to checkpoint {prev.get('checkpoint_id')}" if previous is not None
            else "")
    out.print(f"ok: checkpoint {dig.get('checkpoint_id')} signed by the given key{link}",
              markup=False, highlight=False)


# --------------------------------------------------------------------------- case file
@audit_app.command("case-file")
def audit_case_file(  # noqa: PLR0913 - a typer command: one parameter per option (ADR 0036)
    disputes: Annotated[list[str] | None, typer.Argument(
        help="Dispute ids (UUID or external id), any number.")] = None,
    out_file: Annotated[Path, typer.Option("--out", help="The case file to write.")] = Path(
        "case-file.json"),
    ladder: Annotated[str | None, typer.Option(help="Add the disputes of this ladder.")] = None,
    tier: Annotated[str | None, typer.Option(help="... that entered or left this tier.")] = None,
    decision: Annotated[str | None, typer.Option(help="... with this decision/event.")] = None,
    since: Annotated[str | None, typer.Option("--from", help="... decided at or after.")] = None,
    until: Annotated[str | None, typer.Option("--to", help="... decided before.")] = None,
    actor: Annotated[str | None, typer.Option(
        help="Who exports (default: ESCALATION_OPERATOR, else user@host).")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print JSON: file, bytes.")] = False,
) -> None:
    """The examiner's case file: every ledger row of the disputes with its canonical bytes
    and hash, the inclusion proof of each chain head in the last checkpoint, the signed
    checkpoint digest and its public key, the ladder files and calendars the rows name and
    every deadline (rule, citation, met/missed); the file is signed with the checkpoint key.
    Check it offline with `escalation audit verify-bundle FILE --public-key P`. Exit 1 when
    a dispute does not verify or no checkpoint exists (nothing written)."""
    from escalation.bootstrap import case_file_ports_for
    from escalation.entrypoints.cli_common import _operator
    from escalation.service_layer.audit_export import check_filter, check_output_path
    from escalation.service_layer.case_file import ExportCaseFile, export_case_file
    from escalation.service_layer.ladder_release import default_actor

    check_output_path(out_file)
    search = None
    if any(v is not None for v in (ladder, tier, decision, since, until)):
        search = _filter(dispute=None, tier=tier, decision=decision, since=since,
                         until=until, actor=None, ladder=ladder, ladder_version=None)
    ids = _disputes_named(disputes or [])
    cals = _institution_calendars()
    with _engine() as engine:
        ports = case_file_ports_for(engine, _settings(), _ladder_lookup(cals), cals)
        if search is not None:  # unknown names refused as `audit search` refuses them
            check_filter(ports.ledger, search, _ladder_versions())
        data = export_case_file(
            ExportCaseFile(ids, _operator(actor, default_actor()), search), ports)
    out_file.write_bytes(data)
    if as_json:
        _print_json({"file": str(out_file), "bytes": len(data)})
        return
    out.print(f"wrote {out_file} ({len(data)} bytes)", markup=False, highlight=False)


def _disputes_named(names: list[str]) -> tuple[UUID, ...]:
    """The disputes of ``audit case-file``'s arguments: UUIDs, or external ids resolved as
    ``audit show`` resolves them (``service_layer.disputes.dispute_named``). Only an external
    id opens the application (Redis and the database) to look it up.

    Raises:
        NotFound: an id or external id no dispute has.
        InvalidInput: an external id that names several disputes.
    """
    from escalation.domain.escalation import parse_dispute_id
    from escalation.service_layer.disputes import dispute_named

    ids: list[UUID | None] = []
    for name in names:
        try:
            ids.append(parse_dispute_id(name))
        except InvalidInput:
            ids.append(None)
    if all(i is not None for i in ids):
        return tuple(i for i in ids if i is not None)
    a = _app(actor="cli")
    try:
        return tuple(i if i is not None else dispute_named(n, a.store.find_by_external_id)
                     for i, n in zip(ids, names, strict=True))
    finally:
        a.close()


def _verify_export(manifest_file: Path, data_file: Path, pinned: bytes | None) -> Any:
    """``verify-bundle`` of a whole-ledger export: its manifest, ``data_file`` (the file
    given, whose name the manifest must hold) and the checkpoint heads file, streamed line
    by line (``domain.case_file.verify_export``)."""
    from escalation.domain.case_file import strict_loads, verify_export

    manifest = strict_loads(manifest_file.read_bytes())
    if not isinstance(manifest, dict) or "sha256" not in manifest:
        raise InvalidInput(f"{manifest_file} is not an audit export manifest")
    folder = manifest_file.parent
    cp = manifest.get("checkpoint")
    heads_name = cp.get("heads_file") if isinstance(cp, dict) else None
    heads_file = None if heads_name is None else folder / Path(str(heads_name)).name
    with data_file.open("rb") as lines:
        if heads_file is None or not heads_file.exists():
            return verify_export(manifest, lines, None, pinned, data_file.name)
        with heads_file.open("rb") as heads:
            return verify_export(manifest, lines, heads, pinned, data_file.name)


@audit_app.command("verify-bundle")
def audit_verify_bundle(
    bundle: Annotated[Path, typer.Argument(
        help="A case file (audit case-file), or an audit export file or its manifest.")],
    public_key: Annotated[Path | None, typer.Option(
        help="The Ed25519 public key (PEM) you trust; without it the key the file carries "
             "is used and the result says so.")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print JSON: ok, key_pinned, signed, checkpoint_id, checked, warnings, "
                       "errors.")] = False,
) -> None:
    """Offline: verify a case file without a database or Redis: canonical form, signatures,
    every chain recomputed from its canonical bytes, each head's Merkle inclusion proof in
    the signed root, the ladder and calendar files' SHA-256. Given an `audit export` file
    (or its .manifest.json), verify the export: manifest and checkpoint signatures, file
    SHA-256, every row's hash and link, the sealed heads against the signed root; the file
    checked is FILE itself (or the one FILE.manifest.json is next to), and a manifest naming
    another file fails. Exit 1 on any failure; with --public-key an unsigned export, or one
    naming no checkpoint, fails; without it an unsigned export ends NOT SIGNED, not ok."""
    from escalation.domain.case_file import public_key_from_pem, verify_bundle

    suffix = ".manifest.json"
    is_manifest = bundle.name.endswith(suffix)
    manifest_file = bundle if is_manifest else bundle.with_name(bundle.name + suffix)
    data_file = bundle.with_name(bundle.name.removesuffix(suffix)) if is_manifest else bundle
    try:
        pinned = None if public_key is None else public_key_from_pem(public_key.read_bytes())
        if manifest_file.exists():
            report = _verify_export(manifest_file, data_file, pinned)
        else:
            report = verify_bundle(bundle.read_bytes(), pinned)
    except OSError as exc:
        raise InvalidInput(f"cannot read {exc.filename}: {exc.strerror}") from None
    if as_json:
        _print_json({"ok": report.ok, "key_pinned": report.key_pinned,
                     "signed": report.signed, "checkpoint_id": report.checkpoint_id,
                     "checked": list(report.checked),
                     "warnings": list(report.warnings), "errors": list(report.errors)})
        if not report.ok:
            raise typer.Exit(1)
        return
    for line in report.checked:
        out.print(f"checked: {line}", markup=False, highlight=False)
    for line in report.warnings:
        err.print(f"WARNING: {line}", markup=False, highlight=False)
    for line in report.errors:
        err.print(f"error: {line}", markup=False, highlight=False)
    if not report.ok:
        raise typer.Exit(1)
    if not report.signed:
        out.print(f"NOT SIGNED: {bundle} is consistent with itself only; nothing signs it, "
                  f"so it proves nothing about who wrote it", markup=False, highlight=False)
        return
    pin = "the pinned key" if report.key_pinned else "the key it carries (NOT PINNED)"
    out.print(f"ok: {bundle} verifies under {pin}; checkpoint {report.checkpoint_id}",
              markup=False, highlight=False)


# --------------------------------------------------------------------------- partitions
@partitions_app.callback(invoke_without_command=True)
def partitions_main(
    ctx: typer.Context,
    ahead: Annotated[
        int | None, typer.Option(help="Months to create ahead (default: settings, 3).")
    ] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print JSON: created, partitions (name, from, to).")] = False,
) -> None:
    """Create this month's and the next N months' partitions, then list them."""
    if ctx.invoked_subcommand is not None:
        return
    from escalation.composition_cli import ensure_ledger_partitions, ledger_partitions

    n = _settings().audit_partitions_ahead if ahead is None else ahead
    with _engine() as engine:
        created = ensure_ledger_partitions(engine, datetime.now(UTC), n)
        parts = ledger_partitions(engine)
    if as_json:
        _print_json({"created": list(created), "partitions": [
            {"name": p.name, "from": p.range_from.isoformat(), "to": p.range_to.isoformat()}
            for p in parts]})
        return
    out.print("created: " + (", ".join(created) if created else "none"))
    for p in parts:
        out.print(f"{p.name}  [{p.range_from.isoformat()}, {p.range_to.isoformat()})")


@partitions_app.command("drop-expired")
def partitions_drop_expired(
    names: Annotated[
        list[str] | None, typer.Argument(help="Only these partitions (default: all expired).")
    ] = None,
    retention_days: Annotated[
        int | None, typer.Option(help="Override ESCALATION_AUDIT_RETENTION_DAYS (>= 365).")
    ] = None,
    detach_only: Annotated[bool, typer.Option(help="Detach but do not drop.")] = False,
    actor: Annotated[str, typer.Option(help="Who runs the retention.")] = "cli",
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print JSON: removed, refused (name: why).")] = False,
) -> None:
    """Detach/drop partitions entirely older than retention; refuse (exit 1) any other.

    Each removed partition's decision figures are saved in Redis first, so the ``/metrics``
    counters never fall (docs/operations.md "Counters across retention")."""
    from escalation.composition_cli import DropExpired, drop_expired_partitions

    settings = _settings(audit_retention_days=retention_days,
                         spelled={"audit_retention_days": "--retention-days"})
    app = _app()
    try:
        result = drop_expired_partitions(app, DropExpired(
            datetime.now(UTC), settings.audit_retention_days, actor=actor,
            detach_only=detach_only, names=names or None))
    finally:
        app.close()
    if as_json:
        _print_json({"removed": list(result.removed), "refused": dict(result.refused)})
        if result.refused:
            raise typer.Exit(1)
        return
    out.print("removed: " + (", ".join(result.removed) if result.removed else "none"))
    if result.refused:
        for name, why in result.refused.items():
            err.print(f"refused {name}: {why}")
        raise typer.Exit(1)


# --------------------------------------------------------------------------- search/export
def _filter(**kw: Any) -> Any:
    from escalation.service_layer.audit_export import AuditFilter

    return AuditFilter(
        dispute_id=_uuid(kw["dispute"]),
        tier=kw["tier"],
        decision=kw["decision"],
        since=parse_time(kw["since"], "--from"),
        until=parse_time(kw["until"], "--to"),
        actor=kw["actor"],
        ladder=kw.get("ladder"),
        ladder_version=kw["ladder_version"],
    )


def _institution_calendars() -> CalendarRegistry:
    """The calendar registry with the deployment's institution zone and calendar."""
    from escalation.composition_cli import deployment_calendars

    return deployment_calendars(_settings())


def _search_deadlines(dispute: str | None, name: str | None, as_json: bool) -> None:
    """``audit search --dispute ID --deadlines [--deadline NAME]``."""
    from escalation.bootstrap import ledger_reports_for
    from escalation.domain.escalation import parse_dispute_id
    from escalation.service_layer.sla_report import (
        MISSED_COLUMNS,
        DisputeDeadlines,
        dispute_deadlines,
    )

    if dispute is None:
        raise InvalidInput("--deadlines needs --dispute")
    did = parse_dispute_id(dispute)
    cals = _institution_calendars()
    with _engine() as engine:
        found = dispute_deadlines(DisputeDeadlines(did, name), ledger_reports_for(engine), cals,
                                  _ladder_lookup(cals))
    if name is not None and not found:
        raise InvalidInput(f"dispute {did} has no deadline {name!r}")
    if as_json:
        for o in found:
            sys.stdout.write(json.dumps(o.as_json(), default=json_default) + "\n")
        return
    table = Table(title=f"{len(found)} regulatory deadline(s) of {did}")
    for col in MISSED_COLUMNS[2:]:
        table.add_column(col)
    for o in found:
        table.add_row(*[str(v) for v in list(o.as_row().values())[2:]])
    out.print(table)


@audit_app.command("search")
def audit_search(  # noqa: PLR0913 - a typer command: one parameter per option (ADR 0036)
    dispute: Annotated[str | None, typer.Option(
        help="Dispute id (UUID), or the external id with --source.")] = None,
    source: Annotated[str | None, typer.Option(
        help="Source system: --dispute is its external id.")] = None,
    tier: Annotated[str | None, typer.Option(help="From or to tier id.")] = None,
    decision: Annotated[
        str | None, typer.Option(help="Decision or event, e.g. PROMOTED_TO_SENIOR, CANCELLED.")
    ] = None,
    since: Annotated[str | None, typer.Option("--from", help="decided_at >= (ISO-8601).")] = None,
    until: Annotated[str | None, typer.Option("--to", help="decided_at < (ISO-8601).")] = None,
    actor: Annotated[str | None, typer.Option("--actor", "--worker", help="Actor.")] = None,
    ladder: Annotated[str | None, typer.Option(help="Ladder name.")] = None,
    ladder_version: Annotated[int | None, typer.Option(help="Ladder version.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many rows (1-10000).")] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines.")] = False,
    deadlines: Annotated[bool, typer.Option(
        "--deadlines", help="With --dispute: each regulatory deadline of the dispute, met, "
        "missed (and by how much: hours, business days; unknown when only the source says "
        "missed), at_risk (within 48 h), pending or undetermined, with the basis (record or "
        "source) and the action, instant and actor that met it.")] = False,
    deadline: Annotated[str | None, typer.Option(
        help="With --dispute: only this deadline (implies --deadlines).")] = None,
) -> None:
    """Search the ledger; rows ordered by decision time.

    An unknown --decision (neither a ledger event nor a recorded decision), a --tier no
    ladder has and --from after --to are refused (exit 2) with the known names listed; a
    --ladder no ladder has exits 3 (not found).
    """
    from escalation.service_layer.disputes import dispute_arg

    if source is not None and dispute is None:
        raise InvalidInput("--source needs --dispute (the external id)")
    if dispute is not None:
        dispute = str(dispute_arg(dispute, source))
    if deadlines or deadline is not None:
        _search_deadlines(dispute, deadline, as_json)
        return
    from escalation.service_layer.audit_export import (
        COLUMNS,
        check_filter,
        export_value,
        search,
    )
    flt = _filter(dispute=dispute, tier=tier, decision=decision, since=since, until=until,
                  actor=actor, ladder=ladder, ladder_version=ladder_version)
    from escalation.bootstrap import ledger_search_for

    with _engine() as engine:
        ledger = ledger_search_for(engine)
        check_filter(ledger, flt, _ladder_versions())
        rows = search(ledger, flt, limit)
    if as_json:
        for r in rows:
            d = asdict(r)
            sys.stdout.write(
                json.dumps({c: export_value(c, d.get(c)) for c in COLUMNS if c in d}) + "\n"
            )
        return
    table = Table(title=f"{len(rows)} ledger row(s)")
    for col in ("decided_at", "dispute_id", "seq", "decision", "from", "to", "actor", "ladder"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r.decided_at.isoformat(), str(r.dispute_id), str(r.seq), r.match_decision,
            r.from_tier or "", r.to_tier or "", r.actor, f"{r.ladder}@{r.ladder_version}",
        )
    out.print(table)


@audit_app.command("export")
def audit_export(  # noqa: PLR0913 - a typer command: one parameter per option (ADR 0036)
    fmt: Annotated[str, typer.Option("--format", help="csv or jsonl.")] = "csv",
    since: Annotated[str | None, typer.Option("--from", help="decided_at >= (ISO-8601).")] = None,
    until: Annotated[str | None, typer.Option("--to", help="decided_at < (ISO-8601).")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print JSON: rows, file, sha256, manifest.")] = False,
    out_file: Annotated[Path, typer.Option("--out", help="Output file.")] = Path("audit.csv"),
    bom: Annotated[bool, typer.Option(
        "--bom", help="CSV: write the UTF-8 byte order mark first (for spreadsheets that "
                      "guess the encoding).")] = False,
) -> None:
    """Stream the ledger to a file in constant memory, plus <file>.manifest.json.

    Refused before anything is written (exit 2): a missing output directory, --from after --to,
    --bom with jsonl.
    """
    from escalation.bootstrap import checkpoint_store_for, document_signer_for
    from escalation.service_layer.audit_export import (
        AuditFilter,
        ExportLedger,
        check_output_path,
        count_rows,
        export_ledger,
        manifest_path,
    )
    from escalation.service_layer.case_file import seal_export

    if fmt not in ("csv", "jsonl"):
        raise InvalidInput(f"--format must be csv or jsonl, got {fmt!r}")
    if bom and fmt != "csv":
        raise InvalidInput("--bom is for CSV output: it needs --format csv")
    check_output_path(out_file)
    flt = AuditFilter(since=parse_time(since, "--from"), until=parse_time(until, "--to"))
    cmd = ExportLedger("csv" if fmt == "csv" else "jsonl", out_file, flt, bom)
    from escalation.bootstrap import ledger_search_for

    with _engine() as engine:
        ledger = ledger_search_for(engine)
        if sys.stderr.isatty():
            from rich.progress import Progress

            total = count_rows(ledger, flt)
            with Progress(console=err) as bar:
                task = bar.add_task("exporting", total=total)
                manifest = export_ledger(cmd, ledger, lambda n: bar.update(task, completed=n))
        else:
            manifest = export_ledger(cmd, ledger)
        # the manifest names the checkpoint that covers the file, and is signed
        seal_export(out_file, manifest_path(out_file), checkpoint_store_for(engine),
                    document_signer_for())
    if as_json:
        _print_json({"rows": manifest.row_count, "file": str(out_file),
                     "sha256": manifest.sha256, "manifest": str(manifest_path(out_file))})
        return
    out.print(f"{manifest.row_count} rows -> {out_file} (sha256 {manifest.sha256})")


# --------------------------------------------------------------------------- report
def _print_missed(report: Any, listed: Iterable[Any], fmt: str, out_file: Path | None,
                  bom: bool = False) -> None:
    """``report sla --missed``: one row per missed deadline of ``listed`` (streamed: csv
    writes each row as it comes; the table holds them to print)."""
    from escalation.domain.csv_cells import CsvWriter
    from escalation.service_layer.sla_report import MISSED_COLUMNS

    if fmt == "csv":
        sink = sys.stdout if out_file is None else out_file.open("w", encoding="utf-8",
                                                                 newline="")
        try:
            writer = CsvWriter(sink, MISSED_COLUMNS, bom=bom)
            for o in listed:
                row = o.as_row()
                writer.row(row.get(k) for k in MISSED_COLUMNS)
        finally:
            if out_file is not None:
                sink.close()
        if out_file is not None:
            out.print(f"wrote {out_file}")
        return
    rows = [o.as_row() for o in listed]
    table = Table(title=f"Missed regulatory deadlines {report.since.isoformat()} .. "
                        f"{report.until.isoformat()}: {len(rows)}")
    for col in MISSED_COLUMNS:
        table.add_column(col)
    for row in rows:
        table.add_row(*[str(v) for v in row.values()])
    out.print(table)


def _check_sla_options(fmt: str, as_json: bool, out_file: Path | None, missed: bool,
                       bom: bool) -> None:
    """``report sla``'s options checked together, before the database is reached (a
    month's report reads much of the ledger).

    Raises:
        InvalidInput: an unknown format, ``--json`` with ``--format`` or ``--out``,
            ``--missed`` with html, ``--out`` with the table format, ``--bom`` with any
            output but CSV.
    """
    if fmt not in ("table", "csv", "html"):
        raise InvalidInput(f"--format must be table, csv or html, got {fmt!r}")
    if as_json and (fmt != "table" or out_file is not None):
        raise InvalidInput("--json prints JSON on stdout: leave out --format and --out")
    if missed and fmt == "html":
        raise InvalidInput("--missed supports --format table or csv")
    if out_file is not None and fmt == "table":
        raise InvalidInput("--out needs --format csv" if missed
                           else "--out needs --format csv or html")
    if bom and (fmt != "csv" or as_json):
        raise InvalidInput("--bom is for CSV output: it needs --format csv (and no --json)")


@report_app.command("sla")
def report_sla(  # noqa: PLR0913 - a typer command: one parameter per option (ADR 0036)
    since: Annotated[str, typer.Option("--from", help="Window start (ISO-8601).")],
    until: Annotated[str, typer.Option("--to", help="Window end, exclusive (ISO-8601).")],
    fmt: Annotated[str, typer.Option("--format", help="table, csv or html.")] = "table",
    out_file: Annotated[Path | None, typer.Option("--out", help="Write to this file.")] = None,
    grace_s: Annotated[int, typer.Option(help="On time = decided within N s of due.")] = 60,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the report as JSON on stdout: the answer of GET "
                       "/v1/reports/sla (from, to, grace_s, ladders: the tier rows per "
                       "ladder) plus deadlines (with --missed: the missed ones); not with "
                       "--format or --out.")] = False,
    missed: Annotated[bool, typer.Option(
        "--missed", help="List every missed regulatory deadline in the window instead: "
        "dispute, ladder@version, deadline, citation, instant in the institution's zone, "
        "basis, the late action (instant, actor), lateness (hours, business days; unknown "
        "when only the source says missed), tier at the deadline.")] = False,
    bom: Annotated[bool, typer.Option(
        "--bom", help="CSV: write the UTF-8 byte order mark first (for spreadsheets that "
                      "guess the encoding).")] = False,
) -> None:
    """SLA compliance per ladder and tier: entered, on time, breached, time in tier, deadlines
    (every deadline of a multi-deadline ladder); --missed lists the missed ones."""
    from escalation.service_layer import sla_report

    _check_sla_options(fmt, as_json, out_file, missed, bom)
    start = parse_time(since, "--from")
    end = parse_time(until, "--to")
    assert start is not None and end is not None  # noqa: S101 - required options
    sla_report.check_window(start, end, grace_s)
    if out_file is not None:
        from escalation.service_layer.audit_export import check_output_path

        check_output_path(out_file)
    cals = _institution_calendars()
    lookup = _ladder_lookup(cals)
    with _engine() as engine:
        if grace_s != sla_report.DEFAULT_GRACE_S:  # the rollup counts at the default grace
            from escalation.bootstrap import ledger_reports_for

            report = sla_report.build(sla_report.ReportSla(start, end, grace_s),
                                      ledger_reports_for(engine), cals, lookup)
            listed: Iterable[Any] = report.missed if missed else report.deadlines
        else:  # the rollup, refreshed first (ADR 0033); deadlines streamed page by page
            from escalation.bootstrap import sla_rollup_for
            from escalation.service_layer import sla_rollup

            ports = sla_rollup.RollupPorts(sla_rollup_for(engine), cals, lookup)
            report, at = sla_rollup.report(sla_rollup.RollupReport(start, end), ports)
            listed = sla_rollup.deadlines(
                sla_rollup.RollupDeadlines(start, end, at, missed_only=missed), ports)
        if as_json:
            _print_json({"from": start.isoformat(), "to": end.isoformat(),
                         "grace_s": grace_s, "ladders": sla_report.grouped(report),
                         "deadlines": [d.as_json() for d in listed]})
            return
        if missed:
            _print_missed(report, listed, fmt, out_file, bom)
            return
    if fmt == "table":
        table = Table(title=f"SLA report {start.isoformat()} .. {end.isoformat()}")
        for col in sla_report.CSV_COLUMNS:
            table.add_column(col, justify="left" if col in ("ladder", "tier") else "right")
        for f in report.tiers:
            table.add_row(*[str(v) for v in f.as_row().values()])
        out.print(table)
        return
    if fmt == "csv":
        text = sla_report.to_csv(report, bom=bom)
    else:
        from escalation.entrypoints.sla_html import to_html  # Jinja2: only for this format

        text = to_html(report)
    if out_file is None:
        sys.stdout.write(text)
    else:
        out_file.write_text(text, "utf-8")
        out.print(f"wrote {out_file}")


@report_app.command("sla-refresh")
def report_sla_refresh(
    full: Annotated[bool, typer.Option(
        "--full", help="Fold every dispute again (after a ladder or calendars change that "
                       "alters past outcomes).")] = False,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print one JSON document: full, disputes, watermark, now.")] = False,
) -> None:
    """Bring the SLA rollup up to date without printing a report: the first run on a
    database folds the whole ledger (the backfill; resumable: an interrupted run keeps its
    committed chunks and the next one continues), later runs only what changed."""
    from escalation.bootstrap import sla_rollup_for
    from escalation.service_layer import sla_rollup

    cals = _institution_calendars()
    lookup = _ladder_lookup(cals)
    with _engine() as engine:
        done = sla_rollup.refresh(sla_rollup.RefreshRollup(full=full),
                                  sla_rollup.RollupPorts(sla_rollup_for(engine), cals, lookup))
    if as_json:
        _print_json({"full": done.full, "disputes": done.disputes,
                     "watermark": done.watermark.isoformat(), "now": done.now.isoformat()})
        return
    out.print(f"{'backfill' if done.full else 'refresh'}: {done.disputes} disputes "
              f"recomputed; watermark {done.watermark.isoformat()}")

