"""Console pages and downloads (read-only; compliance or admin tokens).

Sign-in: ``POST /console/login`` takes a token from ``escalation token create`` and exchanges
it for a server-side session (``service_layer.sessions``, ADR 0011): the ``HttpOnly;
SameSite=Strict; Path=/console`` cookie (``Secure`` over HTTPS) holds a new random session
id, never the token, and is no bearer token. A session ends at sign-out (server-side), after
``console_session_idle_s`` without a request, ``console_session_lifetime_s`` after sign-in, or
when its token is revoked or expires. Failed sign-ins count in the API's throttle (429). The
only POST forms (sign-in, sign-out) carry a CSRF token: before sign-in a random value
double-submitted in a cookie, after sign-in an HMAC of the session id. The first request
``console_session_rotate_s`` after the id was issued gets a new id (``SessionCookie``); the
old one works ``console_session_rotate_grace_s`` more. Filters are GET forms.
Times are shown in the institution's zone (``ESCALATION_INSTITUTION_TIMEZONE``) with the
UTC offset; a date typed in a filter is a local date in that zone (the form says so).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import secrets
import tempfile
from collections import defaultdict
from dataclasses import asdict
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape
from starlette.background import BackgroundTask
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from escalation.bootstrap import App
from escalation.domain.access import Permission, TokenInfo
from escalation.domain.errors import EscalationError, InvalidInput, NotFound
from escalation.entrypoints import charts
from escalation.entrypoints.api.auth import throttle_keys
from escalation.entrypoints.api.console import HERE
from escalation.service_layer import deadline_outcomes as dl

router = APIRouter(prefix="/console", include_in_schema=False)
SESSION_COOKIE = "esc_console"
LOGIN_COOKIE = "esc_console_login"
PAGE_SIZE = 50
_CSP = ("default-src 'self'; style-src 'self'; img-src 'self' data:; script-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")

env = Environment(loader=FileSystemLoader(HERE / "templates"),
                  autoescape=select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True)


class LoginRequired(Exception):
    """No valid console session: redirect to the sign-in form."""

    def __init__(self, next_url: str) -> None:
        super().__init__(next_url)
        self.next_url = next_url


async def on_login_required(request: Request, exc: Exception) -> Response:
    """Redirect to ``/console/login?next=...``."""
    assert isinstance(exc, LoginRequired)  # noqa: S101 - registered for this class
    return RedirectResponse("/console/login?" + urlencode({"next": exc.next_url}), 303)


# --------------------------------------------------------------------------- formatting
def fmt_at(value: datetime | None, zone: ZoneInfo) -> str:
    """``2026-03-02 09:00:00 EST (UTC-05:00)`` in ``zone``; "" for None."""
    if value is None:
        return ""
    local = value.astimezone(zone)
    off = local.strftime("%z")
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()} (UTC{off[:3]}:{off[3:]})"


def fmt_duration(seconds: float | None) -> str:
    """Human units: ``42 s``, ``5 min``, ``3 h 20 min``, ``2 d 4 h``; "" for None."""
    if seconds is None:
        return ""
    s = round(seconds)
    sign = "-" if s < 0 else ""
    s = abs(s)
    days, rem = divmod(s, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, secs = divmod(rem, 60)
    if days:
        return f"{sign}{days} d {hours} h"
    if hours:
        return f"{sign}{hours} h {minutes} min"
    if minutes:
        return f"{sign}{minutes} min"
    return f"{sign}{secs} s"


def _details(value: Any) -> str:
    if not value:
        return ""
    if isinstance(value, dict):
        return "; ".join(f"{k}: {v if isinstance(v, str) else json.dumps(v)}"
                         for k, v in sorted(value.items()))
    return str(value)


def describe_row(event: str, details: Any, zone: ZoneInfo) -> str:
    """A readable line for an ACTION_RECORDED or RESOLVED ledger row (action, instant,
    actor-independent facts: amount, evidence, note; a resolution's outcome and the
    deadlines it found late); "" for other events (their details are shown as they are)."""
    if event not in ("ACTION_RECORDED", "RESOLVED") or not isinstance(details, dict):
        return ""
    at = details.get("occurred_at")
    when = "instant not given" if at is None else fmt_at(datetime.fromisoformat(str(at)), zone)
    parts: list[str] = []
    if event == "RESOLVED":
        outcome = str(details.get("outcome", "unstated")).replace("_", " ")
        parts.append(f"resolved: {outcome}, on {when}")
        if details.get("reason"):
            parts.append(f"reason: {details['reason']}")
        if details.get("late"):
            parts.append("missed: " + ", ".join(str(n) for n in details["late"]))
    else:
        action = str(details.get("action", "?")).replace("_", " ")
        parts.append(f"{action} on {when}")
        if details.get("amount") is not None:
            parts.append(f"amount {details['amount']} {details.get('currency', '')}".rstrip())
        evidence = details.get("evidence")
        if isinstance(evidence, dict) and evidence.get("ref"):
            parts.append(f"evidence {evidence['ref']}")
        if details.get("note"):
            parts.append(f"note: {details['note']}")
        replan = details.get("replan")
        if isinstance(replan, dict) and replan.get("due_at_after"):
            parts.append("due moved to " + fmt_at(
                datetime.fromisoformat(str(replan["due_at_after"])), zone))
    asserted = details.get("asserted")
    if isinstance(asserted, dict):
        flag = asserted.get("timely")
        timely = "timely" if flag is True else ("late" if flag is False else "no timeliness")
        parts.append(f"per source {asserted.get('source') or ''}: {timely}".replace(" :", ":"))
    return "; ".join(parts)


def _soft(value: Any) -> Markup:
    """Escaped text with line-break opportunities after ``_`` and before ``@`` (ladder and
    deadline names wrap between words, never inside one)."""
    text = str(escape(str(value)))  # escaped first: only <wbr> is added below
    return Markup(text.replace("_", "_<wbr>").replace("@", "<wbr>@"))  # noqa: S704


env.filters["details"] = _details
env.filters["soft"] = _soft
env.filters["dur"] = fmt_duration


# --------------------------------------------------------------------------- session
def csrf_for(secret: str) -> str:
    """The CSRF token of a signed-in session: HMAC-SHA256 of its session id (stable for
    the session, useless without the cookie, reveals nothing of the id)."""
    return hmac.new(secret.encode(), b"escalation-console-csrf", hashlib.sha256).hexdigest()


def _core(request: Request) -> App:
    core: App = request.app.state.core
    return core


def _zone(request: Request) -> ZoneInfo:
    return ZoneInfo(_core(request).settings.institution_timezone)


def _user(request: Request) -> tuple[TokenInfo, str]:
    """The session's token and the id the browser sent (what its CSRF token is of). If the
    check rotated the id, the response carries the new one (``SessionCookie``) and pages
    rendered for it carry the new id's CSRF token."""
    secret = request.cookies.get(SESSION_COOKIE)
    nxt = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    if not secret:
        raise LoginRequired(nxt)
    got = request.app.state.sessions.check(secret)  # SessionCache: token, rotated id
    if got is None or not got[0].permits(Permission.AUDIT):
        raise LoginRequired(nxt)
    info, new_id = got
    request.state.actor = info.name
    request.state.session_id = new_id or secret
    if new_id is not None:
        request.state.session_cookie = session_cookie(request, new_id)
    return info, secret


def session_cookie(request: Request, session_id: str) -> tuple[bytes, bytes]:
    """The ``Set-Cookie`` header of the session cookie holding ``session_id``: ``HttpOnly;
    SameSite=Strict; Path=/console``, ``Secure`` over HTTPS (at sign-in and rotation)."""
    resp = Response()
    resp.set_cookie(SESSION_COOKIE, session_id, httponly=True, samesite="strict",
                    path="/console", secure=request.url.scheme == "https")
    return next(h for h in resp.raw_headers if h[0] == b"set-cookie")


class SessionCookie:
    """Pure ASGI middleware for ``/console``: adds the cookie of a session id rotated while
    the request was served (``request.state.session_cookie``, set by ``_user``) to the
    response, whatever the route returns (page, download, redirect)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on; add the header to ``http.response.start`` if set."""
        if scope["type"] != "http" or not scope["path"].startswith("/console"):
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})

        async def send_cookie(message: Message) -> None:
            header = state.get("session_cookie")
            if message["type"] == "http.response.start" and header is not None:
                message = {**message, "headers": [*message.get("headers", []), header]}
            await send(message)

        await self.app(scope, receive, send_cookie)


def _queries(request: Request) -> Any:
    q = getattr(request.app.state, "console_queries", None)
    if q is None:
        from escalation.adapters.console_queries import PostgresConsoleQueries

        q = PostgresConsoleQueries(_core(request).engine)
        request.app.state.console_queries = q
    return q


def _headers(extra: dict[str, str] | None = None) -> dict[str, str]:
    h = {"Content-Security-Policy": _CSP, "X-Content-Type-Options": "nosniff",
         "Referrer-Policy": "same-origin", "Cache-Control": "no-store"}
    h.update(extra or {})
    return h


def render(request: Request, template: str, code: int = 200, **ctx: Any) -> HTMLResponse:
    """Render ``template`` with the page context (zone, user, csrf, formatters)."""
    zone = _zone(request)
    user = getattr(request.state, "actor", None)
    secret = getattr(request.state, "session_id", None) or request.cookies.get(SESSION_COOKIE)
    html = env.get_template(template).render(
        zone=zone, zone_name=str(zone), user=user, path=request.url.path,
        csrf=csrf_for(secret) if secret and user else "",
        at=lambda v: fmt_at(v, zone), **ctx)
    return HTMLResponse(html, code, headers=_headers())


def _error(request: Request, exc: EscalationError, template: str, **ctx: Any) -> HTMLResponse:
    code = 404 if isinstance(exc, NotFound) else 422
    return render(request, template, code, error=str(exc), **ctx)


# --------------------------------------------------------------------------- inputs
def _param(request: Request, name: str) -> str | None:
    v = request.query_params.get(name)
    return v.strip() if v and v.strip() else None


def parse_instant(
    text: str | None, name: str, zone: ZoneInfo, end: bool = False
) -> datetime | None:
    """A filter bound: ISO-8601 with an offset, or a date (``YYYY-MM-DD``) meaning that
    local day in ``zone`` (its start, or for ``end`` the start of the next day).

    Raises:
        InvalidInput: neither form, or a date-time without offset.
    """
    if text is None:
        return None
    try:
        d = date.fromisoformat(text)
    except ValueError:
        pass
    else:
        return datetime.combine(d + timedelta(days=1 if end else 0), time(0), zone)
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(f"{name}: not a date or ISO-8601 time: {text!r}") from None
    if t.tzinfo is None:
        raise InvalidInput(f"{name}: a time needs its UTC offset (e.g. -05:00): {text!r}")
    return t


def _period(request: Request, zone: ZoneInfo, default_days: int | None,
            now: datetime) -> tuple[datetime | None, datetime | None, str, str]:
    since_t, until_t = _param(request, "from"), _param(request, "to")
    if since_t is None and until_t is None and default_days is not None:
        today = now.astimezone(zone).date()
        since_t = (today - timedelta(days=default_days)).isoformat()
        until_t = today.isoformat()
    since = parse_instant(since_t, "from", zone)
    until = parse_instant(until_t, "to", zone, end=True)
    if since is not None and until is not None and since >= until:
        raise InvalidInput("from must be before to")
    return since, until, since_t or "", until_t or ""


def _ladder_lookup(core: App) -> dl.LadderLookup:
    return core.ladders.get


def _rank(core: App, ladder: str, tier: str) -> int:
    try:
        return core.ladders.latest(ladder).tier(tier).rank
    except EscalationError:
        return 1 << 30


def _qs(request: Request, **changes: Any) -> str:
    params = {k: v for k, v in request.query_params.items() if v}
    for k, v in changes.items():
        if v is None:
            params.pop(k, None)
        else:
            params[k] = str(v)
    return "?" + urlencode(params) if params else ""


# --------------------------------------------------------------------------- sign-in
@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request) -> HTMLResponse:
    """The sign-in form (sets the pre-sign-in CSRF cookie)."""
    nonce = request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(24)
    resp = render(request, "login.html", login_csrf=nonce,
                  next=request.query_params.get("next", "/console"))
    resp.set_cookie(LOGIN_COOKIE, nonce, httponly=True, samesite="strict", path="/console",
                    secure=request.url.scheme == "https")
    return resp


async def _form(request: Request) -> dict[str, str]:
    body = (await request.body())[:16384].decode("utf-8", errors="replace")
    return {k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}


def _safe_next(value: str | None) -> str:
    if not value or not value.startswith("/console") or value.startswith("//"):
        return "/console"
    return value


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    """Check the CSRF double-submit and the token; set the session cookie."""
    form = await _form(request)
    nonce = request.cookies.get(LOGIN_COOKIE, "")
    nxt = _safe_next(form.get("next"))
    if not nonce or not hmac.compare_digest(nonce, form.get("csrf", "")):
        return render(request, "login.html", 403, login_csrf=nonce, next=nxt,
                      error="The form expired; sign in again.")
    secret = form.get("token", "").strip()
    keys = throttle_keys(request.client.host if request.client else None, secret or None)
    throttle = request.app.state.throttle
    known = request.app.state.tokens.cached(secret) if secret else None
    wait = throttle.wait_s(*keys) if not known else 0
    if wait > 0:
        retry = str(max(1, math.ceil(wait)))
        page = render(request, "login.html", 429, login_csrf=nonce, next=nxt,
                      error=f"Too many failed sign-ins; try again in {retry} s.")
        page.headers["Retry-After"] = retry
        return page
    info = (await run_in_threadpool(request.app.state.tokens.check, secret)
            if secret else None)
    if info is None or not info.permits(Permission.AUDIT):
        if info is None:
            throttle.fail(*keys)
        why = ("This token's role may not read the audit ledger (compliance or admin)."
               if info is not None else "Unknown, expired or revoked token.")
        return render(request, "login.html", 401, login_csrf=nonce, next=nxt, error=why)
    settings = _core(request).settings
    session_id = await run_in_threadpool(  # a new id at every sign-in (never a planted one)
        request.app.state.sessions.sign_in, info, settings.console_session_lifetime_s,
        request.cookies.get(SESSION_COOKIE))
    resp = RedirectResponse(nxt, 303, headers=_headers())
    resp.raw_headers.append(session_cookie(request, session_id))
    resp.delete_cookie(LOGIN_COOKIE, path="/console")
    return resp


@router.post("/logout")
async def logout(request: Request) -> Response:
    """Sign out (CSRF-checked): end the session server-side, drop the cookie."""
    _info, secret = await run_in_threadpool(_user, request)
    form = await _form(request)
    if not hmac.compare_digest(csrf_for(secret), form.get("csrf", "")):
        return Response("CSRF token mismatch", 403, headers=_headers())
    # the session's current id: this very request may have rotated it, and then the new id
    # must end and never reach the browser
    await run_in_threadpool(request.app.state.sessions.sign_out, request.state.session_id)
    request.state.session_cookie = None
    resp = RedirectResponse("/console/login", 303, headers=_headers())
    resp.delete_cookie(SESSION_COOKIE, path="/console")
    return resp


# --------------------------------------------------------------------------- overview
@router.get("", response_class=HTMLResponse)
def overview(request: Request) -> HTMLResponse:
    """Pending by ladder and tier, due soon, overdue, deadlines at risk and missed."""
    _user(request)
    core, zone, q = _core(request), _zone(request), _queries(request)
    now = q.now()
    # released ladder versions this server cannot read from its directory: a banner, while
    # everything else is served (docs/operations.md "Ladder directory out of step with the
    # releases")
    unreadable = core.ladders.unreadable()
    try:
        since, until, since_t, until_t = _period(request, zone, 30, now)
    except InvalidInput as exc:  # the form keeps what was typed; the figures are left out
        return _error(request, exc, "overview.html", load=[], counts={}, now=now,
                      since_t=_param(request, "from") or "",
                      until_t=_param(request, "to") or "", period="",
                      unreadable=unreadable)
    load = dl.tier_load(q.pending(), now, _ladder_lookup(core))
    window = dl.deadline_outcomes(q, core.ladders.get, core.calendars, since, until, now=now)
    ahead = dl.deadline_outcomes(q, core.ladders.get, core.calendars, now,
                                 now + dl.AT_RISK, now=now)
    # open misses are counted whatever their instant: a period must not hide them
    open_missed = dl.open_misses(q, core.ladders.get, core.calendars, core.ladders.all(),
                                 now=now)
    counts = {
        "open_missed": len(open_missed),
        "missed": sum(o.status == "missed" for o in window),
        "met": sum(o.status == "met" for o in window),
        "undetermined": sum(o.status == "undetermined" for o in window),
        "at_risk": sum(o.status == "at_risk" for o in ahead),
        "pending": sum(t.pending for t in load),
        "due_hour": sum(t.due_hour for t in load),
        "due_day": sum(t.due_day for t in load),
        "overdue": sum(t.overdue for t in load),
    }
    period = urlencode({"from": since_t, "to": until_t})
    return render(request, "overview.html", load=load, counts=counts, now=now,
                  since_t=since_t, until_t=until_t, period=period, unreadable=unreadable)


@router.get("/pending", response_class=HTMLResponse)
def pending(request: Request) -> HTMLResponse:
    """Pending escalations (filters: ladder, tier, window = hour | day | overdue)."""
    _user(request)
    core, q = _core(request), _queries(request)
    now = q.now()
    ladder, tier, window = _param(request, "ladder"), _param(request, "tier"), \
        _param(request, "window")
    try:
        rows = [p for p in q.pending()
                if (ladder is None or p.ladder == ladder) and (tier is None or p.tier == tier)
                and dl.pending_window(p, now, window)]
    except InvalidInput as exc:
        return _error(request, exc, "pending.html", rows=[], now=now, ladder=ladder, tier=tier,
                      window=None, page=1, pages=1, total=0,
                      qs=lambda **c: _qs(request, **c), core=core)
    page, pages, shown = _page(request, rows)
    return render(request, "pending.html", rows=shown, now=now, ladder=ladder, tier=tier,
                  window=window, page=page, pages=pages, total=len(rows),
                  qs=lambda **c: _qs(request, **c), core=core)


def _page(request: Request, rows: list[Any]) -> tuple[int, int, list[Any]]:
    try:
        page = max(1, int(request.query_params.get("page", "1")))
    except ValueError:
        page = 1
    pages = max(1, -(-len(rows) // PAGE_SIZE))
    page = min(page, pages)
    return page, pages, rows[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]


# --------------------------------------------------------------------------- deadlines
def _deadlines(request: Request) -> tuple[list[dl.DeadlineOutcome], dict[str, Any]]:
    core, zone, q = _core(request), _zone(request), _queries(request)
    now = q.now()
    since, until, since_t, until_t = _period(request, zone, None, now)
    status = _param(request, "status")
    sort = _param(request, "sort") or "deadline_at"
    desc = request.query_params.get("dir") == "desc"
    still_open = request.query_params.get("open") == "1"
    if still_open:  # the overview's open-misses card: every instant, open misses only
        found = dl.open_misses(q, core.ladders.get, core.calendars, core.ladders.all(),
                               now=now)
        found = [o for o in found if o.deadline is not None
                 and (since is None or o.deadline >= since)
                 and (until is None or o.deadline < until)]
    else:
        found = dl.deadline_outcomes(q, core.ladders.get, core.calendars, since, until,
                                     now=now)
    ladders = sorted({o.ladder for o in found})
    names = sorted({o.name for o in found})
    rows = dl.select(found, status=status, ladder=_param(request, "ladder"),
                     deadline=_param(request, "deadline"), sort=sort, descending=desc)
    return rows, {"now": now, "since_t": since_t, "until_t": until_t, "status": status,
                  "still_open": still_open,
                  "sort": sort, "desc": desc, "ladders": ladders, "names": names,
                  "ladder": _param(request, "ladder"), "deadline": _param(request, "deadline")}


@router.get("/deadlines", response_class=HTMLResponse)
def deadlines(request: Request) -> HTMLResponse:
    """Met / missed / at-risk deadline lists with filters, sorting and pages."""
    _user(request)
    try:
        rows, ctx = _deadlines(request)
    except InvalidInput as exc:
        return _error(request, exc, "deadlines.html", rows=[], page=1, pages=1, total=0,
                      ladders=[], names=[], statuses=dl.STATUSES, sorts=list(dl.SORT_KEYS),
                      qs=lambda **c: _qs(request, **c))
    page, pages, shown = _page(request, rows)
    return render(request, "deadlines.html", rows=shown, page=page, pages=pages,
                  total=len(rows), statuses=dl.STATUSES, sorts=list(dl.SORT_KEYS),
                  qs=lambda **c: _qs(request, **c), **ctx)


@router.get("/deadlines.csv")
def deadlines_csv(request: Request) -> Response:
    """The filtered deadline list as CSV (every page; formula injection neutralised)."""
    _user(request)
    try:
        rows, _ctx = _deadlines(request)
    except InvalidInput as exc:
        return Response(str(exc) + "\n", 422, media_type="text/plain", headers=_headers())
    return Response(dl.to_csv(rows, _zone(request), bom=_param(request, "bom") == "1"),
                    media_type="text/csv; charset=utf-8",
                    headers=_headers({"Content-Disposition":
                                      'attachment; filename="deadlines.csv"'}))


# --------------------------------------------------------------------------- dispute
@router.get("/disputes", response_class=HTMLResponse)
def dispute_lookup(request: Request) -> Response:
    """Find a dispute by UUID, or by source and external id, and open its page."""
    _user(request)
    from escalation.service_layer.disputes import resolve_dispute

    did, source, ext = (_param(request, "dispute_id"), _param(request, "source"),
                        _param(request, "external_id"))
    if did is None and source is None and ext is None:
        return render(request, "dispute_lookup.html")
    try:
        uid = resolve_dispute(did, source=source, external_id=ext)[0]
    except InvalidInput as exc:
        return _error(request, exc, "dispute_lookup.html")
    return RedirectResponse(f"/console/disputes/{uid}", 303, headers=_headers())


@router.get("/disputes/{dispute_id}", response_class=HTMLResponse)
def dispute(request: Request, dispute_id: str) -> HTMLResponse:
    """One dispute: its trail as a timeline, chain verification, deadlines."""
    _user(request)
    from escalation.service_layer import checkpoint
    from escalation.service_layer.disputes import resolve_dispute

    core, q = _core(request), _queries(request)
    try:
        did = resolve_dispute(dispute_id)[0]
        trail = core.store.trail(did)
        if not trail:
            raise NotFound(f"no audit rows for dispute {did}")
    except EscalationError as exc:
        return _error(request, exc, "dispute_lookup.html")
    from escalation.adapters.checkpoints import PostgresCheckpoints

    state = core.store.get(did)
    checkpoints = PostgresCheckpoints(core.engine)
    report = checkpoint.verify(checkpoints, did)
    cp = None
    if report.checkpoint_id is not None:
        with checkpoints.snapshot() as snap:
            cp = snap.checkpoint(report.checkpoint_id)
    covered = cp is not None and any(r.recorded_at is not None and r.recorded_at <= cp.created_at
                                     for r in trail)
    outcomes = dl.deadline_outcomes(q, core.ladders.get, core.calendars, dispute_id=did)
    return render(request, "dispute.html", did=did, trail=trail, state=state, report=report,
                  checkpoint=cp, covered=covered, outcomes=outcomes, describe=describe_row,
                  broken={seq for d, seq in report.broken_chains if d == did})


@router.get("/disputes/{dispute_id}/case-file")
def dispute_case_file(request: Request, dispute_id: str) -> Response:
    """The dispute's case file as a download: the signed file ``escalation audit case-file``
    and the API write (docs/audit.md). A refusal is one line of text: 404 unknown dispute,
    409 a chain that does not verify or no checkpoint yet, 503 no signing key configured."""
    info, _secret = _user(request)
    from escalation.bootstrap import case_file_ports_for
    from escalation.domain.errors import ConfigError
    from escalation.service_layer.case_file import (
        CaseFileRefused,
        ExportCaseFile,
        export_case_file,
    )
    from escalation.service_layer.disputes import resolve_dispute

    core = _core(request)
    try:
        did = resolve_dispute(dispute_id)[0]
        ports = case_file_ports_for(core.engine, core.settings, core.ladders.get,
                                    core.calendars)
        data = export_case_file(ExportCaseFile((did,), info.name), ports)
    except EscalationError as exc:
        code = (404 if isinstance(exc, NotFound) else 409 if isinstance(exc, CaseFileRefused)
                else 503 if isinstance(exc, ConfigError) else 422)
        return Response(str(exc) + "\n", code, media_type="text/plain", headers=_headers())
    return Response(data, media_type="application/json", headers=_headers(
        {"Content-Disposition": f'attachment; filename="case-file-{did}.json"'}))


# --------------------------------------------------------------------------- audit
AUDIT_FIELDS = ("dispute_id", "source", "external_id", "tier", "decision", "from", "to",
                "actor", "ladder", "ladder_version")


def _ledger(request: Request) -> Any:
    from escalation.adapters.audit_search import PostgresLedgerSearch

    return PostgresLedgerSearch(_core(request).engine)


def _audit_filter(request: Request) -> Any:
    from escalation.service_layer.audit_export import AuditFilter, check_filter
    from escalation.service_layer.disputes import resolve_dispute

    zone = _zone(request)
    p = {f: _param(request, f) for f in AUDIT_FIELDS}
    did = None
    if p["dispute_id"] or p["source"] or p["external_id"]:
        did = resolve_dispute(p["dispute_id"], source=p["source"],
                              external_id=p["external_id"])[0]
    version = None
    if p["ladder_version"]:
        try:
            version = int(p["ladder_version"])
        except ValueError:
            raise InvalidInput(f"ladder version must be a whole number, got "
                               f"{p['ladder_version']!r}") from None
    flt = AuditFilter(dispute_id=did, tier=p["tier"], decision=p["decision"],
                      since=parse_instant(p["from"], "from", zone),
                      until=parse_instant(p["to"], "to", zone, end=True),
                      actor=p["actor"], ladder=p["ladder"], ladder_version=version)
    check_filter(_ledger(request), flt, _core(request).ladders.all())
    return flt


@router.get("/audit", response_class=HTMLResponse)
def audit(request: Request) -> HTMLResponse:
    """Audit search (the filters of ``escalation audit search``), cursor pages."""
    _user(request)
    from escalation.service_layer.audit_export import known_decisions, ladder_decisions
    from escalation.service_layer.audit_page import search_page

    ledger = _ledger(request)
    values = {f: request.query_params.get(f, "") for f in AUDIT_FIELDS}
    decisions = known_decisions(ledger, ladder_decisions(_core(request).ladders.all()))
    try:
        flt = _audit_filter(request)
        rows, nxt = search_page(ledger, flt, PAGE_SIZE, _param(request, "cursor"))
    except EscalationError as exc:
        return _error(request, exc, "audit.html", rows=[], values=values,
                      decisions=decisions, nxt=None, qs=lambda **c: _qs(request, **c))
    return render(request, "audit.html", rows=rows, values=values, decisions=decisions,
                  nxt=nxt, qs=lambda **c: _qs(request, **c))


def _export(request: Request, fmt: str) -> tuple[Path, dict[str, Any]]:
    from escalation.service_layer.audit_export import COLUMN_DICTIONARY, export

    flt = _audit_filter(request)
    tmp = Path(tempfile.mkdtemp(prefix="esc-console-"))
    out = tmp / f"audit.{fmt}"
    manifest = export(_ledger(request), "csv" if fmt == "csv" else "jsonl", out, flt,
                      bom=_param(request, "bom") == "1").as_dict()
    manifest["csv_formula_guard"] = fmt == "csv"
    manifest["column_dictionary"] = COLUMN_DICTIONARY
    return out, manifest


def _cleanup(path: Path) -> None:
    for f in path.parent.iterdir():
        f.unlink(missing_ok=True)
    path.parent.rmdir()


@router.get("/audit/export.{fmt}")
def audit_export(request: Request, fmt: str) -> Response:
    """``audit.csv`` / ``audit.jsonl`` of the filtered rows (CSV cells guarded against
    formula injection); ``export.manifest`` with ``format=csv|jsonl``: the manifest of that
    file (row count, SHA-256, column dictionary)."""
    _user(request)
    want = request.query_params.get("format", "csv") if fmt == "manifest" else fmt
    if want not in ("csv", "jsonl"):
        return Response(f"unknown export format {want!r}\n", 404, media_type="text/plain")
    try:
        out, manifest = _export(request, want)
    except EscalationError as exc:
        return Response(str(exc) + "\n", 422, media_type="text/plain", headers=_headers())
    if fmt == "manifest":
        _cleanup(out)
        return Response(json.dumps(manifest, indent=2) + "\n", media_type="application/json",
                        headers=_headers({"Content-Disposition":
                                          f'attachment; filename="audit.{want}.manifest.json"'}))
    media = "text/csv; charset=utf-8" if want == "csv" else "application/x-ndjson"
    return FileResponse(out, media_type=media, filename=f"audit.{want}",
                        headers=_headers(), background=BackgroundTask(_cleanup, out))


# --------------------------------------------------------------------------- SLA report
@router.get("/sla", response_class=HTMLResponse)
def sla(request: Request) -> HTMLResponse:
    """The SLA report: figures per tier in ladder order, met vs missed and time-in-tier
    charts (server-side SVG)."""
    _user(request)
    from escalation.adapters.report_queries import PostgresReports
    from escalation.service_layer import sla_report as rep

    core, zone, q = _core(request), _zone(request), _queries(request)
    now = q.now()
    try:
        since, until, since_t, until_t = _period(request, zone, 30, now)
        assert since is not None and until is not None  # noqa: S101 - defaults given
        report = rep.build(PostgresReports(core.engine), since, until, now=now,
                           calendars=core.calendars, ladders=core.ladders.get)
    except InvalidInput as exc:
        return _error(request, exc, "sla.html", tiers=[], charts=[],
                      grace_s=rep.DEFAULT_GRACE_S)  # the caption still names the grace
    tiers = sorted(report.tiers, key=lambda f: (f.ladder, _rank(core, f.ladder, f.tier), f.tier))
    outcomes = dl.deadline_outcomes(q, core.ladders.get, core.calendars, since, until, now=now)
    per_tier: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for o in outcomes:
        if o.status in ("met", "missed"):
            per_tier[(o.ladder, o.tier)][0 if o.status == "met" else 1] += 1
    order = sorted(per_tier, key=lambda k: (k[0], _rank(core, k[0], k[1]), k[1]))
    mm = charts.met_missed("Regulatory deadlines met vs missed, by the tier holding them",
                           [(f"{lad} / {t}", per_tier[(lad, t)][0], per_tier[(lad, t)][1])
                            for lad, t in order])
    dist_rows = [(f"{f.ladder} / {f.tier}", charts.bucket_counts(f.durations))
                 for f in tiers if f.durations]
    dist = charts.distribution("Time in tier: share of stays by duration", dist_rows)
    return render(request, "sla.html", tiers=tiers, since_t=since_t, until_t=until_t,
                  grace_s=report.grace_s, met_missed_svg=mm, dist_svg=dist,
                  buckets=[b for b, _u in charts.BUCKETS], dist_rows=dist_rows,
                  met_missed=[(lad, t, *per_tier[(lad, t)]) for lad, t in order],
                  asdict=asdict)


# --------------------------------------------------------------------------- trailing slash
# The API app matches paths exactly (redirect_slashes=False: an API client gets the route
# it asked for, or 404). A person types /console/ or /console/audit/ too: the console sends
# them to the page without the slash, query kept. Registered last, so no page matches first.
@router.get("/", include_in_schema=False)
@router.get("/{page:path}/", include_in_schema=False)
def without_trailing_slash(request: Request, page: str = "") -> RedirectResponse:
    """308 to the same console address without its trailing slash(es)."""
    target = "/console" + ("/" + page.strip("/") if page.strip("/") else "")
    if request.url.query:
        target += "?" + request.url.query
    return RedirectResponse(target, 308, headers=_headers())
