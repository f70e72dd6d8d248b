"""The ``escalation`` command line (typer + rich).

Every user mistake becomes a one-line ``error: ...`` on stderr and exit code 2 (usage) or
1 (operational), never a traceback. See docs/cli.md for the reference.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from escalation.domain.errors import EscalationError, InvalidInput, InvalidParameter
from escalation.domain.timeutil import parse_time, parse_time_or_date
from escalation.entrypoints import (
    cli_api,
    cli_audit,
    cli_bench,
    cli_import,
    cli_ladder,
    cli_ops,
    cli_sla,
)
from escalation.entrypoints.cli_common import (
    _app,
    _operator,
    _print_json,
    _settings,
    err,
    option_name,
    out,
    parse_attributes,
    redact_url,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from escalation.domain.obligations import Assessment
    from escalation.service_layer.enqueue import EnqueueRequest, EnqueueResult
    from escalation.service_layer.obligations import ObligationResult

# The outcome codes `resolve --outcome` takes: the values of domain.obligations.Outcome but
# `unstated` (a cancel's). Spelled out so that --help does not import the domain's calendar
# stack (holidays); a test holds the two equal.
OUTCOME_CODES = (
    "error_corrected", "partially_corrected", "different_error_corrected", "no_error_found",
    "withdrawn_by_consumer", "chargeback_won", "chargeback_lost", "closed_with_explanation",
    "closed_with_monetary_relief", "closed_with_non_monetary_relief", "closed_with_relief",
    "closed_without_relief", "closed",
)

# -h is --help on every command (click passes help_option_names down to each subcommand)
app = typer.Typer(
    name="escalation", no_args_is_help=True, pretty_exceptions_enable=False,
    help="Dispute SLA escalation: enqueue on breach, fire on time, audit everything.",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    """``--version``: print ``escalation <version>`` on stdout and exit 0 (eager: nothing
    else runs, no server is contacted)."""
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            text = version("escalation")
        except PackageNotFoundError:  # a checkout run without installing the package
            text = "unknown (not installed)"
        out.print(f"escalation {text}", markup=False, highlight=False)
        raise typer.Exit(0)


@app.callback()
def _root(
    show_version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True,
        help="Print the installed version and exit.")] = False,
) -> None:
    """Dispute SLA escalation: enqueue on breach, fire on time, audit everything."""
    # log records go to stderr from the first one on, also in commands that never build the
    # application (ladder check, token create, ...): stdout carries only command output
    from escalation.logs import configure_logging_from_env

    configure_logging_from_env()


services_app = typer.Typer(help="The embedded Valkey and PostgreSQL servers.", no_args_is_help=True)
db_app = typer.Typer(help="Database schema (Alembic).", no_args_is_help=True)
# The command modules each expose their typer apps and import cli_common, never this module.
# Unnamed apps merge their commands into the root; the order here is the order of --help.
app.add_typer(cli_import.app)  # import, demo
app.add_typer(cli_ops.app)  # notify, reconcile, doctor
app.add_typer(cli_sla.app)  # pause, resume
app.add_typer(cli_api.app)  # serve (the HTTP API)
app.add_typer(services_app, name="services")
app.add_typer(db_app, name="db")
app.add_typer(cli_audit.audit_app, name="audit")
app.add_typer(cli_audit.report_app, name="report")
app.add_typer(cli_bench.bench_app, name="bench")
app.add_typer(cli_ladder.ladder_app, name="ladder")
app.add_typer(cli_ops.dead_app, name="dead")
app.add_typer(cli_ops.maint_app, name="maintenance")
app.add_typer(cli_api.token_app, name="token")
action_app = typer.Typer(help="Actions that meet or start a regulatory clock (ADR 0010).",
                         no_args_is_help=True)
app.add_typer(action_app, name="action")

# --------------------------------------------------------------------------- enqueue/cancel
@app.command()
def enqueue(  # noqa: PLR0913 - a typer command: one parameter per option (ADR 0036)
    source_hash: Annotated[str, typer.Option(help="Hex digest of the source record.")],
    dispute_id: Annotated[str | None, typer.Option(
        help="Dispute id (UUID); or give --source and --external-id instead.")] = None,
    source: Annotated[str | None, typer.Option(
        help="Source system: with --external-id it names the dispute (the same dispute id "
             "as the API's and the importer's for that source and external id).")] = None,
    materiality: Annotated[str, typer.Option(help="Disputed amount, e.g. 1250.00.")] = "0.00",
    tier: Annotated[str | None, typer.Option(help="Current tier id (default: first).")] = None,
    due_at: Annotated[str | None, typer.Option(
        help="Breach time, ISO-8601 with offset, or a date: the START of that local day in "
             "the institution's zone (a time without offset, or more than 3650 days after "
             "now, is refused).")] = None,
    opened_at: Annotated[str | None, typer.Option(
        help="Tier entry time, ISO-8601 with offset, or a date (the start of that local "
             "day in the institution's zone).")] = None,
    due_in: Annotated[str | None, typer.Option(
        help="Breach delay from now (Redis TIME), e.g. 36h, 2d, 1h30m or PT36H, at most "
             "3650 days; instead of --due-at / --opened-at.")] = None,
    ladder: Annotated[str | None, typer.Option(help="Ladder name.")] = None,
    external_id: Annotated[str | None, typer.Option(help="Source system id.")] = None,
    trace_id: Annotated[str | None, typer.Option(help="Correlation id.")] = None,
    notice_at: Annotated[str | None, typer.Option(
        help="Regulatory anchor event time, ISO-8601 with offset or a date "
             "(default: tier entry).")] = None,
    timezone: Annotated[str | None, typer.Option(
        help="Institution zone of this dispute (default: the ladder version's, else "
             "ESCALATION_INSTITUTION_TIMEZONE); a date is read in it.")] = None,
    calendar: Annotated[str | None, typer.Option(
        help="Base business calendar of this dispute (default: the ladder version's, else "
             "ESCALATION_INSTITUTION_CALENDAR).")] = None,
    attribute: Annotated[list[str] | None, typer.Option(
        help="Dispute attribute name=value a deadline needs, e.g. cycle_closing_day=6, "
             "new_account=false (repeatable).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Schedule an escalation for a dispute (idempotent per dispute). The actor on its
    ledger row is ESCALATION_OPERATOR when set, else `cli`. A due time more than 5 minutes
    before now (a --due-at, or --opened-at + the tier's SLA window) is accepted and flagged
    (past_due on its ledger row, a note on stderr)."""
    from escalation.domain.timeutil import parse_duration
    from escalation.service_layer.disputes import resolve_dispute
    from escalation.service_layer.enqueue import EnqueueRequest

    did: object = dispute_id
    if source is not None:  # (source, external id) names the dispute, as in the API
        did, external_id = resolve_dispute(dispute_id, source=source, external_id=external_id)
    elif dispute_id is None:
        raise InvalidInput("give --dispute-id, or --source and --external-id")
    req = EnqueueRequest(
        dispute_id=did, materiality=materiality, source_hash=source_hash, tier=tier,
        due_at=parse_time_or_date(due_at, "--due-at"),
        opened_at=parse_time_or_date(opened_at, "--opened-at"),
        ladder=ladder, external_id=external_id, trace_id=trace_id,
        source=source if external_id is not None else None,
        anchor_at=parse_time_or_date(notice_at, "--notice-at"),
        timezone=timezone, calendar=calendar, attributes=parse_attributes(attribute),
        due_in=parse_duration(due_in, "--due-in"),
    )
    _enqueue(EnqueueCall(request=req, due_at_given=due_at is not None, as_json=as_json))


@dataclass(frozen=True, slots=True)
class EnqueueCall:
    """One ``escalation enqueue``: the service layer's request (the dispute named, its times
    parsed) and how the command answers."""

    request: EnqueueRequest
    due_at_given: bool
    """``--due-at`` was given (the past-due note names it; else the due time came from
    ``--opened-at`` and the tier's SLA window, or from ``--due-in``)."""
    as_json: bool
    """``--json``: print the result as one JSON object."""


def _enqueue(call: EnqueueCall) -> None:
    """Run ``enqueue_on_breach`` for ``call`` on a freshly built application (closed after)
    and print its answer."""
    from escalation.bootstrap import core_ports_for, schedule_for
    from escalation.service_layer.enqueue import EnqueueOne, enqueue_on_breach

    # the named operator when set (ESCALATION_OPERATOR), else "cli" (no human known)
    from escalation.service_layer.obligations import deadline_states

    a = _app(actor=_operator(None, "cli"), strict_ladders=True, durable_redis=True)
    try:
        res = enqueue_on_breach(
            EnqueueOne(request=call.request, actor=a.actor,
                       default_ladder=a.settings.default_ladder),
            core_ports_for(a),
            schedule_for(a),
        )
        # the API's create answer: a new dispute's clocks are its projection's (no trail)
        e = res.escalation
        states = (deadline_states(a.ladders, [] if res.created else a.store.trail(
            e.dispute_id), e, a.calendars, a.scheduler.time()) if call.as_json else [])
    finally:
        a.close()
    _print_enqueued(call, res, states)


def _print_enqueued(call: EnqueueCall, res: EnqueueResult,
                    states: Sequence[Assessment]) -> None:
    """``enqueue``'s answer: JSON (``deadlines``: ``states``, each as the API's create
    answer lists it) or one line on stdout, notes on stderr."""
    e = res.escalation
    # an existing escalation is never rewritten by enqueue: say so when the request differs
    # (the service layer's flag, which the API's create responses report too)
    changed = res.source_hash_differs
    info = {"created": res.created, "dispute_id": str(e.dispute_id), "tier": e.tier,
            "due_at": e.due_at.isoformat(), "ladder": e.ladder_key, "seq": e.seq,
            "status": res.status.value,
            "regulatory_deadline": (e.regulatory_deadline.isoformat()
                                    if e.regulatory_deadline else None),
            "deadlines": [_deadline_json(a) for a in states],
            "institution": {"timezone": e.institution_tz, "calendar": e.institution_calendar},
            "source_hash_differs": changed, "past_due_ms": res.past_due_ms}
    if res.past_due_ms is not None:
        given = ("--due-at" if call.due_at_given
                 else "the due time from --opened-at and the tier's SLA window")
        err.print(f"note: {given} lay {res.past_due_ms // 1000} s before now (more than the "
                  "5 min tolerance): accepted, escalated at once, and flagged past_due on its "
                  "ENQUEUED ledger row; give --due-in for a due time relative to now",
                  markup=False, highlight=False)
    if call.as_json:
        _print_json(info)
    elif res.created:
        out.print(f"enqueued {e.dispute_id}: tier {e.tier}, due {e.due_at.isoformat()}")
    else:
        out.print(f"already enqueued {e.dispute_id} (status {res.status.value}, seq {e.seq}):"
                  " nothing changed")
        if changed:
            err.print(f"note: this request's source hash differs from the recorded one "
                      f"({e.source_hash[:12]}...): its content was not applied. A dispute id "
                      "is escalated once: enqueue never rewrites an escalation and never "
                      "re-opens a cancelled or terminal one",
                      markup=False, highlight=False)


ActorOpt = Annotated[str | None, typer.Option(
    "--actor", help="Who acts, on record (default: ESCALATION_OPERATOR).")]
_CLI_NAMES = {"occurred_at": "--at", "idempotency_key": "--idempotency-key",
              "evidence_ref": "--evidence-ref", "evidence_sha256": "--evidence-sha256",
              "amount": "--amount", "currency": "--currency", "note": "--note",
              "action": "--action", "outcome": "--outcome", "reason": "--reason",
              "actor": "--actor"}


def _spelled(exc: InvalidInput) -> InvalidInput:
    """``exc`` with a leading field name (``occurred_at: ...``) spelled as this command's
    option (``--at: ...``)."""
    message = str(exc)
    head, sep, rest = message.partition(":")
    if sep and head in _CLI_NAMES:
        return InvalidInput(f"{_CLI_NAMES[head]}:{rest}")
    return exc


def _deadline_json(a: Assessment) -> dict[str, object]:
    """One deadline's state as ``--json`` prints it: the keys of the API's ``deadlines``
    entries (``DeadlineOut``), instants RFC 3339."""
    by = None if a.by is None else {
        "action": a.by.action, "actor": a.by.actor,
        "occurred_at": None if a.by.occurred_at is None else a.by.occurred_at.isoformat(),
        "recorded_at": None if a.by.recorded_at is None else a.by.recorded_at.isoformat(),
        "amount_unchecked": a.by.unchecked}
    at = None if a.at is None else a.at.isoformat()
    return {"name": a.name, "citation": a.citation, "deadline_at": at, "at": at,
            "state": a.state.value, "basis": None if a.basis is None else a.basis.value,
            "met_by": by, "late_seconds": a.late_s if a.state.value == "missed" else None,
            "rule": a.rule}


def _print_obligation(res: ObligationResult, verb: str, as_json: bool) -> None:
    e = res.escalation
    if as_json:
        _print_json({"dispute_id": str(e.dispute_id), "status": e.status.value,
                     "seq": res.seq, "replayed": res.replayed,
                     "due_at": None if res.due_after is None else res.due_after.isoformat(),
                     "deadlines": [_deadline_json(a) for a in res.assessments]})
        return
    if res.replayed:
        out.print(f"already {verb} {e.dispute_id} under this idempotency key (seq {res.seq}): "
                  "nothing written", markup=False, highlight=False)
    else:
        moved = ("" if res.due_before is None or res.due_before == res.due_after
                 or res.due_after is None else
                 f"; due {res.due_before.isoformat()} -> {res.due_after.isoformat()}")
        out.print(f"{verb} {e.dispute_id} (seq {res.seq}, status {e.status.value}{moved})",
                  markup=False, highlight=False)
    for a in res.assessments:
        by = "" if a.by is None else f" by {a.by.action} ({a.by.actor})"
        at = "unknown" if a.at is None else a.at.isoformat()
        out.print(f"  {a.name}: {a.state.value}{by}, due {at}", markup=False, highlight=False)


@action_app.command("record")
def action_record(  # noqa: PLR0913 - a typer command: one parameter per option (ADR 0036)
    dispute_id: Annotated[str, typer.Argument(
        help="Dispute id (UUID), or the external id with --source.")],
    action: Annotated[str, typer.Option(
        help="Action id the dispute's ladder version declares, e.g. provisional_credit.")],
    at: Annotated[str, typer.Option(
        help="When it happened, ISO-8601 with offset (not in the future, not before the "
             "dispute's anchor, nor before it was opened).")],
    idempotency_key: Annotated[str, typer.Option(
        help="1-200 characters; the same key with the same content is a replay (nothing "
             "written), with other content an error.")],
    actor: ActorOpt = None,
    source: Annotated[str | None, typer.Option(
        help="Source system: DISPUTE_ID is its external id.")] = None,
    amount: Annotated[str | None, typer.Option(
        help="Decimal amount, e.g. 100.00 (a money action: required).")] = None,
    currency: Annotated[str | None, typer.Option(help="ISO 4217 code, with --amount.")] = None,
    evidence_ref: Annotated[str | None, typer.Option(
        help="Document id or URI of the evidence.")] = None,
    evidence_sha256: Annotated[str | None, typer.Option(
        help="SHA-256 (hex) of the evidence document, with --evidence-ref.")] = None,
    note: Annotated[str | None, typer.Option(help="One line, at most 500 characters.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Record an action that meets or starts a regulatory clock, and re-plan the dispute
    (docs/adr/0010-obligations-and-resolution.md). The actor is --actor, else
    ESCALATION_OPERATOR; with neither the command is refused (exit 2)."""
    from escalation.bootstrap import schedule_for
    from escalation.service_layer.disputes import dispute_arg
    from escalation.service_layer.obligations import ObligationPorts, RecordAction, record_action

    did = dispute_arg(dispute_id, source)
    who = _operator(actor)
    cmd = RecordAction(
        dispute_id=did, action=action, occurred_at=parse_time(at, "--at"), actor=who,
        idempotency_key=idempotency_key, evidence_ref=evidence_ref,
        evidence_sha256=evidence_sha256, amount=amount, currency=currency, note=note)
    a = _app(actor=who)
    try:
        res = record_action(cmd, ObligationPorts(a.scheduler, a.store, a.ladders, a.calendars),
                            schedule_for(a, only_ahead=True))
    except InvalidInput as exc:
        raise _spelled(exc) from None
    finally:
        a.close()
    _print_obligation(res, f"recorded {action} on", as_json)


@app.command()
def resolve(  # noqa: PLR0913 - a typer command: one parameter per option (ADR 0036)
    dispute_id: Annotated[str, typer.Argument(
        help="Dispute id (UUID), or the external id with --source.")],
    outcome: Annotated[str, typer.Option(
        help="Outcome code: " + ", ".join(OUTCOME_CODES) + ".")],
    reason: Annotated[str | None, typer.Option(
        help="Why, on record (one line).")] = None,
    at: Annotated[str | None, typer.Option(
        help="When it was resolved, ISO-8601 with offset (default: now; not before the "
             "dispute's anchor, nor before it was opened).")] = None,
    actor: ActorOpt = None,
    idempotency_key: Annotated[str | None, typer.Option(
        help="Default: resolve:<dispute id>:<outcome>:<--at or 'now'>, so a retried command "
             "is a replay (nothing written twice).")] = None,
    source: Annotated[str | None, typer.Option(
        help="Source system: DISPUTE_ID is its external id.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Resolve a dispute with an outcome code, from pending, paused or terminal: a RESOLVED
    ledger row listing the deadlines missed; the dispute leaves Redis. The actor is --actor,
    else ESCALATION_OPERATOR; with neither the command is refused (exit 2). Without
    --idempotency-key the key is derived from the dispute, the outcome and --at, so running
    the same command again is a replay."""
    from escalation.service_layer.disputes import dispute_arg
    from escalation.service_layer.obligations import Resolve
    from escalation.service_layer.obligations import resolve as do_resolve

    did = dispute_arg(dispute_id, source)
    who = _operator(actor)
    when = parse_time(at, "--at")
    key = idempotency_key if idempotency_key is not None else (
        f"resolve:{did}:{outcome}:{'now' if when is None else when.isoformat()}")
    cmd = Resolve(dispute_id=did, outcome=outcome, actor=who, idempotency_key=key,
                  occurred_at=when, reason=reason)
    a = _app(actor=who)
    try:
        res = do_resolve(cmd, scheduler=a.scheduler, store=a.store, ladders=a.ladders,
                         calendars=a.calendars)
    except InvalidInput as exc:
        raise _spelled(exc) from None
    finally:
        a.close()
    _print_obligation(res, f"resolved ({outcome})", as_json)


@app.command()
def cancel(
    dispute_id: Annotated[str, typer.Argument(
        help="Dispute id (UUID), or the external id with --source.")],
    reason: Annotated[str, typer.Option(help="Why (recorded in the ledger).")] = "resolved",
    source: Annotated[str | None, typer.Option(
        help="Source system: DISPUTE_ID is its external id.")] = None,
    actor: Annotated[str | None, typer.Option(
        "--actor", help="Who acts, on record (default: ESCALATION_OPERATOR, else OS "
                        "user@host).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Stop escalating a pending or paused dispute (its deadlines count it as a resolution
    with the outcome unstated). A terminal dispute is refused: record its resolution with
    `escalation resolve`, which also states the outcome."""
    from escalation.service_layer.cancel import cancel as do_cancel
    from escalation.service_layer.disputes import dispute_arg
    from escalation.service_layer.ladder_release import default_actor

    did = dispute_arg(dispute_id, source)
    who = _operator(actor, default_actor())
    a = _app(actor=who)
    try:
        before = a.store.get(did)
        if before is not None and before[1].value == "cancelled":
            if as_json:
                _print_json({"dispute_id": str(before[0].dispute_id), "status": "cancelled",
                             "seq": before[0].seq, "changed": False})
                return
            out.print(f"already cancelled {before[0].dispute_id} (seq {before[0].seq}): "
                      "nothing changed")
            return
        state = do_cancel(did, scheduler=a.scheduler, store=a.store, actor=a.actor,
                          reason=reason)
    finally:
        a.close()
    if as_json:
        _print_json({"dispute_id": str(state.dispute_id), "status": "cancelled",
                     "seq": state.seq, "changed": True})
        return
    out.print(f"cancelled {state.dispute_id} (seq {state.seq})")


# --------------------------------------------------------------------------- status
@app.command()
def status(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Pending, due now, oldest overdue age, locked, dead, per tier."""
    from escalation.service_layer.status import status as get_status

    a = _app(actor="cli")
    try:
        data = get_status(scheduler=a.scheduler, store=a.store)
    finally:
        a.close()
    if as_json:
        _print_json(data)
        return
    from escalation.entrypoints.render import figure_row

    table = Table(title="escalation status (ages in human units; --json gives ms)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for src, values in data.items():
        for key, val in values.items():
            if isinstance(val, dict):
                for k2, v2 in val.items():
                    table.add_row(*figure_row(f"{src}.{key}.{k2}", v2))
            else:
                table.add_row(*figure_row(f"{src}.{key}", val))
    out.print(table)


# --------------------------------------------------------------------------- db / services
@db_app.command("upgrade")
def db_upgrade(
    restored: Annotated[bool, typer.Option(
        "--restored",
        help="This database was restored (or copied) on purpose: bind it to the namespace "
             "whose Redis recorded another database, and mark the namespace for a resync "
             "(then run `escalation reconcile`).")] = False,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print JSON: applied, head, namespace, resync_marked.")] = False,
) -> None:
    """Bring the database schema to the Alembic head and bind it to this namespace.

    Says which revisions it applied. A database serves one deployment (namespace): the first
    ``db upgrade`` records ESCALATION_NAMESPACE in it; a later one with another namespace is
    refused (exit 2), and every command refuses to run against a database bound to another
    namespace. Binding also stamps the database's identity in PostgreSQL and in the
    namespace's Redis: a database other than the one the namespace's Redis recorded (a
    restore into another database, a copy, a new database) is refused (exit 2) unless
    ``--restored`` says the restore is planned (docs/postgresql.md, "Restoring the
    database").
    """
    from escalation.bootstrap import bind_deployment
    from escalation.composition_cli import schema_head, upgrade_schema

    settings = _settings()
    database_url, redis_url, applied = upgrade_schema(settings, restored=restored)
    result = bind_deployment(settings, database_url, redis_url, restored=restored)
    bound = result.namespace
    if as_json:
        _print_json({"applied": list(applied), "head": schema_head(), "namespace": bound,
                     "resync_marked": bool(result.resync_marked)})
        return
    if result.resync_marked:
        err.print(f"bound as a restored database ({result.identity}); namespace {bound} is "
                  "marked for a resync: workers refuse to fire it until `escalation "
                  "reconcile` has reset Redis to this ledger", markup=False, highlight=False)
    if not applied:
        out.print(f"database already at head ({schema_head()}): nothing to apply; "
                  f"bound to namespace {bound}", markup=False, highlight=False)
        return
    for rev in applied:
        out.print(f"applied {rev}", markup=False, highlight=False)
    out.print(f"database now at head ({schema_head()}): {len(applied)} revision(s) applied; "
              f"bound to namespace {bound}", markup=False, highlight=False)


@services_app.command("stop")
def services_stop(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Stop the embedded Valkey and PostgreSQL servers of ESCALATION_HOME."""
    from escalation.composition_cli import stop_embedded

    stopped = stop_embedded(_settings().home)
    if as_json:
        _print_json({"stopped": list(stopped)})
        return
    out.print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))


@services_app.command("status")
def services_status(
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print JSON (the output is JSON either way).")] = False,
) -> None:
    """Show the embedded servers of ESCALATION_HOME (JSON)."""
    from escalation.composition_cli import embedded_status

    status = embedded_status(_settings().home)
    for server in status.values():  # passwords stay in the 0600 credentials file
        if isinstance(server, dict) and "url" in server:
            server["url"] = redact_url(server["url"])
    _print_json(status)


# --------------------------------------------------------------------------- worker
@app.command()
def worker(  # noqa: PLR0913 - a typer command: one parameter per option (ADR 0036)
    burst: Annotated[bool, typer.Option(help="Drain what is due, then exit.")] = False,
    batch_size: Annotated[int | None, typer.Option(help="1-500 (default 50).")] = None,
    poll_interval_s: Annotated[float | None, typer.Option(help="1-60 s (default 5).")] = None,
    lock_ttl_s: Annotated[int | None, typer.Option(help="5-300 s (default 30).")] = None,
    jitter: Annotated[float | None, typer.Option(help="0.0-0.5 (default 0.2).")] = None,
    worker_id: Annotated[str | None, typer.Option(help="Worker id in logs/ledger.")] = None,
    metrics_port: Annotated[int | None, typer.Option(
        help="Serve this worker's Prometheus metrics on this port (1-65535).")] = None,
    metrics_addr: Annotated[str, typer.Option(
        help="Listen address of --metrics-port.")] = "127.0.0.1",
    as_json: Annotated[bool, typer.Option(
        "--json", help="With --burst: print the summary as JSON.")] = False,
) -> None:
    """Fire due escalations until SIGTERM/SIGINT (or, with --burst, until nothing is due).

    With --burst it prints one summary line on stdout (--json: a JSON object) and the exit
    code is 1 when any escalation could not be decided (it is retried later or
    dead-lettered: `escalation dead list`), else 0.
    """
    from escalation.entrypoints.worker import (
        StoppedDuringStartup,
        install_early_stop_handlers,
        run_worker,
        settle_heap,
        startup_finished,
    )

    if as_json and not burst:
        raise InvalidInput("--json goes with --burst (a worker without --burst runs until "
                           "stopped and reports in its logs)")
    if metrics_port is not None and not 1 <= metrics_port <= 65535:
        raise InvalidInput(f"--metrics-port must be 1-65535, got {metrics_port}")
    install_early_stop_handlers()
    a = None
    try:
        a = _app(strict_ladders=True, durable_redis=True, batch_size=batch_size,
                 poll_interval_s=poll_interval_s, lock_ttl_s=lock_ttl_s,
                 jitter=jitter, worker_id=worker_id)
        metrics = None
        if metrics_port is not None:
            # local: prometheus_client is loaded only by a worker that serves metrics
            from escalation.entrypoints.worker_metrics import WorkerMetrics

            metrics = WorkerMetrics()
            try:
                metrics.serve(metrics_port, metrics_addr)
            except OSError as exc:  # in use, not an address of this host, no permission
                a.close()
                raise InvalidInput(
                    f"--metrics-port {metrics_port} / --metrics-addr {metrics_addr}: cannot "
                    f"listen there: {exc.strerror or exc}") from None
        settle_heap()  # a worker process: collector tuned for the firing loop
        startup_finished()
    except StoppedDuringStartup as stop:
        startup_finished()
        stop.log()
        if a is not None:
            a.close()
        raise typer.Exit(0) from None
    try:
        totals = run_worker(a, burst=burst, metrics=metrics)
    finally:
        a.close()
    if burst:
        failed = (f", {totals.poison} could not be decided (retried later or dead-lettered: "
                  f"`escalation dead list`)" if totals.poison else "")
        if as_json:
            _print_json({"claimed": totals.claimed, "recorded": totals.recorded,
                         "already_decided": totals.stale, "stuck_repaired": totals.stuck,
                         "not_decided": totals.poison, "warnings_recorded": totals.warnings})
        else:
            out.print(f"burst done: {totals.claimed} claimed, {totals.recorded} recorded, "
                      f"{totals.stale} already decided, {totals.stuck} stuck repaired, "
                      f"{totals.warnings} warnings recorded{failed}",
                      markup=False, highlight=False)
        if totals.poison:  # a cron job or CI step must see that the drain is not complete
            raise typer.Exit(1)


def main() -> None:
    """Console-script entry point: run the app, map EscalationError to exit codes (the
    table in docs/cli.md)."""
    try:
        app()
    except InvalidParameter as exc:  # a service-layer message: name our options (--from)
        _fail(exc.render(option_name), exc.exit_code)
    except EscalationError as exc:
        _fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:
        _fail_driver(exc)
        raise


def _fail_driver(exc: Exception) -> None:
    """Exit with one line for a database or Redis error, or an OSError; return for others.

    The driver modules are looked up in ``sys.modules``, never imported here (``escalation
    --help`` loads neither): an error of a driver the command never imported cannot be one
    of its exceptions.
    """
    sa_exc = sys.modules.get("sqlalchemy.exc")
    redis_exc = sys.modules.get("redis.exceptions")
    if sa_exc is not None and isinstance(exc, sa_exc.DataError):
        # input PostgreSQL refuses (e.g. a value our validation missed); the transaction rolled
        # back, so nothing was written: report it as bad input, in one line
        first = str(exc.orig if exc.orig is not None else exc).strip().splitlines()
        _fail(f"PostgreSQL refused the input: {first[0] if first else exc}", 2)
    if redis_exc is not None and isinstance(exc, redis_exc.OutOfMemoryError):
        _fail("Redis is out of memory (maxmemory reached, nothing more written to Redis): "
              "what PostgreSQL recorded stays recorded and `escalation reconcile` schedules "
              "it once Redis has memory again", 1)
    if redis_exc is not None and isinstance(exc, (redis_exc.ConnectionError,
                                                  redis_exc.TimeoutError)):
        _fail(f"cannot reach Redis: {exc}", 1)
    if sa_exc is not None and isinstance(exc, (sa_exc.OperationalError,
                                               sa_exc.InterfaceError)):
        first = str(exc.orig if exc.orig is not None else exc).strip().splitlines()
        _fail(f"cannot reach PostgreSQL: {first[0] if first else exc}", 1)
    if isinstance(exc, OSError):
        _fail(str(exc), 1)


def _fail(message: str, code: int) -> None:
    """Print one ``error: ...`` line on stderr and exit with ``code``."""
    err.print(f"error: {message}", markup=False, highlight=False)
    sys.exit(code)
