"""``escalation ladder check|release|plan|apply|history`` (docs/ladder-migrations.md).

``check`` must work on a fresh machine (CI runs it): with no database configured it checks
the files only and says so -- it never starts the embedded servers for the checksum part,
but uses the embedded PostgreSQL when ESCALATION_HOME already runs one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from escalation.domain.errors import LadderError
from escalation.entrypoints.cli_common import (
    _app,
    _operator,
    _print_json,
    _settings,
    err,
    json_default,
    out,
)

ladder_app = typer.Typer(help="Ladder files and ladder migrations.", no_args_is_help=True)

LadderOpt = Annotated[str | None, typer.Option("--ladder", help="Ladder name (default: the "
                                               "configured default ladder).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
ActorOpt = Annotated[str | None, typer.Option(
    "--actor", help="Who acts, on record (default: ESCALATION_OPERATOR, else OS user@host).")]
ReasonOpt = Annotated[str, typer.Option(
    "--reason", help="Why, on record (e.g. a change ticket).")]


def _actor(actor: str | None) -> str:
    """``--actor``, else ESCALATION_OPERATOR, else the OS ``user@host``."""
    from escalation.service_layer.ladder_release import default_actor

    if actor is not None and not actor.strip():
        raise LadderError("--actor: must not be empty")
    return _operator(actor, default_actor())


@ladder_app.command("check")
def ladder_check(
    directory: Annotated[Path | None, typer.Option("--dir", help="Ladder directory.")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print JSON: ok, files, directory, errors, history.")] = False,
) -> None:
    """Validate every ladder file (and the checksums of applied versions). Exit 2 on errors."""
    from escalation.composition_cli import check_ladder_directory

    settings = _settings()
    path = directory or settings.ladders_dir
    if not path.is_dir():
        raise LadderError(f"{path}: (directory): ladder directory not found")
    if not any(path.glob("*.toml")):
        raise LadderError(f"{path}: (directory): no ladder files (*.toml) in it")
    own = directory is None or directory.resolve() == settings.ladders_dir.resolve()
    found = check_ladder_directory(settings, path, own=own)
    errors, note = found.errors, found.note
    files = len(list(path.glob("*.toml")))
    if as_json:
        _print_json({"ok": not errors, "files": files, "directory": str(path),
                     "errors": list(errors), "history": note})
        if errors:
            sys.exit(2)
        return
    err.print(note, markup=False, highlight=False)
    if errors:
        for line in errors:
            err.print(f"error: {line}", markup=False, highlight=False)
        err.print(f"{len(errors)} problem(s) in {files} ladder file(s)")
        sys.exit(2)
    out.print(f"{files} ladder file(s) OK in {path}")


def _rule_changes(ladders: Any, name: str, plan: Any) -> list[dict[str, Any]]:
    """Per pinned version of the plan: the deadline and action changes of the target
    version (what meets, starts or conditions a clock; docs/ladders.md "Obligations"). A
    migrated dispute is assessed by the target's rules from then on, so the plan shows
    them even when no due time moves."""
    from escalation.domain.ladder_diff import diff

    target = ladders.get(name, plan.target_version)
    out = []
    for v in plan.from_versions():
        d = diff(ladders.get(name, v), target)
        entries = [*d.deadlines, *d.actions]
        if entries:
            out.append({"from": v, "changes": [
                {"change": e.change.value, "item": e.key, "lines": list(e.lines)}
                for e in entries]})
    return out


def _plan_json(plan: Any, limit: int, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "rule_changes": rules,
        "ladder": plan.ladder, "to_version": plan.target_version, "checksum": plan.checksum,
        "plan_hash": plan.plan_hash, "escalations": len(plan.items),
        "groups": [{"from": a, "to": b, "count": n} for a, b, n in plan.groups()],
        "changed": [
            {"dispute_id": str(i.dispute_id), "seq": i.seq, "from_tier": i.from_tier,
             "to_tier": i.to_tier, "old_next": i.old_next, "new_next": i.new_next,
             "due": i.due.render()} for i in plan.changed()[:limit]
        ],
        "changed_total": len(plan.changed()),
        "from_versions": plan.from_versions(),
        "blocked": [{"dispute_id": str(b.dispute_id), "tier": b.tier, "reason": b.reason}
                    for b in plan.blocked[:limit]],
        "blocked_total": len(plan.blocked),
    }


@ladder_app.command("plan")
def ladder_plan(
    to: Annotated[int, typer.Option("--to", help="Target version.")],
    ladder: LadderOpt = None,
    limit: Annotated[int, typer.Option(help="Changed escalations listed at most.")] = 50,
    as_json: JsonOpt = False,
) -> None:
    """Dry run: what a migration to VERSION does to every pending escalation. No writes."""
    from escalation.bootstrap import ladder_ports_for
    from escalation.entrypoints.progress_bars import cli_progress
    from escalation.service_layer.ladder_migration import PlanMigration, plan_migration

    a = _app(actor="cli")
    try:
        name = ladder or a.settings.default_ladder
        with cli_progress(f"ladder plan {name}") as progress:
            plan = plan_migration(PlanMigration(name, to), ladder_ports_for(a), progress)
        now = a.scheduler.time()
    finally:
        a.close()
    rules = _rule_changes(a.ladders, name, plan)
    data = _plan_json(plan, limit, rules)
    if as_json:
        out.print_json(json.dumps(data))
        return
    table = Table(title=f"{name}: migrate {len(plan.items)} escalation(s) to v{to}")
    for col in ("from tier", "to tier", "count"):
        table.add_column(col, justify="right" if col == "count" else "left")
    for src, dst, n in plan.groups():
        table.add_row(src, dst, str(n))
    out.print(table)
    changed = plan.changed()
    if changed:
        ch = Table(title=f"next tier or due time changes ({len(changed)})")
        for col in ("dispute", "tier", "next tier", "due now", "due after (at plan time)"):
            ch.add_column(col)
        for i in changed[:limit]:
            after = i.due.resolve(now, a.calendars)
            ch.add_row(str(i.dispute_id), f"{i.from_tier} -> {i.to_tier}",
                       f"{i.old_next or '(terminal)'} -> {i.new_next or '(terminal)'}",
                       i.due.current.isoformat() if i.due.current else "(paused)",
                       after.isoformat() if after else "(paused)")
        out.print(ch)
    for r in rules:
        out.print(f"v{r['from']} -> v{to} changes what meets, starts or conditions a deadline "
                  "(migrated escalations are assessed by these rules from then on):",
                  markup=False)
        for c in r["changes"]:
            out.print(f"  {c['change']} {c['item']}: {'; '.join(c['lines'])}", markup=False)
    for b in plan.blocked[:limit]:
        out.print(f"cannot migrate {b.dispute_id} ({b.tier}): {b.reason}", markup=False)
    out.print(f"plan hash: {plan.plan_hash} (names the change: {name} v"
              f"{', v'.join(str(v) for v in plan.from_versions()) or '-'} -> v{to}, file "
              f"checksums, rules; not the escalations)")
    if plan.blocked:
        out.print(f"{len(plan.blocked)} escalation(s) cannot be migrated: apply leaves them "
                  f"on their pinned version and exits 1")
    out.print(f"apply with: escalation ladder apply --ladder {name} --to {to} "
              f"--plan-hash {plan.plan_hash} --reason <ticket>")


@ladder_app.command("release")
def ladder_release(
    version: Annotated[int, typer.Option("--version", help="Version to release.")],
    ladder: LadderOpt = None,
    actor: ActorOpt = None,
    reason: ReasonOpt = "",
    as_json: JsonOpt = False,
) -> None:
    """Put a ladder version live: validate it and record its checksum (exit 2 if invalid).

    New escalations are pinned to the newest released version; pending ones stay on theirs
    until `ladder apply`. Releasing an already released, unchanged file does nothing.
    """
    from escalation.bootstrap import ladder_files_for, ladder_history_for
    from escalation.service_layer.ladder_release import ReleaseVersion, release_version

    who = _actor(actor)
    a = _app(actor="cli")
    try:
        name = ladder or a.settings.default_ladder
        res = release_version(ReleaseVersion(name, version, who, reason, a.scheduler.time()),
                              history=ladder_history_for(a), files=ladder_files_for(a))
    finally:
        a.close()
    row = res.row
    if as_json:
        out.print_json(json.dumps({**_asdict(row), "new": res.new}, default=json_default))
        return
    verb = "released" if res.new else "already released"
    out.print(f"{row.ladder}@{row.version} {verb} (checksum {row.checksum[:12]}, on "
              f"{row.released_at.isoformat(timespec='seconds')} by {row.released_by}"
              f"{', reason: ' + row.reason if row.reason else ''})", markup=False,
              highlight=False)
    if row.ledger is not None:
        out.print(f"on the ledger: {row.ledger.event.value}, chain {row.ledger.chain_id} "
                  f"#{row.ledger.seq}, row hash {row.ledger.row_hash[:16]} (escalation audit "
                  f"search --decision {row.ledger.event.value} --ladder {row.ladder})",
                  markup=False, highlight=False)


@ladder_app.command("apply")
def ladder_apply(  # noqa: PLR0913 - a typer command: one parameter per option (ADR 0036)
    to: Annotated[int, typer.Option("--to", help="Target version (released).")],
    plan_hash: Annotated[str, typer.Option("--plan-hash", help="Hash printed by `plan`.")],
    ladder: LadderOpt = None,
    batch_size: Annotated[int, typer.Option(help="Escalations per transaction.")] = 500,
    actor: ActorOpt = None,
    reason: ReasonOpt = "",
    as_json: JsonOpt = False,
) -> None:
    """Migrate the pending escalations to VERSION in resumable batches, while workers fire.

    Each escalation is re-validated when its batch is written. Exit 1 when some could not be
    migrated (blocked: left on their pinned version). Re-running a finished apply with the
    same plan hash does nothing and exits 0 ("version N of LADDER is already applied (on
    DATE by ACTOR); nothing to do").
    """
    from escalation.bootstrap import ladder_ports_for, schedule_for
    from escalation.entrypoints.progress_bars import cli_progress
    from escalation.service_layer.ladder_migration import (
        ApplyHooks,
        ApplyMigration,
        apply_migration,
    )

    who = _actor(actor)
    a = _app(actor=who)
    name = ladder or a.settings.default_ladder
    try:
        with cli_progress(f"ladder apply {name}") as progress:
            report = apply_migration(
                ApplyMigration(ladder=name, to_version=to, plan_hash=plan_hash, actor=who,
                               reason=reason, batch_size=batch_size,
                               lock_wait_s=a.settings.lock_ttl_s),
                ladder_ports_for(a),
                ApplyHooks(progress=progress, on_scheduled=schedule_for(a, only_ahead=True)),
            )
    finally:
        a.close()
    _print_apply(report, as_json)
    if report.blocked:
        sys.exit(1)


def _print_apply(report: Any, as_json: bool) -> None:
    if report.already_applied is not None:
        message = report.already_applied_message()
        if as_json:
            out.print_json(json.dumps({"run_id": report.run_id, "already_applied": True,
                                       "message": message}))
        else:
            out.print(message, markup=False, highlight=False)
        return
    if as_json:
        out.print_json(json.dumps({
            "run_id": report.run_id, "resumed": report.resumed, "planned": report.planned,
            "migrated": report.migrated, "replanned": report.replanned,
            "unchanged": report.unchanged, "breach_suppressed": report.suppressed,
            "blocked": len(report.blocked), "not_owner": report.not_owner,
            "left_to_workers": [str(d) for d in report.left_to_workers],
            "redis_repaired": report.redis_repaired}))
        return
    out.print(f"run {report.run_id}{' (resumed)' if report.resumed else ''}: "
              f"{report.summary()}", markup=False, highlight=False)
    for b in report.blocked[:20]:
        err.print(f"blocked {b.dispute_id} ({b.tier}): {b.reason}", markup=False,
                  highlight=False)


@ladder_app.command("history")
def ladder_history(ladder: LadderOpt = None, as_json: JsonOpt = False) -> None:
    """Releases (who, when, why, checksum) and `ladder apply` runs (one row per run)."""
    from escalation.bootstrap import ladder_history_for
    from escalation.service_layer.ladder_migration import require_known_ladder

    a = _app(actor="cli")
    try:
        store = ladder_history_for(a)
        rows = store.history(ladder)
        releases = list(store.releases(ladder).values())
        if ladder is not None and not rows and not releases:
            require_known_ladder(a.ladders.on_disk(), store.released_checksums(), ladder)
    finally:
        a.close()
    if as_json:
        out.print_json(json.dumps({"releases": [_asdict(r) for r in releases],
                                   "runs": [_asdict(r) for r in rows]}, default=json_default))
        return
    rel = Table(title="ladder releases")
    for col in ("ladder", "version", "released", "by", "reason", "checksum"):
        rel.add_column(col)
    for rr in releases:
        rel.add_row(rr.ladder, str(rr.version), rr.released_at.isoformat(timespec="seconds"),
                    rr.released_by, rr.reason, rr.checksum[:12])
    out.print(rel)
    table = Table(title="ladder migrations (apply runs)")
    for col in ("run", "ladder", "version", "status", "started", "finished", "by", "reason",
                "migrated", "replanned", "unchanged", "blocked", "not owner", "plan hash"):
        table.add_column(col)
    for r in rows:
        table.add_row(str(r.run_id), r.ladder, str(r.version), r.status,
                      r.started_at.isoformat(timespec="seconds"),
                      r.finished_at.isoformat(timespec="seconds") if r.finished_at else "",
                      r.applied_by, r.reason, str(r.migrated), str(r.replanned),
                      str(r.skipped), str(r.blocked), str(r.not_owner), r.plan_hash[:12])
    out.print(table)
    if not rows:
        out.print("no ladder migration applied yet")


def _asdict(row: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(row)
