"""``/v1/escalations``: create (one or a batch), get, cancel, pause, resume, record an
action, resolve (docs/adr/0010-obligations-and-resolution.md).

Each route calls the service-layer use case the CLI calls, with the token's name as actor.
Every dispute route exists twice: ``/v1/escalations/{dispute_id}...`` and
``/v1/sources/{source}/escalations/{external_id}...``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Header, Request, Response

from escalation.bootstrap import App, core_ports_for, schedule_for
from escalation.domain.errors import InvalidInput, LadderReleaseError, NotFound, invalid_items
from escalation.domain.escalation import Escalation, Status
from escalation.domain.obligations import Assessment, DeadlineState
from escalation.domain.source_attributes import recorded_source_attributes
from escalation.domain.timeutil import parse_duration, parse_time
from escalation.entrypoints.api.auth import StatusReader, Writer
from escalation.entrypoints.api.batching import CreateBatcher
from escalation.entrypoints.api.deps import (
    Core,
    Dispute,
    path_parameters,
    refuse_duplicate_keys,
)
from escalation.entrypoints.api.edge import child_span
from escalation.entrypoints.api.models import (
    ActionIn,
    BatchIn,
    BatchItemOut,
    BatchOut,
    CancelIn,
    DeadlineOut,
    EscalationIn,
    EscalationOut,
    MetByOut,
    PauseIn,
    Problem,
    ResolveIn,
)
from escalation.entrypoints.api.problems import ApiProblem
from escalation.ports import LedgerRow
from escalation.service_layer.disputes import resolve_dispute
from escalation.service_layer.enqueue import (
    EnqueueMany,
    EnqueueRequest,
    enqueue_many,
    validation_errors,
)
from escalation.service_layer.obligations import (
    ObligationPorts,
    ObligationResult,
    RecordAction,
    Resolve,
    deadline_states,
    record_action,
)
from escalation.service_layer.obligations import resolve as do_resolve
from escalation.service_layer.tokens import source_refusal

# a JSON body naming a key twice is refused before anything is written
router = APIRouter(prefix="/v1", tags=["escalations"],
                   dependencies=[Depends(refuse_duplicate_keys)])
# the external id may contain '/' (deps.ExternalIdConvertor, registered on import of deps)
DISPUTE_PATHS = ("/escalations/{dispute_id}",
                 "/sources/{source}/escalations/{external_id:external_id}")
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": Problem, "content": {"application/problem+json": {}}}
    for code in (401, 403, 404, 409, 413, 422, 429)
}


def to_request(body: EscalationIn, trace_id: str | None = None) -> EnqueueRequest:
    """An ``EnqueueRequest`` from a request body (times parsed like the CLI's options).
    ``trace_id``: the request's W3C trace id (``edge.Edge``), when the body names none.

    Raises:
        InvalidInput: naming the field (bad time, dispute reference, ...).
    """
    did, ext = resolve_dispute(body.dispute_id, source=body.source,
                               external_id=body.external_id)
    return EnqueueRequest(
        dispute_id=did, materiality=body.materiality, source_hash=body.source_hash,
        tier=body.tier, due_at=parse_time(body.due_at, "due_at"),
        opened_at=parse_time(body.opened_at, "opened_at"), ladder=body.ladder,
        external_id=ext if ext is not None else body.external_id,
        source=body.source,
        trace_id=body.trace_id or trace_id,
        anchor_at=parse_time(body.notice_at, "notice_at"),
        timezone=body.timezone, calendar=body.calendar, attributes=body.attributes,
        due_in=parse_duration(body.due_in, "due_in"),
        source_attributes=body.source_attributes,
    )


def deadline_out(a: Assessment) -> DeadlineOut:
    """One ``domain.obligations.assess`` outcome as the API reports it."""
    by = None if a.by is None else MetByOut(action=a.by.action, occurred_at=a.by.occurred_at,
                                            actor=a.by.actor, recorded_at=a.by.recorded_at,
                                            amount_unchecked=a.by.unchecked)
    return DeadlineOut(
        name=a.name, citation=a.citation, deadline_at=a.at, at=a.at, state=a.state.value,
        basis=None if a.basis is None else a.basis.value, met_by=by,
        late_seconds=a.late_s if a.state is DeadlineState.MISSED else None, rule=a.rule)


def assessments(core: App, esc: Escalation, now: datetime,
                trail: Sequence[LedgerRow] | None = None) -> list[Assessment]:
    """Every clock of ``esc`` and its state at ``now``, from the dispute's ledger trail
    (read here unless given; ``[]`` for a dispute just created, whose clocks are its
    projection's) with the same helpers the use cases use.

    Raises:
        LadderReleaseError (503): the released ladder file of ``esc`` is missing or edited.
    """
    rows = core.store.trail(esc.dispute_id) if trail is None else trail
    return deadline_states(core.ladders, rows, esc, core.calendars, now)


def render(core: App, esc: Escalation, now: datetime | None = None,
           states: Sequence[Assessment] | None = None,
           trail: Sequence[LedgerRow] | None = None, **extra: Any) -> EscalationOut:
    """The response body of one escalation, with every deadline's state at Redis TIME
    (``now``, when the caller has just read it; else read here). ``states``: the
    assessments a use case returned (else computed from the trail, ``trail`` if given).
    ``source_attributes`` (in ``extra``): the dispute's, when the caller knows them; else
    read from its ENQUEUED row (``trail``, read here unless given)."""
    if "source_attributes" not in extra:
        if trail is None:
            trail = core.store.trail(esc.dispute_id)
        extra["source_attributes"] = source_attributes_of(trail)
    if states is None:
        if now is None:
            now = core.scheduler.time()
        states = assessments(core, esc, now, trail)
    return EscalationOut(
        dispute_id=str(esc.dispute_id), external_id=esc.external_id, status=esc.status.value,
        tier=esc.tier, ladder=esc.ladder, ladder_version=esc.ladder_version, seq=esc.seq,
        due_at=esc.due_at if esc.status is Status.PENDING else None,
        entered_tier_at=esc.entered_tier_at,
        materiality=format(esc.materiality.amount, "f"),
        regulatory_deadline=esc.regulatory_deadline,
        deadlines=[deadline_out(a) for a in states],
        trace_id=esc.trace_id, **extra,
    )


def source_attributes_of(trail: Sequence[LedgerRow]) -> dict[str, str] | None:
    """The source attributes a dispute's ENQUEUED row recorded (None: none recorded)."""
    return next((recorded_source_attributes(r.details) for r in trail
                 if r.event == "ENQUEUED"), None)


def _hook(core: App) -> Callable[..., object]:
    from escalation.bootstrap import schedule_for

    return schedule_for(core)


@router.post("/escalations", status_code=201, response_model=EscalationOut,
             responses={200: {"model": EscalationOut, "description": "Already there"},
                        **ERRORS})
async def create(body: EscalationIn, request: Request, token: Writer) -> Response:
    """Schedule one escalation (idempotent per dispute: 201 created, 200 already there;
    ``source_hash_differs`` true = it was there with another source hash, nothing changed)."""
    # written together with the other single creates in flight in this worker process
    # (batching.CreateBatcher: one transaction for them all), each answered on its own; the
    # body is serialized here (response_model still documents it)
    core: App = request.app.state.core
    batcher: CreateBatcher = request.app.state.batcher
    why = source_refusal(token, body.source)
    if why is not None:
        raise ApiProblem(403, why, errors=[{"field": "source", "message": why}])
    req = to_request(body, getattr(request.state, "trace_id", None))
    with child_span("ledger.write", operation="create"):
        done = await batcher.submit(req, token.name)
    res = done.result
    # a dispute just created has no actions: its clocks are its projection's and its source
    # attributes the request's, as recorded (no trail read); a replay reads what is recorded
    known: dict[str, Any] = ({"source_attributes": dict(req.source_attributes or {}) or None}
                             if res.created else {})
    out = render(core, res.escalation.with_changes(status=res.status), done.now,
                 trail=[] if res.created else None,
                 created=res.created, source_hash_differs=res.source_hash_differs,
                 past_due_ms=res.past_due_ms, **known)
    return Response(out.model_dump_json(), status_code=201 if res.created else 200,
                    media_type="application/json")


@router.post("/escalations/batch", response_model=BatchOut, responses=ERRORS)
def create_batch(body: BatchIn, core: Core, token: Writer, request: Request) -> BatchOut:
    """Schedule up to 1,000 escalations. Every item is validated first; a bad item -> 422
    naming it (``items[i].field``, each bad item listed) and nothing is written. Existing
    disputes are reported with ``created: false`` (``source_hash_differs`` true = it carried
    another source hash, which was not applied)."""
    requests = []
    for i, item in enumerate(body.items):
        why = source_refusal(token, item.source)
        if why is not None:
            raise ApiProblem(403, f"items[{i}]: {why}",
                             errors=[{"field": f"items[{i}].source", "message": why}])
    bad: list[InvalidInput] = []
    positions: list[int] = []
    for i, item in enumerate(body.items):
        try:
            requests.append(to_request(item, getattr(request.state, "trace_id", None)))
            positions.append(i)
        except InvalidInput as exc:
            bad.append(exc.in_item(i))
    if bad:  # every item's error listed (the first api_max_errors: problems.capped),
        # those of the items that parsed too
        bad += validation_errors(
            EnqueueMany(requests=requests, actor=token.name,
                        default_ladder=core.settings.default_ladder),
            core_ports_for(core), positions)
        raise invalid_items(sorted(bad, key=lambda e: e.item or 0))
    with child_span("ledger.write", operation="create_batch", items=len(requests)):
        results = enqueue_many(
            EnqueueMany(requests=requests, actor=token.name,
                        default_ladder=core.settings.default_ladder),
            core_ports_for(core),
            _hook(core),
        )
    items = [BatchItemOut(dispute_id=str(r.escalation.dispute_id), created=r.created,
                          status=r.status.value, source_hash_differs=r.source_hash_differs,
                          past_due_ms=r.past_due_ms)
             for r in results]
    created = sum(1 for r in results if r.created)
    return BatchOut(created=created, existing=len(results) - created, results=items)


@router.api_route("/escalations/batch", methods=["GET", "HEAD"], include_in_schema=False)
def batch_other_method(request: Request) -> None:
    """``GET /v1/escalations/batch``: 405 with ``Allow: POST`` (without this route the path
    would match ``/escalations/{dispute_id}`` and answer 422 for a dispute id ``batch``)."""
    raise ApiProblem(405, f"{request.method} /v1/escalations/batch is not served: POST a "
                     "batch to it", {"Allow": "POST"})


def get_one(did: Dispute, core: Core, token: StatusReader) -> EscalationOut:
    """One escalation: status, tier, due time, every regulatory deadline and its state."""
    got = core.store.get(did)
    if got is None:
        raise NotFound(f"no escalation recorded for dispute {did}")
    if got[0].status is Status.PAUSED:  # what is left of the window, as the pause said
        from escalation.service_layer.pause import paused_remaining

        left, basis = paused_remaining(core.store, did)
        return render(core, got[0], remaining_ms=left, basis=basis)
    return render(core, got[0])


def cancel(did: Dispute, core: Core, token: Writer,
           body: CancelIn | None = Body(None)) -> EscalationOut:
    """Stop escalating a pending or paused dispute (its deadlines count it as a resolution
    with the outcome ``unstated``). Replaying a cancel returns the cancelled state. 409 for
    a terminal or resolved dispute: record a resolution with ``resolve``."""
    from escalation.service_layer.cancel import cancel as do_cancel

    before = core.store.get(did)
    if before is not None and before[1] is Status.CANCELLED:
        return render(core, before[0])
    with child_span("ledger.write", operation="cancel"):
        state = do_cancel(did, scheduler=core.scheduler, store=core.store, actor=token.name,
                          reason=(body or CancelIn()).reason)
    return render(core, state)


def pause(did: Dispute, core: Core, token: Writer,
          body: PauseIn | None = Body(None)) -> EscalationOut:
    """Stop a pending escalation's SLA clock; 409 if it is not pending."""
    from escalation.bootstrap import pause_ports_for
    from escalation.service_layer.pause import PauseClock
    from escalation.service_layer.pause import pause as do_pause

    with child_span("ledger.write", operation="pause"):
        res = do_pause(PauseClock(did, token.name, (body or PauseIn()).reason),
                       pause_ports_for(core))
    return render(core, res.escalation, remaining_ms=res.remaining_ms, basis=res.basis)


def resume(did: Dispute, core: Core, token: Writer) -> EscalationOut:
    """Restart a paused escalation's clock: due = now + remaining window; 409 if not paused."""
    from escalation.bootstrap import pause_ports_for, schedule_resumed
    from escalation.service_layer.pause import ResumeClock
    from escalation.service_layer.pause import resume as do_resume

    with child_span("ledger.write", operation="resume"):
        res = do_resume(ResumeClock(did, token.name), pause_ports_for(core))
    schedule_resumed(core, res)  # warnings as fractions of active (unpaused) time
    return render(core, res.escalation, remaining_ms=res.remaining_ms, basis=res.basis)


IdempotencyHeader = Annotated[str | None, Header(
    alias="Idempotency-Key", description="The idempotency key (or the body's "
    "idempotency_key; both given: they must be equal).")]
ACTION_FIELDS = ("action", "occurred_at", "evidence.ref", "evidence.sha256", "amount",
                 "currency", "note", "idempotency_key")
RESOLVE_FIELDS = ("outcome", "reason", "occurred_at", "idempotency_key")
_API_FIELDS = {"evidence_ref": "evidence.ref", "evidence_sha256": "evidence.sha256",
               "materiality": "amount"}
"""The use cases' field names -> the request's, where they differ."""


def _key(body_key: str | None, header_key: str | None) -> str:
    """The idempotency key of a request: the body's or the header's (equal if both)."""
    if body_key is not None and header_key is not None and body_key != header_key:
        raise InvalidInput("idempotency_key: the body's differs from the Idempotency-Key "
                           "header; give one, or the same in both", field="idempotency_key")
    key = body_key if body_key is not None else header_key
    if key is None:
        raise InvalidInput("idempotency_key: required (body field idempotency_key or the "
                           "Idempotency-Key header)", field="idempotency_key")
    return key


def _field(exc: InvalidInput, fields: Sequence[str]) -> str | None:
    """The request field an ``InvalidInput`` of the obligation use cases is about: its
    ``field`` in the API's spelling, if it is one of ``fields``."""
    if exc.field is None:
        return None
    field = _API_FIELDS.get(exc.field, exc.field)
    return field if field in fields else None


def _obligation(fields: Sequence[str], run: Callable[[], ObligationResult]) -> ObligationResult:
    """Run a use case; its ``InvalidInput`` becomes a 422 naming one of ``fields``."""
    try:
        return run()
    except LadderReleaseError:
        raise  # the server's ladder files: 503
    except InvalidInput as exc:
        message = str(exc)
        raise ApiProblem(422, message, errors=[{"field": _field(exc, fields),
                                                "message": message}]) from None


def _answer(core: App, res: ObligationResult) -> Response:
    """201 for a new ledger row, 200 for a replay; the dispute's state and deadlines."""
    esc = res.escalation
    states = None if res.replayed else res.assessments  # a replay: as of now, re-read
    out = render(core, esc, states=states, recorded_seq=res.seq, replayed=res.replayed)
    return Response(out.model_dump_json(), status_code=200 if res.replayed else 201,
                    media_type="application/json")


def record(did: Dispute, body: ActionIn, core: Core, token: Writer,
           idempotency_key: IdempotencyHeader = None) -> Response:
    """Record an action that meets or starts a regulatory clock (201; 200 for a replay: same
    key, same content; 409: same key, other content). The actor is the token's name."""
    def run() -> ObligationResult:
        key = _key(body.idempotency_key, idempotency_key)
        cmd = RecordAction(
            dispute_id=did, action=body.action,
            occurred_at=parse_time(body.occurred_at, "occurred_at"), actor=token.name,
            idempotency_key=key,
            evidence_ref=None if body.evidence is None else body.evidence.ref,
            evidence_sha256=None if body.evidence is None else body.evidence.sha256,
            amount=body.amount, currency=body.currency, note=body.note)
        with child_span("ledger.write", operation="action"):
            return record_action(
                cmd, ObligationPorts(core.scheduler, core.store, core.ladders, core.calendars),
                schedule_for(core, only_ahead=True))

    return _answer(core, _obligation(ACTION_FIELDS, run))


def resolve(did: Dispute, body: ResolveIn, core: Core, token: Writer,
            idempotency_key: IdempotencyHeader = None) -> Response:
    """Resolve the dispute with an outcome code, from pending, paused or terminal (201; 200
    for a replay; 409 when already resolved or cancelled, or the key was used for other
    content). The dispute leaves Redis; deadlines missed are listed on the ledger row."""
    def run() -> ObligationResult:
        cmd = Resolve(
            dispute_id=did, outcome=body.outcome, actor=token.name,
            idempotency_key=_key(body.idempotency_key, idempotency_key),
            occurred_at=parse_time(body.occurred_at, "occurred_at"), reason=body.reason)
        with child_span("ledger.write", operation="resolve"):
            return do_resolve(cmd, scheduler=core.scheduler, store=core.store,
                              ladders=core.ladders, calendars=core.calendars)

    return _answer(core, _obligation(RESOLVE_FIELDS, run))


_CREATED: dict[int | str, dict[str, Any]] = {
    201: {"model": EscalationOut, "description": "Recorded"},
    200: {"model": EscalationOut, "description": "A replay: nothing written"}}

for _path in DISPUTE_PATHS:
    _by = "by_external_id" if "{source}" in _path else "by_id"
    _extra = path_parameters(_path)
    router.add_api_route(_path, get_one, methods=["GET"], response_model=EscalationOut,
                         responses=ERRORS, openapi_extra=_extra, name=f"get_{_by}")
    for _action, _fn in (("cancel", cancel), ("pause", pause), ("resume", resume)):
        router.add_api_route(f"{_path}/{_action}", _fn, methods=["POST"],
                             response_model=EscalationOut, responses=ERRORS,
                             openapi_extra=_extra, name=f"{_action}_{_by}")
    router.add_api_route(f"{_path}/actions", record, methods=["POST"], status_code=201,
                         response_model=EscalationOut, responses={**_CREATED, **ERRORS},
                         openapi_extra=_extra, name=f"record_action_{_by}")
    router.add_api_route(f"{_path}/resolve", resolve, methods=["POST"], status_code=201,
                         response_model=EscalationOut, responses={**_CREATED, **ERRORS},
                         openapi_extra=_extra, name=f"resolve_{_by}")
