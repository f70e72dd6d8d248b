"""``/v1/escalations``: create (one or a batch), get, cancel, pause, resume.

Each route calls the service-layer use case the CLI calls, with the token's name as actor.
Every dispute route exists twice: ``/v1/escalations/{dispute_id}...`` and
``/v1/sources/{source}/escalations/{external_id}...``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Body, Depends, Request, Response

from escalation.bootstrap import App
from escalation.domain.errors import NotFound
from escalation.domain.escalation import Escalation, Status
from escalation.entrypoints.api.auth import StatusReader, Writer
from escalation.entrypoints.api.batching import CreateBatcher
from escalation.entrypoints.api.deps import (
    Core,
    Dispute,
    path_parameters,
    refuse_duplicate_keys,
)
from escalation.entrypoints.api.models import (
    BatchIn,
    BatchItemOut,
    BatchOut,
    CancelIn,
    DeadlineOut,
    EscalationIn,
    EscalationOut,
    PauseIn,
    Problem,
)
from escalation.entrypoints.cli_common import parse_time
from escalation.service_layer.disputes import resolve_dispute
from escalation.service_layer.enqueue import EnqueueRequest, enqueue_many

# a JSON body naming a key twice is refused before anything is written
router = APIRouter(prefix="/v1", tags=["escalations"],
                   dependencies=[Depends(refuse_duplicate_keys)])
DISPUTE_PATHS = ("/escalations/{dispute_id}", "/sources/{source}/escalations/{external_id}")
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": Problem, "content": {"application/problem+json": {}}}
    for code in (401, 403, 404, 409, 422)
}


def to_request(body: EscalationIn) -> EnqueueRequest:
    """An ``EnqueueRequest`` from a request body (times parsed like the CLI's options).

    Raises:
        InvalidInput: naming the field (bad time, dispute reference, ...).
    """
    did, ext = resolve_dispute(body.dispute_id, source=body.source,
                               external_id=body.external_id)
    return EnqueueRequest(
        dispute_id=did, materiality=body.materiality, source_hash=body.source_hash,
        tier=body.tier, due_at=parse_time(body.due_at, "due_at"),
        opened_at=parse_time(body.opened_at, "opened_at"), ladder=body.ladder,
        external_id=ext if ext is not None else body.external_id, trace_id=body.trace_id,
        anchor_at=parse_time(body.notice_at, "notice_at"),
        timezone=body.timezone, calendar=body.calendar, attributes=body.attributes,
    )


def _deadline_state(esc: Escalation, at: datetime, now: datetime,
                    closed_at: datetime | None) -> str:
    if esc.status in (Status.TERMINAL, Status.CANCELLED, Status.RESOLVED):
        return "met" if closed_at is not None and closed_at <= at else "missed"
    return "open" if now < at else "overdue"


def render(core: App, esc: Escalation, now: datetime | None = None,
           **extra: Any) -> EscalationOut:
    """The response body of one escalation, with every deadline's state at Redis TIME
    (``now``, when the caller has just read it; else read here)."""
    closed_at = None
    if esc.deadlines and esc.status in (Status.TERMINAL, Status.CANCELLED, Status.RESOLVED):
        closed_at = core.store.trail(esc.dispute_id)[-1].decided_at
    if esc.deadlines and now is None:
        now = core.scheduler.time()
    deadlines = [
        DeadlineOut(name=n, at=at, state=_deadline_state(esc, at, now, closed_at))  # type: ignore[arg-type]
        for n, at in esc.deadlines
    ]
    return EscalationOut(
        dispute_id=str(esc.dispute_id), external_id=esc.external_id, status=esc.status.value,
        tier=esc.tier, ladder=esc.ladder, ladder_version=esc.ladder_version, seq=esc.seq,
        due_at=esc.due_at if esc.status is Status.PENDING else None,
        entered_tier_at=esc.entered_tier_at,
        materiality=format(esc.materiality.amount, "f"),
        regulatory_deadline=esc.regulatory_deadline, deadlines=deadlines,
        trace_id=esc.trace_id, **extra,
    )


def _hook(core: App) -> Callable[..., None]:
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
    done = await batcher.submit(to_request(body), token.name)
    res = done.result
    out = render(core, res.escalation.with_changes(status=res.status), done.now,
                 created=res.created, source_hash_differs=res.source_hash_differs)
    return Response(out.model_dump_json(), status_code=201 if res.created else 200,
                    media_type="application/json")


@router.post("/escalations/batch", response_model=BatchOut, responses=ERRORS)
def create_batch(body: BatchIn, core: Core, token: Writer) -> BatchOut:
    """Schedule up to 1,000 escalations. Every item is validated first; one bad item -> 422
    naming it (``items[i].field``) and nothing is written. Existing disputes are reported
    with ``created: false`` (``source_hash_differs`` true = it carried another source hash,
    which was not applied)."""
    requests = []
    for i, item in enumerate(body.items):
        try:
            requests.append(to_request(item))
        except Exception as exc:
            from escalation.domain.errors import InvalidInput

            if isinstance(exc, InvalidInput):
                raise type(exc)(f"request {i + 1}: {exc}") from None
            raise
    results = enqueue_many(
        requests, scheduler=core.scheduler, store=core.store, ladders=core.ladders,
        calendars=core.calendars, default_ladder=core.settings.default_ladder,
        actor=token.name, on_scheduled=_hook(core),
    )
    items = [BatchItemOut(dispute_id=str(r.escalation.dispute_id), created=r.created,
                          status=r.status.value, source_hash_differs=r.source_hash_differs)
             for r in results]
    created = sum(1 for r in results if r.created)
    return BatchOut(created=created, existing=len(results) - created, results=items)


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
    """Cancel (the dispute was resolved). Replaying a cancel returns the cancelled state."""
    from escalation.service_layer.cancel import cancel as do_cancel

    before = core.store.get(did)
    if before is not None and before[1] is Status.CANCELLED:
        return render(core, before[0])
    state = do_cancel(did, scheduler=core.scheduler, store=core.store, actor=token.name,
                      reason=(body or CancelIn()).reason)
    return render(core, state)


def pause(did: Dispute, core: Core, token: Writer,
          body: PauseIn | None = Body(None)) -> EscalationOut:
    """Stop a pending escalation's SLA clock; 409 if it is not pending."""
    from escalation.service_layer.pause import pause as do_pause

    res = do_pause(did, scheduler=core.scheduler, store=core.store, ladders=core.ladders,
                   calendars=core.calendars, actor=token.name, reason=(body or PauseIn()).reason)
    return render(core, res.escalation, remaining_ms=res.remaining_ms, basis=res.basis)


def resume(did: Dispute, core: Core, token: Writer) -> EscalationOut:
    """Restart a paused escalation's clock: due = now + remaining window; 409 if not paused."""
    from escalation.bootstrap import schedule_resumed
    from escalation.service_layer.pause import resume as do_resume

    res = do_resume(did, scheduler=core.scheduler, store=core.store, ladders=core.ladders,
                    calendars=core.calendars, actor=token.name)
    schedule_resumed(core, res)  # warnings as fractions of active (unpaused) time
    return render(core, res.escalation, remaining_ms=res.remaining_ms, basis=res.basis)


for _path in DISPUTE_PATHS:
    _by = "by_external_id" if "{source}" in _path else "by_id"
    _extra = path_parameters(_path)
    router.add_api_route(_path, get_one, methods=["GET"], response_model=EscalationOut,
                         responses=ERRORS, openapi_extra=_extra, name=f"get_{_by}")
    for _action, _fn in (("cancel", cancel), ("pause", pause), ("resume", resume)):
        router.add_api_route(f"{_path}/{_action}", _fn, methods=["POST"],
                             response_model=EscalationOut, responses=ERRORS,
                             openapi_extra=_extra, name=f"{_action}_{_by}")
