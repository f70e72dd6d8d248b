"""Compliance reads: one dispute's audit trail and case file, audit search (cursor pages),
ladders and their versions, the SLA report as JSON. Rows use the export format (docs/audit.md)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from escalation.domain.errors import NotFound
from escalation.domain.ladder import Ladder
from escalation.entrypoints.api.auth import AuditReader
from escalation.entrypoints.api.deps import Core, Dispute, path_parameters
from escalation.entrypoints.api.models import AuditPage
from escalation.entrypoints.api.routes_escalations import DISPUTE_PATHS, ERRORS
from escalation.entrypoints.cli_common import parse_time
from escalation.ports import LedgerRow
from escalation.service_layer.disputes import resolve_dispute

router = APIRouter(prefix="/v1", tags=["audit"])


def row_json(row: LedgerRow) -> dict[str, Any]:
    """A ledger row in the export format (UTC ``Z`` times, decimal-string money)."""
    from escalation.service_layer.audit_export import COLUMNS, export_value

    d = asdict(row)
    return {c: export_value(c, d.get(c)) for c in COLUMNS if c in d}


def trail(did: Dispute, core: Core, token: AuditReader) -> list[dict[str, Any]]:
    """Every ledger row of one dispute, oldest first (404 if none)."""
    rows = core.store.trail(did)
    if not rows:
        raise NotFound(f"no audit rows for dispute {did}")
    return [row_json(r) for r in rows]


for _path in DISPUTE_PATHS:
    router.add_api_route(
        _path + "/audit", trail, methods=["GET"], responses=ERRORS,
        openapi_extra=path_parameters(_path),
        name="audit_trail_" + ("by_external_id" if "{source}" in _path else "by_id"))


# The audit search filters, declared once: the search and the filtered case file take the same.
TierQ = Annotated[str | None, Query(description="From or to tier id.")]
DecisionQ = Annotated[str | None, Query(description="Decision or event name.")]
SinceQ = Annotated[str | None, Query(
    alias="from", description="decided_at >= (ISO-8601 with offset).")]
UntilQ = Annotated[str | None, Query(
    alias="to", description="decided_at < (ISO-8601 with offset).")]
ActorQ = Annotated[str | None, Query(description="Actor (worker id or token name).")]
LadderQ = Annotated[str | None, Query(description="Ladder name.")]
LadderVersionQ = Annotated[int | None, Query(description="Ladder version.")]



@router.get("/audit", response_model=AuditPage, responses=ERRORS)
def search(
    core: Core, token: AuditReader,
    dispute_id: Annotated[str | None, Query(description="Dispute UUID.")] = None,
    source: Annotated[str | None, Query(description="Source system (with external_id).")] = None,
    external_id: Annotated[str | None, Query(description="The source's dispute id.")] = None,
    tier: TierQ = None, decision: DecisionQ = None, since: SinceQ = None,
    until: UntilQ = None, actor: ActorQ = None, ladder: LadderQ = None,
    ladder_version: LadderVersionQ = None,
    limit: Annotated[int, Query(description="Rows per page, 1-1000.")] = 100,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page.")]
    = None,
) -> AuditPage:
    """Search the ledger, ordered by decision time; page with ``cursor``."""
    from escalation.adapters.audit_search import PostgresLedgerSearch
    from escalation.ports import AuditFilter
    from escalation.service_layer.audit_export import check_filter
    from escalation.service_layer.audit_page import search_page

    did = None
    if dispute_id is not None or source is not None or external_id is not None:
        did = resolve_dispute(dispute_id, source=source, external_id=external_id)[0]
    flt = AuditFilter(dispute_id=did, tier=tier, decision=decision,
                      since=parse_time(since, "from"), until=parse_time(until, "to"),
                      actor=actor, ladder=ladder, ladder_version=ladder_version)
    ledger = PostgresLedgerSearch(core.engine)
    check_filter(ledger, flt, core.ladders.all())
    rows, nxt = search_page(ledger, flt, limit, cursor)
    return AuditPage(rows=[row_json(r) for r in rows], next_cursor=nxt)


def _ladder_json(lad: Ladder) -> dict[str, Any]:
    return {
        "name": lad.name, "version": lad.version, "checksum": lad.checksum,
        "terminal_tier": lad.terminal_tier, "previous_version": lad.previous_version,
        "tiers": [{"id": t.id, "name": t.name, "rank": t.rank,
                   "window": {"amount": t.window.amount, "unit": t.window.unit.value,
                              "calendar": t.window.calendar},
                   "warn_at": [str(f) for f in t.warn_at]} for t in lad.tiers],
        "deadlines": [{"name": d.name, "anchor": d.anchor,
                       "window": {"amount": d.window.amount, "unit": d.window.unit.value,
                                  "calendar": d.window.calendar},
                       "caps": list(d.caps), "citation": d.source,
                       "met_by": list(d.met_by), "started_by": list(d.started_by),
                       "counts_before_start": d.counts_before_start,
                       "requires": None if d.requires is None else {
                           "action": d.requires.action, "within": d.requires.within}}
                      for d in lad.deadlines],
        "actions": [{"id": a.id, "name": a.name, "money": a.money, "citation": a.source,
                     "full_amount": a.full_amount}
                    for a in lad.actions],
        "outcomes": list(lad.outcomes),
    }


@router.get("/ladders", responses=ERRORS)
def ladders(core: Core, token: AuditReader) -> dict[str, Any]:
    """Every ladder with its versions (and the invalid files skipped, if any)."""
    return {"ladders": [{"name": n, "versions": core.ladders.versions(n),
                         "latest": max(core.ladders.versions(n))}
                        for n in core.ladders.names()],
            "invalid_files": list(core.ladders.errors)}


@router.get("/ladders/{name}/versions/{version}", responses=ERRORS)
def ladder_version(name: str, version: int, core: Core, token: AuditReader) -> dict[str, Any]:
    """One ladder version: tiers, SLA windows, regulatory deadlines (404 if unknown)."""
    if name not in core.ladders.names() or version not in core.ladders.versions(name):
        raise NotFound(f"no ladder {name!r} version {version}")
    return _ladder_json(core.ladders.get(name, version))


@router.get("/reports/sla", responses=ERRORS)
def sla_report(
    core: Core, token: AuditReader,
    since: Annotated[str, Query(
        alias="from", description="Window start (ISO-8601 with offset).")],
    until: Annotated[str, Query(
        alias="to", description="Window end, exclusive (ISO-8601 with offset).")],
    grace_s: Annotated[int, Query(description="On time = decided within N s of due.")] = 60,
) -> dict[str, Any]:
    """SLA compliance per ladder and tier (the CLI's ``report sla``) as JSON."""
    from escalation.adapters.report_queries import PostgresReports
    from escalation.domain.errors import InvalidParameter
    from escalation.service_layer import sla_report as rep

    start, end = parse_time(since, "from"), parse_time(until, "to")
    assert start is not None and end is not None  # noqa: S101 - required parameters
    if not 0 <= grace_s <= 86_400:  # (rep.build refuses a window that is not from < to)
        raise InvalidParameter("{grace_s} must be 0-86400, got {got}", "grace_s", got=grace_s)
    report = rep.build(PostgresReports(core.engine), start, end, grace_s,
                       calendars=core.calendars, ladders=core.ladders.get)
    return {"from": start.isoformat(), "to": end.isoformat(), "grace_s": grace_s,
            "ladders": rep.grouped(report)}


def _case_file_response(core: Any, token: Any, cmd: Any, filename: str) -> Response:
    """Export ``cmd`` (``service_layer.case_file.ExportCaseFile``) as a download; a refusal
    is 409, a missing signing key 503 (the rest through the usual problem mapping)."""
    from escalation.bootstrap import case_file_ports_for
    from escalation.domain.errors import ConfigError, ConflictError
    from escalation.entrypoints.api.problems import ApiProblem
    from escalation.service_layer.audit_export import check_filter
    from escalation.service_layer.case_file import CaseFileRefused, export_case_file

    try:
        ports = case_file_ports_for(core.engine, core.settings, core.ladders.get,
                                    core.calendars)
        if cmd.search is not None:
            check_filter(ports.ledger, cmd.search, core.ladders.all())
        data = export_case_file(cmd, ports)
    except ConfigError as exc:
        raise ApiProblem(503, str(exc)) from None
    except CaseFileRefused as exc:
        raise ConflictError(str(exc)) from None
    return Response(data, media_type="application/json", headers={
        "Content-Disposition": f'attachment; filename="{filename}"'})


def case_file(did: Dispute, core: Core, token: AuditReader) -> Response:
    """The examiner's case file of one dispute (docs/audit.md "The examiner's case file"):
    the signed canonical JSON ``escalation audit case-file`` writes, as a download; check it
    offline with ``escalation audit verify-bundle``. 404 when the dispute has no ledger rows,
    409 when it does not verify or no checkpoint exists yet, 503 when the server has no
    checkpoint signing key."""
    from escalation.service_layer.case_file import ExportCaseFile

    return _case_file_response(core, token, ExportCaseFile((did,), token.name),
                               f"case-file-{did}.json")


@router.get("/case-file", response_class=Response, responses={**ERRORS, 503: ERRORS[404], 200: {
    "content": {"application/json": {}},
    "description": "The case file (format escalation-case-file/1), as an attachment."}})
def case_file_search(
    core: Core, token: AuditReader,
    tier: TierQ = None, decision: DecisionQ = None, since: SinceQ = None,
    until: UntilQ = None, actor: ActorQ = None, ladder: LadderQ = None,
    ladder_version: LadderVersionQ = None,
) -> Response:
    """One case file of every dispute with a ledger row matching the audit search filters
    (at most 500 disputes; the CLI's ``audit case-file --ladder/--tier/...``). 422 when no
    filter is given, a name is unknown or no dispute matches (``dispute_ids``), 409 / 503 as
    for one dispute."""
    from escalation.domain.errors import InvalidInput
    from escalation.ports import AuditFilter
    from escalation.service_layer.case_file import ExportCaseFile

    flt = AuditFilter(tier=tier, decision=decision, since=parse_time(since, "from"),
                      until=parse_time(until, "to"), actor=actor, ladder=ladder,
                      ladder_version=ladder_version)
    if flt == AuditFilter():
        raise InvalidInput("dispute_ids: give at least one filter (tier, decision, from, to, "
                           "actor, ladder, ladder_version)")
    return _case_file_response(core, token, ExportCaseFile((), token.name, flt),
                               "case-file.json")

for _path in DISPUTE_PATHS:
    router.add_api_route(
        _path + "/case-file", case_file, methods=["GET"], response_class=Response,
        responses={**ERRORS, 503: ERRORS[404], 200: {
            "content": {"application/json": {}},
            "description": "The case file (format escalation-case-file/1), as an attachment."}},
        openapi_extra=path_parameters(_path),
        name="case_file_" + ("by_external_id" if "{source}" in _path else "by_id"))
