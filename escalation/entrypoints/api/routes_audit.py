"""Compliance reads: one dispute's audit trail and case file, audit search (cursor pages),
ladders and their versions, the SLA report as JSON. Rows use the export format (docs/audit.md)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any, NamedTuple
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Response

from escalation.domain.errors import NotFound
from escalation.domain.ladder import Ladder
from escalation.domain.timeutil import parse_time
from escalation.entrypoints.api.auth import AuditReader
from escalation.entrypoints.api.deps import Core, Dispute, path_parameters
from escalation.entrypoints.api.models import AuditPage, Problem
from escalation.entrypoints.api.routes_escalations import DISPUTE_PATHS, ERRORS
from escalation.ports import AuditFilter, LedgerRow
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


class _Filters(NamedTuple):
    """The audit search filters as sent (times not yet parsed)."""

    tier: str | None
    decision: str | None
    since: str | None
    until: str | None
    actor: str | None = None
    ladder: str | None = None
    ladder_version: int | None = None

    def audit_filter(self, dispute_id: UUID | None = None) -> AuditFilter:
        """The port's filter (``from`` / ``to`` parsed; InvalidInput names the field)."""
        return AuditFilter(dispute_id=dispute_id, tier=self.tier, decision=self.decision,
                           since=parse_time(self.since, "from"),
                           until=parse_time(self.until, "to"), actor=self.actor,
                           ladder=self.ladder, ladder_version=self.ladder_version)


# FastAPI collects a route's query parameters from its dependencies, in order: the filters
# are split in two so that no function takes more than five of them (ADR 0028).
def _what_when(tier: TierQ = None, decision: DecisionQ = None, since: SinceQ = None,
               until: UntilQ = None) -> _Filters:
    return _Filters(tier, decision, since, until)


def _who_which(actor: ActorQ = None, ladder: LadderQ = None,
               ladder_version: LadderVersionQ = None) -> tuple[str | None, str | None,
                                                               int | None]:
    return actor, ladder, ladder_version


def _filters(
    first: Annotated[_Filters, Depends(_what_when)],
    rest: Annotated[tuple[str | None, str | None, int | None], Depends(_who_which)],
) -> _Filters:
    actor, ladder, ladder_version = rest
    return first._replace(actor=actor, ladder=ladder, ladder_version=ladder_version)


Filters = Annotated[_Filters, Depends(_filters)]


class _DisputeRef(NamedTuple):
    dispute_id: str | None
    source: str | None
    external_id: str | None


def _dispute_ref(
    dispute_id: Annotated[str | None, Query(description="Dispute UUID.")] = None,
    source: Annotated[str | None, Query(description="Source system (with external_id).")] = None,
    external_id: Annotated[str | None, Query(description="The source's dispute id.")] = None,
) -> _DisputeRef:
    return _DisputeRef(dispute_id, source, external_id)


class _PageQuery(NamedTuple):
    limit: int
    cursor: str | None


def _page(
    limit: Annotated[int, Query(description="Rows per page, 1-1000.")] = 100,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page.")]
    = None,
) -> _PageQuery:
    return _PageQuery(limit, cursor)



@router.get("/audit", response_model=AuditPage, responses=ERRORS)
def search(
    core: Core, token: AuditReader, ref: Annotated[_DisputeRef, Depends(_dispute_ref)],
    filters: Filters, page: Annotated[_PageQuery, Depends(_page)],
) -> AuditPage:
    """Search the ledger, ordered by decision time; page with ``cursor``."""
    from escalation.bootstrap import ledger_search_for
    from escalation.service_layer.audit_export import check_filter
    from escalation.service_layer.audit_page import search_page

    did = None
    if ref.dispute_id is not None or ref.source is not None or ref.external_id is not None:
        did = resolve_dispute(ref.dispute_id, source=ref.source,
                              external_id=ref.external_id)[0]
    flt = filters.audit_filter(did)
    ledger = ledger_search_for(core)
    check_filter(ledger, flt, core.ladders.all())
    rows, nxt = search_page(ledger, flt, page.limit, page.cursor)
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


@router.get("/reports/sla", responses={**ERRORS, 503: {
    "model": Problem, "content": {"application/problem+json": {}},
    "description": "The SLA rollup is not backfilled yet (`code`: "
                   "`sla_rollup_not_backfilled`; run `escalation report sla-refresh`), or a "
                   "backing service is unavailable."}})
def sla_report(
    core: Core, token: AuditReader,
    since: Annotated[str, Query(
        alias="from", description="Window start (ISO-8601 with offset).")],
    until: Annotated[str, Query(
        alias="to", description="Window end, exclusive (ISO-8601 with offset).")],
    grace_s: Annotated[int, Query(description="On time = decided within N s of due.")] = 60,
) -> dict[str, Any]:
    """SLA compliance per ladder and tier (the CLI's ``report sla``) as JSON. At the default
    grace (60 s) the figures come from the SLA rollup (ADR 0033), brought up to date with
    the ledger first, as ``report sla`` does: the same figures, in time proportional to what
    changed since the last refresh. Until the rollup has been backfilled once
    (``escalation report sla-refresh``) the answer is a 503 problem with ``code``
    ``sla_rollup_not_backfilled``, never partial figures. Another ``grace_s`` recounts the
    window from the ledger (slow on a large ledger)."""
    from escalation.bootstrap import ledger_reports_for, sla_rollup_for
    from escalation.domain.errors import InvalidParameter
    from escalation.service_layer import sla_report as rep
    from escalation.service_layer import sla_rollup

    start, end = parse_time(since, "from"), parse_time(until, "to")
    assert start is not None and end is not None  # noqa: S101 - required parameters
    if not 0 <= grace_s <= 86_400:  # (rep.build refuses a window that is not from < to)
        raise InvalidParameter("{grace_s} must be 0-86400, got {got}", "grace_s", got=grace_s)
    if grace_s == rep.DEFAULT_GRACE_S:
        report, _at = sla_rollup.served_report(
            sla_rollup.RollupReport(start, end),
            sla_rollup.RollupPorts(sla_rollup_for(core), core.calendars, core.ladders.get))
    else:
        report = rep.build(rep.ReportSla(start, end, grace_s), ledger_reports_for(core),
                           core.calendars, core.ladders.get)
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
        ports = case_file_ports_for(core, core.settings, core.ladders.get,
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
def case_file_search(core: Core, token: AuditReader, filters: Filters) -> Response:
    """One case file of every dispute with a ledger row matching the audit search filters
    (at most 500 disputes; the CLI's ``audit case-file --ladder/--tier/...``). 422 when no
    filter is given, a name is unknown or no dispute matches (``dispute_ids``), 409 / 503 as
    for one dispute."""
    from escalation.domain.errors import InvalidInput
    from escalation.service_layer.case_file import ExportCaseFile

    flt = filters.audit_filter()
    if flt == AuditFilter():
        raise InvalidInput("dispute_ids: give at least one filter (tier, decision, from, to, "
                           "actor, ladder, ladder_version)", field="dispute_ids")
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
