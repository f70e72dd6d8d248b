"""Operations commands: notify, dead, reconcile, doctor, maintenance (docs/reliability.md)."""

from __future__ import annotations

import random
import signal
from typing import TYPE_CHECKING, Annotated, Any

import typer

from escalation.domain.errors import InvalidInput
from escalation.entrypoints.cli_common import _app, _print_json, _settings, err, out

if TYPE_CHECKING:
    from escalation.bootstrap import App
    from escalation.service_layer.dead_letters import DeadLetters

app = typer.Typer()  # top-level commands, merged into the root by cli.py
dead_app = typer.Typer(help="Dead letters: poison escalations, undeliverable notifications.",
                       no_args_is_help=True)
maint_app = typer.Typer(help="Recurring maintenance (leader-elected, run once).",
                        no_args_is_help=True)


def _dead(a: App) -> DeadLetters:
    from escalation.bootstrap import dead_letters_for

    return dead_letters_for(a)


def _webhook_key() -> bytes:
    """The signing key from ESCALATION_WEBHOOK_SECRET (required with a webhook URL).

    Raises:
        InvalidInput: the secret is not set.
    """
    from escalation.composition_cli import webhook_key

    secret = _settings().webhook_secret
    if secret is None or not secret.get_secret_value():
        raise InvalidInput("ESCALATION_WEBHOOK_SECRET must be set: every webhook delivery "
                           "is signed (Standard Webhooks, HMAC-SHA256)")
    return webhook_key(secret.get_secret_value())


def _check_notify_options(webhook_url: str | None, discard: bool, timeout_s: float,
                          concurrency: int, most: int) -> None:
    """Refuse bad ``notify`` options before anything is read or written.

    Raises:
        InvalidInput: naming the option: --concurrency outside 1-``most``, --timeout-s <= 0,
            a non-http(s) --webhook-url, no URL without --discard.
    """
    if not 1 <= concurrency <= most:
        raise InvalidInput(f"--concurrency must be 1-{most}, got {concurrency}")
    if not timeout_s > 0:
        raise InvalidInput(f"--timeout-s must be > 0 seconds, got {timeout_s}")
    if webhook_url and not webhook_url.startswith(("http://", "https://")):
        raise InvalidInput(f"--webhook-url must be an http:// or https:// URL, got {webhook_url!r}")
    if not webhook_url and not discard:
        raise InvalidInput("--webhook-url is required (or ESCALATION_WEBHOOK_URL); pass "
                           "--discard to acknowledge notifications without delivering them")


@app.command()
def notify(  # noqa: PLR0913 - a typer command: one parameter per option (ADR 0036)
    webhook_url: Annotated[str | None, typer.Option(
        envvar="ESCALATION_WEBHOOK_URL",
        help="POST each notification here (or set ESCALATION_WEBHOOK_URL). Required unless "
             "--discard. Deliveries are signed (Standard Webhooks) with "
             "ESCALATION_WEBHOOK_SECRET, which is then required; redirects are never followed.",
    )] = None,
    discard: Annotated[bool, typer.Option(
        help="With no webhook URL: acknowledge every notification WITHOUT delivering it "
             "(the review stream is then the only queue).")] = False,
    timeout_s: Annotated[float, typer.Option(help="Webhook timeout, seconds.")] = 10.0,
    concurrency: Annotated[int, typer.Option(
        help="Most deliveries at once (1-256; one dispute's notifications are always "
             "delivered in order, one at a time).")] = 8,
    tier: Annotated[str | None, typer.Option(help="Only this tier's review queue.")] = None,
    burst: Annotated[bool, typer.Option(
        help="Process what is there, print a summary, then exit.")] = False,
    idle_ms: Annotated[int, typer.Option(help="Take over entries idle this long.")] = 60_000,
    backoff: Annotated[str, typer.Option(
        help="Retry ladder: comma-separated seconds, e.g. 5,30,300,3600.")] = "5,30,300,3600",
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the exit summary as JSON.")] = False,
) -> None:
    """Deliver review-queue notifications (consumer group, retries with backoff, dead letters).

    Needs --webhook-url (or ESCALATION_WEBHOOK_URL); without one it refuses to run unless
    --discard says to acknowledge notifications without delivering them. Shows progress on
    a terminal; on exit prints one summary line: delivered / acknowledged without delivery /
    retried / dead-lettered. With --burst it exits 1 when any delivery failed (retried or
    dead-lettered), else 0.
    """
    from escalation.bootstrap import delivery_fanout, reliability_for, webhook_client_for
    from escalation.entrypoints.progress_bars import cli_progress
    from escalation.logs import get_logger
    from escalation.service_layer.notify import (
        MAX_CONCURRENCY,
        ConsumeReviews,
        Notifier,
        NotifyPorts,
        NotifyReport,
        parse_backoff,
    )

    policy = parse_backoff(backoff)
    _check_notify_options(webhook_url, discard, timeout_s, concurrency, MAX_CONCURRENCY)
    key = _webhook_key() if webhook_url else b""
    a = _app()
    if tier is not None:  # a review queue exists per tier of a released ladder
        known = sorted({t for ladder in a.ladders.all() for t in ladder.tier_ids})
        if tier not in known:
            a.close()
            raise InvalidInput(f"--tier: unknown tier {tier!r}; the released ladders' tiers "
                               f"are {', '.join(known)}")
    url = webhook_url
    if not url:
        get_logger(__name__).warning(
            "notify.no_webhook",
            detail="no --webhook-url / ESCALATION_WEBHOOK_URL: notifications are acknowledged "
                   "without delivery",
        )
    client = None if not url else webhook_client_for(url, key, timeout_s, concurrency)
    deliver = None if client is None else client.deliver
    fanout = delivery_fanout(concurrency)
    n = Notifier(
        ConsumeReviews(a.actor, a.actor, policy, tier=tier, idle_ms=idle_ms,
                       concurrency=concurrency),
        NotifyPorts(reliability_for(a), a.scheduler, a.store, deliver, fanout),
        rng=random.Random())
    stop = {"flag": False}

    def handler(signum: int, frame: Any) -> None:
        stop["flag"] = True

    signal.signal(signal.SIGTERM, handler)
    total = NotifyReport()
    try:
        with cli_progress("notify") as progress:
            while not stop["flag"]:
                r = n.run_once(block_ms=None if burst else 1000)
                total.add(r)
                progress("handled", total.handled, None)
                # a pass that only skipped other tiers' entries (--tier) still read some:
                # ending there left that tier's entries behind a full page of others
                if burst and not (r.handled or r.skipped):
                    break
    finally:
        fanout.close()
        if client is not None:
            client.close()
        a.close()
        if as_json:
            _print_json({"delivered": total.delivered, "acknowledged": total.acknowledged,
                         "retried": total.deferred, "dead_lettered": total.dead,
                         "recovered": total.recovered, "held": total.held,
                         "webhook": bool(url)})
        else:
            line = total.summary()
            if not url:
                line += " (no webhook configured)"
            out.print(line, markup=False, highlight=False)
    if burst and (total.deferred or total.dead):  # something was not delivered: a cron
        raise typer.Exit(1)                        # job or CI step must see it


JsonAlways = Annotated[bool, typer.Option(
    "--json", help="Print JSON (the output is JSON either way).")]


@dead_app.command("list")
def dead_list(limit: Annotated[int, typer.Option(help="At most this many (1-10000).")] = 100,
              as_json: JsonAlways = False) -> None:
    """List dead letters, oldest first (JSON)."""
    a = _app()
    try:
        _print_json(_dead(a).list(limit))
    finally:
        a.close()


@dead_app.command("show")
def dead_show(member: Annotated[str, typer.Argument(help="Dead-letter member.")],
              as_json: JsonAlways = False) -> None:
    """Show one dead letter (JSON)."""
    a = _app()
    try:
        _print_json(_dead(a).show(member))
    finally:
        a.close()


@dead_app.command("retry")
def dead_retry(
    member: Annotated[str | None, typer.Argument(help="Dead-letter member.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Every dead letter (see --kind, "
                                       "--match) instead of one member.")] = False,
    kind: Annotated[str | None, typer.Option(
        help="With --all: decision (poison escalations) or notify (notifications).")] = None,
    match: Annotated[str | None, typer.Option(
        help="With --all: only records containing this text (e.g. a ladder file name).")]
        = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Schedule a dead letter again, due now (--all: every one that matches)."""
    if (member is None) == (not all_):
        raise InvalidInput("give one dead-letter MEMBER or --all (not both)")
    if not all_ and (kind is not None or match is not None):
        raise InvalidInput("--kind and --match go with --all")
    a = _app()
    try:
        if member is not None:
            outcome = _dead(a).retry(member)
            if as_json:
                _print_json({"member": member, "outcome": outcome})
            else:
                out.print(outcome)
            return
        outcomes = _dead(a).retry_all(kind=kind, match=match)
        total = sum(outcomes.values())
        if as_json:
            _print_json({"total": total, "outcomes": outcomes})
            return
        detail = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items()))
        out.print(f"dead retry --all: {total} dead letter(s)" + (f": {detail}" if detail
                                                                else ""),
                  markup=False, highlight=False)
    finally:
        a.close()


@dead_app.command("purge")
def dead_purge(
    member: Annotated[str, typer.Argument(help="Dead-letter member.")],
    reason: Annotated[str, typer.Option(help="Why (stored in the PURGED ledger row).")],
    yes: Annotated[bool, typer.Option("--yes", help="Confirm: purge is permanent.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Remove a dead letter for good (leaves a PURGED ledger row). Needs --yes and --reason."""
    if not yes:  # a usage error, before any server is reached
        raise InvalidInput("purge is permanent: confirm with --yes")
    a = _app(actor="admin")
    try:
        written = _dead(a).purge(member, confirm=yes, reason=reason)
        if as_json:
            _print_json({"member": member, "purged": True, "ledger_row_written": written})
            return
        out.print("purged" + ("" if written else " (dispute unknown: no ledger row)"))
    finally:
        a.close()


def _report_ahead(rep: Any, dry_run: bool) -> None:
    """The lines of a reconcile run about Redis ahead of the ledger (ADR 0014); exit 1 when
    escalations ahead are still held by a worker's lease."""
    from escalation.service_layer.reconcile import DiffKind

    if rep.lost_decisions:
        err.print(f"reconcile: {len(rep.lost_decisions)} decision(s) were notified to the "
                  "review queue but are not on the ledger (Redis was ahead of it); each is "
                  "named on a SCHEDULE_RESET row of its dispute and listed under "
                  "lost_decision_entries", markup=False, highlight=False)
    if rep.resync_cleared:
        err.print("reconcile: Redis reset to the ledger; the namespace's resync mark is "
                  "cleared (workers fire again)", markup=False, highlight=False)
    held = sum(1 for d in rep.diffs if d.held is DiffKind.AHEAD)
    if not dry_run and not rep.errors and rep.count(DiffKind.AHEAD, repaired=False) + held:
        err.print("error: reconcile: escalations ahead of the ledger are still held by a "
                  "worker's lease; run `escalation reconcile` again", markup=False,
                  highlight=False)
        raise typer.Exit(1)


@app.command("reconcile")
def reconcile_cmd(
    dry_run: Annotated[bool, typer.Option(help="Only list the differences.")] = False,
    as_json: JsonAlways = False,
    repair_projection: Annotated[bool, typer.Option(
        help="Set projection rows that differ from their ledger from the ledger (only when "
             "the chain verifies up to the row's head).")] = False,
    full: Annotated[bool, typer.Option(
        help="Check every pending escalation and every ZSET member (and the whole "
             "projection) instead of what changed since the last run plus a sweep slice.")
    ] = False,
) -> None:
    """Repair Redis from PostgreSQL (the truth); safe alongside live workers. Prints the
    report as JSON on stdout and a summary line on stderr.

    A run checks the disputes whose ledger changed since the previous run (a watermark kept
    in Redis) plus a slice of a sweep over every escalation (one sweep per
    ESCALATION_RECONCILE_SWEEP_PERIOD_S); --full checks everything, as does a run without a
    watermark, after the namespace's database changed, or while the resync mark is set.

    The projection is compared with the ledger first: each differing column of a dispute is
    reported (kind PROJECTION) and that dispute is left out of the Redis repair, unless
    --repair-projection set it from its ledger; the command then exits 1.

    An item that cannot be repaired (e.g. a due time Redis refuses) does not stop the run: it
    is reported (count and ids, in the JSON and on stderr) and the command exits 1 at the end.
    """
    from escalation.bootstrap import namespace_binding_for, reconcile_run_for, reliability_for
    from escalation.entrypoints.progress_bars import cli_progress
    from escalation.service_layer.reconcile import AheadRepair
    from escalation.service_layer.reconcile_incremental import IncrementalReconcile

    a = _app(actor="reconcile")
    try:
        rel = reliability_for(a)
        # Redis ahead of the ledger (a restore, a lossy failover) is reset to the ledger
        # here, with a SCHEDULE_RESET row per lost decision (ADR 0014)
        ahead = AheadRepair(mark=namespace_binding_for(a), stream=rel, ledger=a.store,
                            actor=a.actor)
        with cli_progress("reconcile") as progress:
            run = reconcile_run_for(
                a, IncrementalReconcile(a.settings.reconcile_sweep_period_s, full=full,
                                        dry_run=dry_run,
                                        repair_projection=repair_projection,
                                        check_projection=True),
                ahead=ahead, rel=rel, progress=progress)
        rep = run.report
        _print_json(run.as_dict())
    finally:
        a.close()
    err.print(rep.summary(), markup=False, highlight=False)
    if run.mode == "full":
        err.print(f"reconcile: full run ({run.reason}); the next run checks what changes "
                  "after it", markup=False, highlight=False)
    else:
        err.print(f"reconcile: incremental run: {run.changed} dispute(s) with ledger rows "
                  f"since {run.watermark_from}, sweep slice {run.sweep_rows} row(s) and "
                  f"{run.sweep_members} member(s), sweep at {run.sweep_position:.1%}"
                  f"{' (lap completed)' if run.lap_completed else ''}",
                  markup=False, highlight=False)
    _report_ahead(rep, dry_run)
    if rep.errors:
        ids = ", ".join(i for i, _ in rep.errors[:20])
        more = f" (+{len(rep.errors) - 20} more)" if len(rep.errors) > 20 else ""
        err.print(f"error: reconcile: {len(rep.errors)} item(s) could not be repaired: "
                  f"{ids}{more}; first: {rep.errors[0][1]}", markup=False, highlight=False)
        raise typer.Exit(1)
    drift = [d for d in rep.diffs if d.kind.value == "PROJECTION" and not d.repaired]
    if drift:
        for d in drift[:20]:
            err.print(f"projection differs from the ledger: dispute {d.dispute_id}: {d.detail}",
                      markup=False, highlight=False)
        err.print(f"error: reconcile: {len(drift)} projection column(s) differ from the ledger "
                  "(left out of the Redis repair); `escalation reconcile --repair-projection` "
                  "sets them from the ledger", markup=False, highlight=False)
        raise typer.Exit(1)


@app.command()
def doctor(
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
    max_skew_ms: Annotated[int, typer.Option(
        min=0, help="Tolerated clock skew, ms (0 or more).")] = 1000,
) -> None:
    """Check the known failure symptoms on this deployment; exit 1 if one fails."""
    from escalation.bootstrap import run_doctor

    a = _app(actor="doctor")
    try:
        checks = run_doctor(a, max_skew_ms=max_skew_ms)
    finally:
        a.close()
    if as_json:
        _print_json([c.as_dict() for c in checks])
    else:
        for c in checks:
            out.print(f"{c.status:<7} {c.name}: {c.detail}", markup=False, highlight=False)
            if (c.unknown or c.warn or not c.ok) and c.advice:
                out.print(f"     -> {c.advice}", markup=False, highlight=False)
    if not all(c.ok for c in checks):
        raise typer.Exit(1)


@maint_app.command("run")
def maintenance_run(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Run every due maintenance job now (each occurrence still runs once across workers)."""
    from escalation.bootstrap import maintenance_for

    a = _app(actor="maintenance-cli")
    try:
        ran = list(maintenance_for(a).tick(force=True))
    finally:
        a.close()
    if as_json:
        _print_json({"ran": ran})
        return
    out.print(", ".join(ran) or "nothing due")


@maint_app.command("status")
def maintenance_status(as_json: JsonAlways = False) -> None:
    """Last run of each maintenance job (JSON)."""
    from escalation.composition_cli import maintenance_rows

    a = _app()
    try:
        _print_json(maintenance_rows(a))
    finally:
        a.close()
