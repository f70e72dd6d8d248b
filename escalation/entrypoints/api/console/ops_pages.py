"""Console pages for admins and compliance: ladders (versions, releases, a diff between two
versions, ``ladder apply`` runs) and operations (dead letters, queue depth per shard, firing
lag, claims held, maintenance runs). docs/console.md.

Both pages are read with a compliance or admin session. The only writes are retry and purge
of a dead letter: POST forms, admin tokens that are not read-only only (403 otherwise,
buttons hidden), CSRF-checked like sign-out (403 on a mismatch), through the use case of
``escalation dead retry|purge`` (``service_layer.dead_letters.DeadLetters``) with the
session's token name as the actor. Its reads go through ``ports.ConsoleOpsReads``
(``bootstrap.console_ops_for``).
"""

from __future__ import annotations

import hmac
import json
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from escalation.bootstrap import App, console_ops_for, dead_letters_for
from escalation.domain.access import Permission, TokenInfo
from escalation.domain.errors import EscalationError, InvalidInput, NotFound
from escalation.domain.ladder import Ladder
from escalation.domain.ladder_diff import LadderDiff, diff
from escalation.domain.ladder_ledger import RUN_EVENTS
from escalation.domain.timeutil import from_ms
from escalation.entrypoints.api.console.routes import (
    _core,
    _form,
    _headers,
    _param,
    _user,
    csrf_for,
    render,
)
from escalation.ports import ConsoleOpsReads

router = APIRouter(prefix="/console", include_in_schema=False)
DEAD_SHOWN = 200
"""Dead letters listed on the operations page (oldest first)."""
RETRY_OUTCOMES = {
    "requeued": "Requeued: due now; the next worker claim decides it again.",
    "absent": "Nothing done: it was no longer a dead letter (retried or purged meanwhile).",
    "no_payload": "Not requeued: its Redis payload is gone (reconcile restores pending "
                  "escalations from PostgreSQL).",
}
"""The retry script's outcomes (``DeadLetters.retry``) as the page says them."""


def _ops(request: Request) -> ConsoleOpsReads:
    reads: ConsoleOpsReads | None = getattr(request.app.state, "console_ops", None)
    if reads is None:
        reads = console_ops_for(_core(request))
        request.app.state.console_ops = reads
    return reads


def may_act(info: TokenInfo) -> bool:
    """Whether a console session may retry or purge dead letters: an admin token (the role
    holding ``Permission.TOKENS``) that is not read-only."""
    return info.permits(Permission.TOKENS) and info.permits(Permission.WRITE)


# --------------------------------------------------------------------------- ladders
def _version_of(core: App, text: str | None, field: str) -> Ladder | None:
    """``name@version`` from a diff form field -> that version's ladder (the released file;
    an unreleased file on disk if not released). None when the field is empty.

    Raises:
        InvalidInput: not ``name@version``, or no such version.
    """
    if text is None:
        return None
    name, _, v = text.rpartition("@")
    if not name or not v.isdigit():
        raise InvalidInput(f"{field}: expected ladder@version, got {text!r}")
    version = int(v)
    if version in core.ladders.versions(name):
        return core.ladders.get(name, version)
    found = core.ladders.files.find(name, version)
    if found is None:
        raise InvalidInput(f"{field}: no ladder version {text!r}")
    return found


def _catalog(core: App, ops: ConsoleOpsReads) -> list[dict[str, Any]]:
    releases = ops.releases()
    files = core.ladders.files
    names = sorted(set(core.ladders.names()) | set(files.names()))
    out = []
    for name in names:
        versions = sorted({v for n, v in releases if n == name} | set(files.versions(name)))
        rows = []
        for v in versions:
            lad = files.find(name, v)
            rel = releases.get((name, v))
            rows.append({"version": v, "release": rel, "file": lad,
                         "edited": rel is not None and lad is not None
                         and lad.checksum != rel.checksum})
        out.append({"name": name, "versions": rows})
    return out


@router.get("/ladders", response_class=HTMLResponse)
def ladders(request: Request) -> HTMLResponse:
    """Every ladder with its versions and release rows, a diff of two versions chosen in the
    form (``from``/``to`` = ``ladder@version``), the ``ladder apply`` runs; each release and
    each ended run links to its ledger event in the audit search (ADR 0012)."""
    _user(request)
    core, ops = _core(request), _ops(request)
    catalog = _catalog(core, ops)
    choices = [f"{lad['name']}@{v['version']}" for lad in catalog for v in lad["versions"]]
    a_text, b_text = _param(request, "from"), _param(request, "to")
    result: LadderDiff | None = None
    error = None
    try:
        old, new = _version_of(core, a_text, "from"), _version_of(core, b_text, "to")
        if (old is None) != (new is None):
            raise InvalidInput(("from" if old is None else "to")
                               + ": choose both versions to compare")
        if old is not None and new is not None:
            if old.name != new.name:
                raise InvalidInput(f"to: {new.name} is another ladder than from "
                                   f"({old.name}); compare two versions of one ladder")
            result = diff(old, new)
    except EscalationError as exc:
        error = str(exc)
    return render(request, "ladders.html", 422 if error else 200, error=error,
                  catalog=catalog, choices=choices, a=a_text or "", b=b_text or "",
                  diff=result, runs=ops.apply_runs(),
                  run_events={k: v.value for k, v in RUN_EVENTS.items()})


# --------------------------------------------------------------------------- operations
def _dead_rows(core: App, actor: str) -> list[dict[str, Any]]:
    return dead_letters_for(core, actor=actor).list(DEAD_SHOWN)


@router.get("/operations", response_class=HTMLResponse)
def operations(request: Request) -> HTMLResponse:
    """Dead letters, queue depth per shard, firing lag, claims held, maintenance runs."""
    info, _secret = _user(request)
    core, ops = _core(request), _ops(request)
    snap = ops.snapshot()
    oldest = min((s.oldest_due_ms for s in snap.shards if s.oldest_due_ms is not None),
                 default=None)
    notice = None
    outcome = request.query_params.get("retried")
    if outcome in RETRY_OUTCOMES:
        notice = RETRY_OUTCOMES[outcome]
    elif request.query_params.get("purged") in ("1", "0"):
        notice = ("Purged; a PURGED row is on the dispute's ledger."
                  if request.query_params["purged"] == "1"
                  else "Purged; the dispute is unknown to PostgreSQL, so no ledger row.")
    return render(request, "operations.html", snap=snap, now=from_ms(snap.now_ms),
                  lag_s=None if oldest is None else (snap.now_ms - oldest) / 1000,
                  oldest=None if oldest is None else from_ms(oldest),
                  dead=_dead_rows(core, info.name), can_act=may_act(info), notice=notice,
                  runs=ops.maintenance_runs(), from_ms=from_ms,
                  member_url=lambda m: "/console/operations/dead?" + urlencode({"member": m}))


def _dead_page(request: Request, info: TokenInfo, member: str, code: int = 200,
               error: str | None = None) -> HTMLResponse:
    """The dead letter page of ``member`` (404 if it is none), with ``error`` shown."""
    try:
        item = dead_letters_for(_core(request), actor=info.name).show(member)
    except EscalationError as exc:
        return render(request, "dead_letter.html", 404, error=error or str(exc), item=None,
                      member=member, can_act=False)
    return render(request, "dead_letter.html", code, error=error, item=item, member=member,
                  dead_at=from_ms(int(item["dead_ms"])),
                  record=json.dumps(item, indent=2, sort_keys=True, ensure_ascii=False),
                  can_act=may_act(info))


@router.get("/operations/dead", response_class=HTMLResponse)
def dead_letter(request: Request) -> HTMLResponse:
    """One dead letter's record (``escalation dead show``), with retry and purge forms for
    an admin session."""
    info, _secret = _user(request)
    return _dead_page(request, info, _param(request, "member") or "")


async def _admin_form(request: Request) -> tuple[TokenInfo, dict[str, str]] | Response:
    """The session's token and the posted form, or a 403 (not an admin that may act, or the
    CSRF token does not match the session's)."""
    info, secret = await run_in_threadpool(_user, request)
    form = await _form(request)
    if not may_act(info):
        return Response("Only an admin token that is not read-only may retry or purge dead "
                        "letters.\n", 403, media_type="text/plain", headers=_headers())
    if not hmac.compare_digest(csrf_for(secret), form.get("csrf", "")):
        return Response("CSRF token mismatch\n", 403, media_type="text/plain",
                        headers=_headers())
    return info, form


@router.post("/operations/dead/retry")
async def dead_retry(request: Request) -> Response:
    """Retry one dead letter (``escalation dead retry MEMBER``); back to the page with the
    outcome."""
    got = await _admin_form(request)
    if isinstance(got, Response):
        return got
    info, form = got
    member = form.get("member", "").strip()
    try:
        outcome = await run_in_threadpool(
            dead_letters_for(_core(request), actor=info.name).retry, member)
    except EscalationError as exc:
        code = 404 if isinstance(exc, NotFound) else 422
        return await run_in_threadpool(_dead_page, request, info, member, code, str(exc))
    return RedirectResponse("/console/operations?" + urlencode({"retried": outcome}), 303,
                            headers=_headers())


@router.post("/operations/dead/purge")
async def dead_purge(request: Request) -> Response:
    """Purge one dead letter (``escalation dead purge MEMBER --yes --reason TEXT``): the
    form's confirm box is the CLI's ``--yes`` (a refusal names the box, never the option);
    the reason goes on the PURGED ledger row."""
    got = await _admin_form(request)
    if isinstance(got, Response):
        return got
    info, form = got
    member = form.get("member", "").strip()
    dl = dead_letters_for(_core(request), actor=info.name)
    try:
        written = await run_in_threadpool(
            lambda: dl.purge(member, confirm=form.get("confirm") == "yes",
                             reason=form.get("reason", "")))
    except EscalationError as exc:
        code = 404 if isinstance(exc, NotFound) else 422
        message = str(exc)
        if isinstance(exc, InvalidInput) and exc.field == "confirm":  # the form's own words
            message = ("purge is permanent: tick \"Purge is permanent\" to confirm; "
                       "nothing purged")
        return await run_in_threadpool(_dead_page, request, info, member, code, message)
    return RedirectResponse("/console/operations?" + urlencode({"purged": int(written)}),
                            303, headers=_headers())
