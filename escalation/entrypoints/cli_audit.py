"""``escalation audit ...`` (show, verify, checkpoint, partitions, search, export) and
``escalation report sla``. See docs/audit.md.

Exit codes: 0 ok; 1 verification failed / refused operation (EscalationError); 2 usage.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from escalation.domain.errors import ConfigError, InvalidInput, NotFound
from escalation.entrypoints.cli_common import _app, _print_json, _settings, err, out, parse_time

if TYPE_CHECKING:  # SQLAlchemy is imported by the commands that reach the database
    import sqlalchemy as sa

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
    from escalation.adapters.db import make_engine
    from escalation.bootstrap import ensure_schema, resolve_urls

    urls = resolve_urls(_settings())
    engine = make_engine(urls.database_url)
    try:
        ensure_schema(engine, urls)  # the embedded database is migrated, others refused
        yield engine
    finally:
        engine.dispose()


def _catalog(calendars: Any = None) -> Any:
    """The ladder catalog of ``ESCALATION_LADDERS_DIR`` (lenient: invalid files skipped)."""
    from escalation.adapters.ladder_files import LadderCatalog

    return LadderCatalog.from_dir(_settings().ladders_dir, strict=False, calendars=calendars)


def _ladder_versions() -> list[Any]:
    """Every ladder version of ``ESCALATION_LADDERS_DIR`` (for the decisions they can record:
    a search for one no dispute has reached yet finds no rows instead of being refused; and
    for the tier ids a filter may name)."""
    return list(_catalog().all())


def _ladder_lookup(calendars: Any) -> Any:
    """``(name, version) -> Ladder`` over ``ESCALATION_LADDERS_DIR`` (LadderError when
    unknown): the deadlines' ``met_by`` and clocks for ``report sla`` and ``audit search
    --deadlines``, as the console reads them."""
    return _catalog(calendars).get


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
    from escalation.domain.escalation import parse_dispute_id
    from escalation.entrypoints.render import FULL_TRAIL_WIDTH, compact_trail_table, trail_table

    a = _app(actor="cli")
    try:
        try:
            did = parse_dispute_id(dispute_id)
        except InvalidInput:
            found = a.store.find_by_external_id(dispute_id.strip())
            if not found:
                raise NotFound(
                    f"no dispute with id or external id {dispute_id!r}"
                ) from None
            if len(found) > 1:
                raise InvalidInput(
                    f"external id {dispute_id!r} names {len(found)} disputes: "
                    + ", ".join(str(f) for f in found[:5]) + "; give the dispute UUID"
                ) from None
            did = found[0]
        rows = a.store.trail(did)
    finally:
        a.close()
    if not rows:
        raise NotFound(f"no audit rows for dispute {did}")
    if as_json:
        for r in rows:
            sys.stdout.write(json.dumps(asdict(r), default=str) + "\n")
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
def audit_verify(
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
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Recompute hash chains, projection heads, checkpoints, their signatures and the
    retention rows; compare the ledger with the last signed checkpoint; exit 1 on any break."""
    from escalation.adapters.audit_store import PostgresAuditStore
    from escalation.adapters.signing import configured_public_key, verify_signature
    from escalation.bootstrap import checkpoint_store_for, digest_verifier_for
    from escalation.entrypoints.progress import cli_progress
    from escalation.service_layer.checkpoint import read_digest, verify

    if dispute is not None and all_:
        raise InvalidInput("give --dispute ID or --all, not both")
    dig = None if digest is None else read_digest(digest)
    verifier = digest_verifier_for(public_key)
    bad_signature = None
    signature_checked: bool | None = None  # None: no --digest
    if dig is not None:
        key = configured_public_key(path=public_key)
        signature_checked = key is not None
        if key is None:
            err.print(f"WARNING: the signature of {digest} was NOT checked: no public key "
                      "(give --public-key or set ESCALATION_CHECKPOINT_PUBLIC_KEY_FILE); the "
                      "digest file is trusted as it stands", markup=False, highlight=False)
        else:
            bad_signature = verify_signature(dig, key)
    did = _uuid(dispute)
    with _engine() as engine, cli_progress("audit verify") as progress:
        known = did is None or PostgresAuditStore(engine).get(did) is not None
        report = verify(checkpoint_store_for(engine), did, dig, progress=progress,
                        verifier=verifier, retention_days=_settings().audit_retention_days)
    if bad_signature is not None:
        report.checkpoint_errors.insert(0, f"{digest}: {bad_signature}")
    if report.ok and not known:
        # nothing to verify is not "intact": a mistyped id must not read as a pass (a
        # sealed dispute whose rows are gone is a checkpoint mismatch, reported below)
        raise NotFound(f"no audit rows for dispute {did}")
    if as_json:
        _verify_json(report, digest_signature_checked=signature_checked)
    elif report.ok:
        cp = report.checkpoint_id
        counted = f"{report.rows} row(s) of {report.disputes} dispute(s) checked"
        if cp:
            out.print(f"ok: chains intact, {counted}; last signed checkpoint {cp} matches"
                      if verifier is not None else
                      f"ok: chains intact, {counted}; last checkpoint {cp} matches",
                      markup=False, highlight=False)
        else:
            out.print(f"ok: chains intact, {counted}; no checkpoint yet "
                      "(run `escalation audit checkpoint`)", markup=False, highlight=False)
    else:
        _verify_problems(report)
    if not as_json:
        for note in report.notes:
            err.print(f"note: {note}", markup=False, highlight=False)
    if not report.ok:
        raise typer.Exit(1)


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
    """Seal a checkpoint: verify every chain and retention row against the last signed
    checkpoint (refuse on any break), then a Merkle root over all chain heads, chained to the
    previous one, signed with Ed25519 (ESCALATION_CHECKPOINT_KEY_FILE or
    ESCALATION_CHECKPOINT_KEY); the signature is stored with it. Needs a database role that
    may insert checkpoints (escalation_sealer or the owner), not escalation_app."""
    from escalation.adapters.signing import KEY_ENV, KEY_FILE_ENV
    from escalation.bootstrap import checkpoint_store_for, digest_signer_for, digest_verifier_for
    from escalation.service_layer.checkpoint import create_checkpoint, signed_digest

    signer = digest_signer_for()
    if signer is None:
        raise InvalidInput(f"set {KEY_FILE_ENV} (or {KEY_ENV}) to an Ed25519 private key: "
                           "checkpoints are signed (generate one with `escalation audit keygen`)")
    from sqlalchemy.exc import DBAPIError

    with _engine() as engine:
        try:
            cp = create_checkpoint(checkpoint_store_for(engine), actor, signer,
                                   digest_verifier_for(),
                                   retention_days=_settings().audit_retention_days)
        except DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) != "42501":
                raise
            raise ConfigError(
                f"the database role {engine.url.username!r} may not seal checkpoints "
                f"({str(exc.orig).splitlines()[0]}): run `audit checkpoint` as "
                "escalation_sealer or the owner (docs/audit.md, Defence in depth)") from None
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
    from escalation.adapters.signing import generate_keypair

    generate_keypair(private_out, public_out)
    if as_json:
        _print_json({"private_key": str(private_out), "public_key": str(public_out)})
        return
    out.print(f"private key {private_out} (keep secret), public key {public_out} (publish)",
              markup=False, highlight=False)


@audit_app.command("public-key")
def audit_public_key() -> None:
    """Print the public key (PEM) of the configured checkpoint signing key."""
    from escalation.adapters.signing import KEY_FILE_ENV, load_private_key, public_pem

    key = load_private_key()
    if key is None:
        raise InvalidInput(f"no signing key configured ({KEY_FILE_ENV})")
    sys.stdout.write(public_pem(key.public_key()).decode())


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
    from escalation.adapters.signing import load_public_key, verify_signature
    from escalation.service_layer.checkpoint import read_digest

    key = load_public_key(public_key)
    dig = read_digest(digest)
    problems = [p for p in [verify_signature(dig, key)] if p]
    if previous is not None:
        prev = read_digest(previous)
        problems += [f"{previous}: {p}" for p in [verify_signature(prev, key)] if p]
        pid, did = int(prev.get("checkpoint_id", -1)), int(dig.get("checkpoint_id", -2))
        if pid + 1 != did:
            # the link is checked or the digest is refused: it printed "ok" for a --previous
            # two checkpoints back, or after it, without comparing anything
            problems.append(f"{previous} is checkpoint {pid}, not the one just before "
                            f"checkpoint {did}: give the digest of checkpoint {did - 1}")
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
def audit_case_file(
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
    from escalation.domain.escalation import parse_dispute_id
    from escalation.entrypoints.cli_common import _operator
    from escalation.service_layer.audit_export import check_filter, check_output_path
    from escalation.service_layer.case_file import ExportCaseFile, export_case_file
    from escalation.service_layer.ladder_release import default_actor

    check_output_path(out_file)
    search = None
    if any(v is not None for v in (ladder, tier, decision, since, until)):
        search = _filter(dispute=None, tier=tier, decision=decision, since=since,
                         until=until, actor=None, ladder=ladder, ladder_version=None)
    ids = tuple(parse_dispute_id(d) for d in disputes or [])
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
    from escalation.adapters.partitions import ensure_partitions, list_partitions

    n = _settings().audit_partitions_ahead if ahead is None else ahead
    with _engine() as engine:
        created = ensure_partitions(engine, datetime.now(UTC), n)
        parts = list_partitions(engine)
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
    from escalation.adapters.partitions import drop_expired
    from escalation.bootstrap import retired_figures_for

    settings = _settings(audit_retention_days=retention_days)
    app = _app()
    try:
        result = drop_expired(
            app.engine,
            datetime.now(UTC),
            settings.audit_retention_days,
            actor=actor,
            detach_only=detach_only,
            names=names or None,
            retire=retired_figures_for(app).save,
        )
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


def _institution_calendars() -> Any:
    """The calendar registry with the deployment's institution zone and calendar."""
    from escalation.adapters.calendar_files import load_institution_calendars

    settings = _settings()
    return load_institution_calendars(settings.calendars_file, settings.institution_calendar,
                                      settings.institution_timezone)


def _search_deadlines(dispute: str | None, name: str | None, as_json: bool) -> None:
    """``audit search --dispute ID --deadlines [--deadline NAME]``."""
    from escalation.adapters.report_queries import PostgresReports
    from escalation.domain.escalation import parse_dispute_id
    from escalation.service_layer.sla_report import MISSED_COLUMNS, dispute_deadlines

    if dispute is None:
        raise InvalidInput("--deadlines needs --dispute")
    did = parse_dispute_id(dispute)
    cals = _institution_calendars()
    with _engine() as engine:
        found = dispute_deadlines(PostgresReports(engine), did, name, cals,
                                  ladders=_ladder_lookup(cals))
    if name is not None and not found:
        raise InvalidInput(f"dispute {did} has no deadline {name!r}")
    if as_json:
        for o in found:
            sys.stdout.write(json.dumps(o.as_json(), default=str) + "\n")
        return
    table = Table(title=f"{len(found)} regulatory deadline(s) of {did}")
    for col in MISSED_COLUMNS[2:]:
        table.add_column(col)
    for o in found:
        table.add_row(*[str(v) for v in list(o.as_row().values())[2:]])
    out.print(table)


@audit_app.command("search")
def audit_search(
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
    ladder has and --from after --to are refused (exit 2) with the known names listed.
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
    from escalation.adapters.audit_search import PostgresLedgerSearch

    with _engine() as engine:
        ledger = PostgresLedgerSearch(engine)
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
def audit_export(
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

    Refused before anything is written (exit 2): a missing output directory, --from after --to.
    """
    from escalation.bootstrap import checkpoint_store_for, document_signer_for
    from escalation.service_layer.audit_export import (
        AuditFilter,
        check_output_path,
        count_rows,
        export,
        manifest_path,
    )
    from escalation.service_layer.case_file import seal_export

    if fmt not in ("csv", "jsonl"):
        raise InvalidInput(f"--format must be csv or jsonl, got {fmt!r}")
    check_output_path(out_file)
    flt = AuditFilter(since=parse_time(since, "--from"), until=parse_time(until, "--to"))
    from escalation.adapters.audit_search import PostgresLedgerSearch

    with _engine() as engine:
        ledger = PostgresLedgerSearch(engine)
        if sys.stderr.isatty():
            from rich.progress import Progress

            total = count_rows(ledger, flt)
            with Progress(console=err) as bar:
                task = bar.add_task("exporting", total=total)
                manifest = export(ledger, fmt, out_file, flt,  # type: ignore[arg-type]
                                  lambda n: bar.update(task, completed=n), bom=bom)
        else:
            manifest = export(ledger, fmt, out_file, flt, bom=bom)  # type: ignore[arg-type]
        # the manifest names the checkpoint that covers the file, and is signed
        seal_export(out_file, manifest_path(out_file), checkpoint_store_for(engine),
                    document_signer_for())
    if as_json:
        _print_json({"rows": manifest.row_count, "file": str(out_file),
                     "sha256": manifest.sha256, "manifest": str(manifest_path(out_file))})
        return
    out.print(f"{manifest.row_count} rows -> {out_file} (sha256 {manifest.sha256})")


# --------------------------------------------------------------------------- report
def _print_missed(report: Any, fmt: str, out_file: Path | None, bom: bool = False) -> None:
    """``report sla --missed``: one row per missed deadline (table, csv; html refused)."""
    from escalation.service_layer.sla_report import MISSED_COLUMNS, missed_csv

    if fmt == "html":
        raise InvalidInput("--missed supports --format table or csv")
    if fmt == "csv":
        text = missed_csv(report, bom=bom)
        if out_file is None:
            sys.stdout.write(text)
        else:
            out_file.write_text(text, "utf-8")
            out.print(f"wrote {out_file}")
        return
    if out_file is not None:
        raise InvalidInput("--out needs --format csv")
    table = Table(title=f"Missed regulatory deadlines {report.since.isoformat()} .. "
                        f"{report.until.isoformat()}: {len(report.missed)}")
    for col in MISSED_COLUMNS:
        table.add_column(col)
    for o in report.missed:
        table.add_row(*[str(v) for v in o.as_row().values()])
    out.print(table)


@report_app.command("sla")
def report_sla(
    since: Annotated[str, typer.Option("--from", help="Window start (ISO-8601).")],
    until: Annotated[str, typer.Option("--to", help="Window end, exclusive (ISO-8601).")],
    fmt: Annotated[str, typer.Option("--format", help="table, csv or html.")] = "table",
    out_file: Annotated[Path | None, typer.Option("--out", help="Write to this file.")] = None,
    grace_s: Annotated[int, typer.Option(help="On time = decided within N s of due.")] = 60,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the report as JSON on stdout: window, grace_s, tiers per "
                       "ladder, deadlines (with --missed: the missed ones); not with --format "
                       "or --out.")] = False,
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

    if fmt not in ("table", "csv", "html"):
        raise InvalidInput(f"--format must be table, csv or html, got {fmt!r}")
    if as_json and (fmt != "table" or out_file is not None):
        raise InvalidInput("--json prints JSON on stdout: leave out --format and --out")
    start = parse_time(since, "--from")
    end = parse_time(until, "--to")
    assert start is not None and end is not None  # noqa: S101 - required options
    if out_file is not None:
        from escalation.service_layer.audit_export import check_output_path

        check_output_path(out_file)
    from escalation.adapters.report_queries import PostgresReports

    cals = _institution_calendars()
    with _engine() as engine:
        report = sla_report.build(PostgresReports(engine), start, end, grace_s,
                                  calendars=cals, ladders=_ladder_lookup(cals))
    if as_json:
        shown = report.missed if missed else report.deadlines
        _print_json({"from": start.isoformat(), "to": end.isoformat(), "grace_s": grace_s,
                     "tiers": sla_report.grouped(report),
                     "deadlines": [d.as_json() for d in shown]})
        return
    if missed:
        _print_missed(report, fmt, out_file, bom)
        return
    if fmt == "table":
        table = Table(title=f"SLA report {start.isoformat()} .. {end.isoformat()}")
        for col in sla_report.CSV_COLUMNS:
            table.add_column(col, justify="left" if col in ("ladder", "tier") else "right")
        for f in report.tiers:
            table.add_row(*[str(v) for v in f.as_row().values()])
        if out_file is not None:
            raise InvalidInput("--out needs --format csv or html")
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

