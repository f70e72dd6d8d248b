"""Console pages and downloads (read-only; compliance or admin tokens).

Sign-in: ``POST /console/login`` takes a token from ``escalation token create`` and exchanges
it for a server-side session (``service_layer.sessions``, ADR 0011): the ``HttpOnly;
SameSite=Strict; Path=/console`` cookie (``Secure`` over HTTPS) holds a new random session
id, never the token, and is no bearer token. A session ends at sign-out (server-side), after
``console_session_idle_s`` without a request, ``console_session_lifetime_s`` after sign-in, or
when its token is revoked or expires. Failed sign-ins count in the API's throttle (429). The
only POST forms (sign-in, sign-out) carry a CSRF token: before sign-in a random value
double-submitted in a cookie, after sign-in an HMAC of the session id. The first request
``console_session_rotate_s`` after the id was issued gets a new id (``edge.Edge`` sends it); the
old one works ``console_session_rotate_grace_s`` more. Filters are GET forms.
Times are shown in the institution's zone (``ESCALATION_INSTITUTION_TIMEZONE``) with the
UTC offset; a date typed in a filter is a local date in that zone (the form says so).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
import math
import secrets
import tempfile
import threading
import time as clock
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode
from uuid import UUID
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Request
from fastapi.concurrency import iterate_in_threadpool, run_in_threadpool
from fastapi.responses import (
    HTMLResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape

from escalation.bootstrap import (
    App,
    checkpoint_store_for,
    console_queries_for,
    ledger_search_for,
    page_fanout,
    rolled_deadlines_for,
    sla_rollup_for,
)
from escalation.domain.access import Permission, TokenInfo
from escalation.domain.errors import EscalationError, InvalidInput, NotFound, RollupNotBackfilled
from escalation.domain.timeutil import iso_text
from escalation.entrypoints import charts
from escalation.entrypoints.api.auth import throttle_keys
from escalation.entrypoints.api.console import HERE
from escalation.ports import (
    ClockFilter,
    ClockKey,
    DeadlineList,
    LedgerSearch,
    PendingEscalation,
    PendingFilter,
)
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


def _brief(value: Any) -> str:
    """The plain (text, number, true/false) entries of a ledger row's details, sorted by key,
    as ``key: value; ...``; nested objects and lists are left to the row's full payload."""
    if not isinstance(value, dict):
        return _details(value)
    return "; ".join(f"{k}: {v}" for k, v in sorted(value.items())
                     if isinstance(v, (str, int, float, bool)) and v != "")


def _pretty(value: Any) -> str:
    """A ledger row's details as indented JSON with sorted keys (text: autoescaped by the
    template, so a payload holding markup is shown as text)."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def source_of(trail: Any) -> str | None:
    """The source system's name a dispute was enqueued from: its ENQUEUED row's
    ``details.source`` (the projection's ``escalation_state.source`` is copied from it);
    None when not recorded (named by UUID over the API, or enqueued before it was kept)."""
    for r in trail:
        if r.event == "ENQUEUED" and isinstance(r.details, dict) and r.details.get("source"):
            return str(r.details["source"])
    return None


def source_attributes_of(trail: Any) -> dict[str, str] | None:
    """The source attributes (``domain.source_attributes``) a dispute's ENQUEUED row
    recorded; None when it recorded none. The page reads them from the trail it shows."""
    from escalation.domain.source_attributes import recorded_source_attributes

    return next((recorded_source_attributes(r.details) for r in trail
                 if r.event == "ENQUEUED"), None)


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
env.filters["brief"] = _brief
env.filters["pretty"] = _pretty
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
    check rotated the id, the response carries the new one (``edge.Edge`` sends it) and pages
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


def _queries(request: Request) -> dl.ConsoleQueries:
    q: dl.ConsoleQueries | None = getattr(request.app.state, "console_queries", None)
    if q is None:
        q = console_queries_for(_core(request))
        request.app.state.console_queries = q
    return q


ROLLUP_NOTICE = ("Computed from the ledger, not from the SLA rollup ({why}): slow on a large "
                 "ledger. Run `escalation report sla-refresh` once to serve this page from "
                 "the rollup.")
"""What the deadline lists and the overview say while the rollup is not backfilled."""


def _rolled(request: Request) -> tuple[dl.RolledDeadlines, datetime] | str:
    """The rollup's deadline rows, just refreshed, and the instant their states hold at
    (docs/adr/0037); while the rollup is not backfilled (ADR 0034: a request never runs
    the backfill) the notice the page shows instead, and the caller computes from the
    ledger."""
    from escalation.service_layer import sla_rollup as roll

    core = _core(request)
    try:
        at = roll.served_refresh(roll.RollupPorts(sla_rollup_for(core), core.calendars,
                                                  core.ladders.get))
    except RollupNotBackfilled as exc:
        return ROLLUP_NOTICE.format(why=f"not backfilled: {exc.why}")
    reads: dl.RolledDeadlines | None = getattr(request.app.state, "rolled_deadlines", None)
    if reads is None:
        reads = rolled_deadlines_for(core)
        request.app.state.rolled_deadlines = reads
    return reads, at


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
    text = iso_text(text, name)  # week dates, sub-microsecond fractions; t/z read
    try:
        d = date.fromisoformat(text)
    except ValueError:
        pass
    else:
        if end and d == date.max:  # its next day is past the calendar's end
            raise InvalidInput(f"{name}: {text!r} is past the last date this bound can name",
                               field=name)
        return datetime.combine(d + timedelta(days=1 if end else 0), time(0), zone)
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(f"{name}: not a date or ISO-8601 time: {text!r}",
                           field=name) from None
    if t.tzinfo is None:
        raise InvalidInput(f"{name}: a time needs its UTC offset (e.g. -05:00): {text!r}",
                           field=name)
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
    """Pending by ladder and tier, due soon, overdue, deadlines at risk and missed: from
    the SLA rollup, refreshed first (docs/adr/0037); from the ledger, saying so, while the
    rollup is not backfilled."""
    _user(request)
    core, zone, q = _core(request), _zone(request), _queries(request)
    rolled = _rolled(request)
    notice = rolled if isinstance(rolled, str) else None
    now = q.now() if isinstance(rolled, str) else rolled[1]
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
                      unreadable=unreadable, rollup_notice=notice)
    # the "now" cards: open misses whatever their instant (a period must not hide them),
    # at risk, and deadlines falling due in the next hour and day; each the exact count
    # of the list it links to
    cards = (("open_missed", "open_miss", None, None), ("at_risk", "at_risk", None, None),
             ("breach_hour", "at_risk", now, now + timedelta(hours=1)),
             ("breach_day", "at_risk", now, now + timedelta(days=1)))
    counted: Callable[[], dict[str, Any]]
    windowed: Callable[[], dict[str, int] | None]
    if isinstance(rolled, str):
        post = dl.after_end(core.ladders.all())
        src = dl.DeadlineSources(q, core.ladders.get, core.calendars)

        def counted() -> dict[str, Any]:
            return {name: dl.count_state(src, ClockFilter(
                since=lo, until=hi, state=state, at_risk_s=dl.AT_RISK.total_seconds(),
                after_end=post), now) for name, state, lo, hi in cards}

        def windowed() -> dict[str, int] | None:
            return dl.period_counts(src, since, until, now)
    else:
        rolled_reads = rolled[0]

        def counted() -> dict[str, Any]:
            return {name: rolled_reads.count(ClockFilter(since=lo, until=hi, state=state))
                    for name, state, lo, hi in cards}

        def windowed() -> dict[str, int] | None:
            return dl.rolled_counts(rolled_reads, since, until)
    # three independent reads (the load per tier, the cards, the period's figures), at
    # once on the helper threads bootstrap gives: the page waits for the slowest, not the sum
    parts: list[Callable[[], Any]] = [lambda: q.tier_counts(now), counted, windowed]
    tiers, counts, window = page_fanout().map(lambda read: read(), parts)
    load = dl.tier_load_of(tiers, _ladder_lookup(core))
    counts.update(
        period_counted=window is not None,
        missed=None if window is None else window["missed"],
        met=None if window is None else window["met"],
        undetermined=None if window is None else window["undetermined"],
        pending=sum(t.pending for t in load), due_hour=sum(t.due_hour for t in load),
        due_day=sum(t.due_day for t in load), overdue=sum(t.overdue for t in load))
    soon = {f"{k}_qs": urlencode({"status": "at_risk", "from": now.isoformat(),
                                  "to": (now + span).isoformat()})
            for k, span in (("hour", timedelta(hours=1)), ("day", timedelta(days=1)))}
    period = urlencode({"from": since_t, "to": until_t})
    return render(request, "overview.html", load=load, counts=counts, now=now,
                  since_t=since_t, until_t=until_t, period=period, unreadable=unreadable,
                  cap=dl.COUNT_CAP, hour_qs=soon["hour_qs"], day_qs=soon["day_qs"],
                  rollup_notice=notice)


def _cursor(now: datetime, keyset: tuple[str, ...]) -> str:
    """An opaque next-page cursor: the walk's ``now`` and the last row's keyset."""
    return base64.urlsafe_b64encode(json.dumps([now.isoformat(), *keyset]).encode()).decode()


def _uncursor(text: str | None) -> tuple[datetime, tuple[str, ...]] | None:
    """The walk's ``now`` and keyset of a cursor; None for none. Raises InvalidInput."""
    if text is None:
        return None
    try:
        got = json.loads(base64.urlsafe_b64decode(text.encode()))
        now = datetime.fromisoformat(got[0])
        if now.tzinfo is None or not all(isinstance(k, str) for k in got[1:]):
            raise ValueError(text)
        return now, tuple(got[1:])
    except (ValueError, TypeError, IndexError, UnicodeError):
        raise InvalidInput("cursor: not a cursor of this list (start again from the first "
                           "page)") from None


def stage_of(p: PendingEscalation, now: datetime) -> str:
    """``paused``, ``breached`` (due at or before ``now``) or ``in progress``."""
    if p.status == "paused" or p.due_at is None:
        return "paused"
    return "breached" if p.due_at <= now else "in progress"


def elapsed_share(p: PendingEscalation, now: datetime) -> float | None:
    """The share of the tier's SLA window elapsed at ``now`` (1.0 = due now; over 1 once
    breached); None while paused."""
    if p.due_at is None:
        return None
    window = max((p.due_at - p.entered_tier_at).total_seconds(), 0.001)
    return (now - p.entered_tier_at).total_seconds() / window


@router.get("/pending", response_class=HTMLResponse)
def pending(request: Request) -> HTMLResponse:
    """Pending and paused escalations (filters: ladder, tier, window = hour | day | overdue,
    stage = in_progress | breached | paused; sort = due (time to breach) | elapsed (% of
    the SLA window)), in keyset pages over all of them."""
    _user(request)
    core, q = _core(request), _queries(request)
    ladder, tier, window = _param(request, "ladder"), _param(request, "tier"), \
        _param(request, "window")
    stage, sort = _param(request, "stage"), _param(request, "sort") or "due"
    ctx: dict[str, Any] = {"ladder": ladder, "tier": tier, "window": window, "stage": stage,
                           "sort": sort, "qs": lambda **c: _qs(request, **c), "core": core,
                           "stage_of": stage_of, "elapsed": elapsed_share}
    try:
        flt = PendingFilter(ladder, tier, window, stage, sort)
        walk = _uncursor(_param(request, "cursor"))
        now = q.now() if walk is None else walk[0]
        got = q.pending_page(now, flt, None if walk is None else walk[1], PAGE_SIZE + 1)
        total = q.pending_total(now, flt)
    except InvalidInput as exc:
        return _error(request, exc, "pending.html", rows=[], now=q.now(), total=0, nxt=None,
                      **{**ctx, "window": None, "stage": None, "sort": "due"})
    nxt = _cursor(now, got[PAGE_SIZE - 1][1]) if len(got) > PAGE_SIZE else None
    return render(request, "pending.html", rows=[r for r, _k in got[:PAGE_SIZE]], now=now,
                  total=total, nxt=nxt, first=walk is None, **ctx)


def _page_of(request: Request, total: int) -> tuple[int, int]:
    """(page asked for, clamped to the list; pages) of a list of ``total`` rows."""
    try:
        page = max(1, int(request.query_params.get("page", "1")))
    except ValueError:
        page = 1
    pages = max(1, -(-total // PAGE_SIZE))
    return min(page, pages), pages


# --------------------------------------------------------------------------- deadlines
class _DeadlineQuery:
    """The deadline list's parameters, checked, and the clock filter they make."""

    def __init__(self, request: Request) -> None:
        core, zone, q = _core(request), _zone(request), _queries(request)
        self.status = _param(request, "status")
        self.sort = _param(request, "sort") or "deadline_at"
        self.desc = request.query_params.get("dir") == "desc"
        self.still_open = request.query_params.get("open") == "1"
        self.ladder, self.deadline = _param(request, "ladder"), _param(request, "deadline")
        if self.status is not None and self.status not in dl.STATUSES:
            raise InvalidInput(f"status must be one of {', '.join(dl.STATUSES)}, "
                               f"got {self.status!r}")
        if self.sort not in dl.SORT_KEYS:
            raise InvalidInput(f"sort must be one of {', '.join(dl.SORT_KEYS)}, "
                               f"got {self.sort!r}")
        walk = _uncursor(_param(request, "cursor"))
        self.now = q.now() if walk is None else walk[0]
        self.after: ClockKey | None = None
        if walk is not None:
            try:
                self.after = (datetime.fromisoformat(walk[1][0]), UUID(walk[1][1]), walk[1][2])
            except (ValueError, IndexError):
                raise InvalidInput("cursor: not a cursor of this list (start again from the "
                                   "first page)") from None
        self.first = walk is None
        since, until, self.since_t, self.until_t = _period(request, zone, None, self.now)
        known = core.ladders.all()
        self.ladders = sorted({lad.name for lad in known})
        self.names = sorted({d.name for lad in known for d in lad.deadlines})
        # a filter naming nothing the ladders know would list nothing and look like "no
        # misses": refused, as the API and the CLI refuse it
        for field, value, names in (("ladder", self.ladder, self.ladders),
                                    ("deadline", self.deadline, self.names)):
            if value is not None and value not in names:
                raise InvalidInput(f"{field}: unknown {field} {value!r}; known: "
                                   f"{', '.join(names)}")
        state = "open_miss" if self.still_open else self.status
        if self.still_open and self.status not in (None, "missed"):
            state = "none"  # an open miss is missed: any other status selects nothing
        self.flt = ClockFilter(since, until, self.ladder, self.deadline, state,
                               dl.AT_RISK.total_seconds(), dl.after_end(known))
        self.rolled: dl.RolledDeadlines | None = None
        self.notice: str | None = None

    def ctx(self) -> dict[str, Any]:
        """The template's context of the filters."""
        return {"now": self.now, "since_t": self.since_t, "until_t": self.until_t,
                "status": self.status, "still_open": self.still_open, "sort": self.sort,
                "desc": self.desc, "ladders": self.ladders, "names": self.names,
                "ladder": self.ladder, "deadline": self.deadline,
                "rollup_notice": self.notice}

    def refresh(self, request: Request) -> None:
        """Read from the SLA rollup, refreshed now (its instant becomes this list's
        ``now``: a later page refreshes again and reads at its own), or, while it is not
        backfilled, from the ledger with a notice saying so."""
        got = _rolled(request)
        if isinstance(got, str):
            self.rolled, self.notice = None, got
        else:
            self.rolled, self.now = got
            self.notice = None

    def total(self, request: Request) -> int:
        """How many deadlines a list sorted by another key than the instant holds:
        refused above :data:`dl.COUNT_CAP` (InvalidInput naming the sort)."""
        if self.flt.state == "none":
            return 0
        if self.rolled is not None:
            n = self.rolled.count(self.flt, dl.COUNT_CAP + 1)
        else:
            n = _queries(request).clock_count(self.now, self.flt, dl.COUNT_CAP + 1)
        if n > dl.COUNT_CAP:
            raise InvalidInput(
                f"sort: sorting by {self.sort} reads every matching deadline, and more than "
                f"{dl.COUNT_CAP:,} match; narrow the period, ladder or deadline, or sort by "
                "deadline_at (paged over all of them)")
        return n

    def sorted_rows(self, request: Request, offset: int,
                    limit: int) -> list[dl.DeadlineOutcome]:
        """Rows ``offset`` to ``offset + limit`` of the list sorted by a key other than the
        instant (call :meth:`total` first): ordered by the database from the rollup, with
        the outcomes of those rows only; from the ledger, every matching outcome computed
        and sorted here."""
        core, q = _core(request), _queries(request)
        if self.flt.state == "none":
            return []
        src = dl.DeadlineSources(q, core.ladders.get, core.calendars)
        if self.rolled is not None:
            return dl.rolled_sorted(src, self.rolled, self.listed(), offset, limit)
        found = [o for o, _k in dl.walk(src, DeadlineList(self.flt, self.now), batch=1000)
                 if o is not None]
        return dl.select(found, dl.Selection(sort=self.sort,
                                             descending=self.desc))[offset:offset + limit]

    def listed(self) -> DeadlineList:
        """The list asked for: filter, instant, sort and direction."""
        return DeadlineList(self.flt, self.now, self.sort, self.desc)


@router.get("/deadlines", response_class=HTMLResponse)
def deadlines(request: Request) -> HTMLResponse:
    """Met / missed / at-risk deadline lists with filters and sorting: by instant in keyset
    pages over every deadline; by another column over at most ``COUNT_CAP`` of them. From
    the SLA rollup (docs/adr/0037), or from the ledger while it is not backfilled."""
    _user(request)
    core, q = _core(request), _queries(request)
    qs = lambda **c: _qs(request, **c)  # noqa: E731 - the template's link builder
    try:
        dq = _DeadlineQuery(request)
        dq.refresh(request)
        if dq.sort != "deadline_at":
            total = dq.total(request)
            page, pages = _page_of(request, total)
            shown = dq.sorted_rows(request, (page - 1) * PAGE_SIZE, PAGE_SIZE)
            return render(request, "deadlines.html", rows=shown, page=page, pages=pages,
                          total=total, nxt=None, scanned=0, statuses=dl.STATUSES,
                          sorts=list(dl.SORT_KEYS), qs=qs, **dq.ctx())
        if dq.flt.state == "none":
            got = dl.DeadlinePage([], None, 0)
        elif dq.rolled is not None:
            got = dl.rolled_page(dl.DeadlineSources(q, core.ladders.get, core.calendars),
                                 dq.rolled, dq.listed(), dq.after, PAGE_SIZE)
        else:
            got = dl.deadline_page(dl.DeadlineSources(q, core.ladders.get, core.calendars),
                                   dq.listed(), dq.after, PAGE_SIZE)
    except InvalidInput as exc:
        return _error(request, exc, "deadlines.html", rows=[], page=1, pages=1, total=None,
                      nxt=None, scanned=0, ladders=[], names=[], statuses=dl.STATUSES,
                      sorts=list(dl.SORT_KEYS), qs=qs, first=True)
    nxt = None if got.next_key is None else _cursor(dq.now, (
        got.next_key[0].isoformat(), str(got.next_key[1]), got.next_key[2]))
    return render(request, "deadlines.html", rows=got.rows, page=1, pages=1, total=None,
                  nxt=nxt, scanned=got.scanned, first=dq.first, statuses=dl.STATUSES,
                  sorts=list(dl.SORT_KEYS), qs=qs, **dq.ctx())


def _started(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """``chunks`` with its first chunk already produced: a refusal raised while the query
    starts (a bad filter value) is answered as 422 before the response's head is sent,
    instead of cutting the connection of a 200 mid-stream."""
    first = next(chunks, None)
    return chunks if first is None else itertools.chain((first,), chunks)


@router.get("/deadlines.csv")
def deadlines_csv(request: Request) -> Response:
    """The filtered deadline list as CSV (every row, every page; formula injection
    neutralised), streamed as the list is read."""
    _user(request)
    core, q, zone = _core(request), _queries(request), _zone(request)
    try:
        dq = _DeadlineQuery(request)
        dq.refresh(request)
        if dq.sort != "deadline_at":
            rows: Iterable[dl.DeadlineOutcome] = dq.sorted_rows(request, 0,
                                                                dq.total(request))
        elif dq.flt.state == "none":
            rows = []
        elif dq.rolled is not None:
            rows = dl.rolled_walk(dl.DeadlineSources(q, core.ladders.get, core.calendars),
                                  dq.rolled, dq.listed(), dq.after)
        else:
            rows = (o for o, _k in dl.walk(
                dl.DeadlineSources(q, core.ladders.get, core.calendars), dq.listed(),
                dq.after, batch=1000) if o is not None)
        body = _started(c.encode("utf-8") for c in dl.csv_chunks(
            rows, zone, bom=_param(request, "bom") == "1"))
    except InvalidInput as exc:
        return Response(str(exc) + "\n", 422, media_type="text/plain", headers=_headers())
    return StreamingResponse(iterate_in_threadpool(body),
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
    state = core.store.get(did)
    checkpoints = checkpoint_store_for(core)
    report = checkpoint.verify(checkpoints, did)
    cp = None
    if report.checkpoint_id is not None:
        with checkpoints.snapshot() as snap:
            cp = snap.checkpoint(report.checkpoint_id)
    covered = cp is not None and any(r.recorded_at is not None and r.recorded_at <= cp.created_at
                                     for r in trail)
    outcomes = dl.outcomes_of(q.chains_of([did]), q.now(), core.ladders.get, core.calendars)
    return render(request, "dispute.html", did=did, trail=trail, state=state, report=report,
                  checkpoint=cp, covered=covered, outcomes=outcomes, describe=describe_row,
                  source=source_of(trail), source_attributes=source_attributes_of(trail),
                  external_id=next((r.external_id for r in trail if r.external_id), None),
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
        ports = case_file_ports_for(core, core.settings, core.ladders.get,
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


def _ledger(request: Request) -> LedgerSearch:
    return ledger_search_for(_core(request))


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


DECISIONS_TTL_S = 300.0
"""How long the audit form's list of recorded decisions is reused before it is read again."""
_decisions_cache: dict[int, tuple[float, list[str]]] = {}
_decisions_lock = threading.Lock()
_decisions_reading: set[int] = set()


def _decision_names(request: Request) -> list[str]:
    """The audit form's decision names: every ledger event, every decision the ladders can
    record and every one recorded so far. Reading the recorded ones reads the whole ledger
    (a DISTINCT over every row), so it runs in a background thread at most once per
    :data:`DECISIONS_TTL_S` per process; until the first read ends, the form lists the
    events and the ladders' decisions (a search for any other recorded decision still runs:
    ``check_filter`` reads the ledger for a name it does not know)."""
    from escalation.service_layer.audit_export import known_decisions, ladder_decisions

    core = _core(request)
    ledger = _ledger(request)
    producible = ladder_decisions(core.ladders.all())
    key = id(core)
    with _decisions_lock:
        cached = _decisions_cache.get(key)
        stale = cached is None or clock.monotonic() - cached[0] > DECISIONS_TTL_S
        start = stale and key not in _decisions_reading
        if start:
            _decisions_reading.add(key)

    def read() -> None:
        try:
            names = known_decisions(ledger, producible)
            with _decisions_lock:
                _decisions_cache[key] = (clock.monotonic(), names)
        finally:
            with _decisions_lock:
                _decisions_reading.discard(key)

    if start:
        threading.Thread(target=read, name="console-decisions", daemon=True).start()
    if cached is not None:
        return sorted(set(cached[1]) | producible)
    return sorted(set(ledger.ledger_events()) | producible)


@router.get("/audit", response_class=HTMLResponse)
def audit(request: Request) -> HTMLResponse:
    """Audit search (the filters of ``escalation audit search``), cursor pages."""
    _user(request)
    from escalation.service_layer.audit_page import search_page

    ledger = _ledger(request)
    values = {f: request.query_params.get(f, "") for f in AUDIT_FIELDS}
    decisions = _decision_names(request)
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
    if fmt != "manifest":  # the file itself: streamed as the ledger is read
        from escalation.service_layer.audit_export import export_stream

        try:
            body = _started(export_stream(_ledger(request), "csv" if want == "csv" else "jsonl",
                                          _audit_filter(request),
                                          bom=_param(request, "bom") == "1"))
        except EscalationError as exc:
            return Response(str(exc) + "\n", 422, media_type="text/plain",
                            headers=_headers())
        media = "text/csv; charset=utf-8" if want == "csv" else "application/x-ndjson"
        return StreamingResponse(iterate_in_threadpool(body), media_type=media, headers=_headers(
            {"Content-Disposition": f'attachment; filename="audit.{want}"'}))
    try:
        out, manifest = _export(request, want)
    except EscalationError as exc:
        return Response(str(exc) + "\n", 422, media_type="text/plain", headers=_headers())
    _cleanup(out)
    return Response(json.dumps(manifest, indent=2) + "\n", media_type="application/json",
                    headers=_headers({"Content-Disposition":
                                      f'attachment; filename="audit.{want}.manifest.json"'}))


# --------------------------------------------------------------------------- SLA report
@router.get("/sla", response_class=HTMLResponse)
def sla(request: Request) -> HTMLResponse:
    """The SLA report from its rollup (ADR 0033; the figures of ``report sla`` for the
    period): figures per tier in ladder order, the achievement rate per week or month
    (``period``) per ladder and tier and per regulatory deadline, met vs missed and
    time-in-tier charts (server-side SVG), each with its figures as a table. A rollup not
    yet backfilled is a 503 page saying what to run, never partial figures."""
    _user(request)
    from escalation.service_layer import sla_report as rep
    from escalation.service_layer import sla_rollup as roll

    core, zone = _core(request), _zone(request)
    store = sla_rollup_for(core)
    period = _param(request, "period") or "week"
    empty: dict[str, Any] = {"tiers": [], "grace_s": rep.DEFAULT_GRACE_S, "period": period,
                             "periods": roll.PERIODS}
    try:
        since, until, since_t, until_t = _period(request, zone, 30, _queries(request).now())
        assert since is not None and until is not None  # noqa: S101 - defaults given
        cut = roll.spans(since, until, period, zone)
        report, _at = roll.served_report(
            roll.RollupReport(since, until),
            roll.RollupPorts(store, core.calendars, core.ladders.get))
    except RollupNotBackfilled as exc:
        return render(request, "sla.html", 503, notice=str(exc),
                      since_t=_param(request, "from") or "",
                      until_t=_param(request, "to") or "", **empty)
    except InvalidInput as exc:
        return _error(request, exc, "sla.html", **empty)  # the caption still names the grace

    def order(ladder: str, tier: str) -> tuple[str, int, str]:
        return (ladder, _rank(core, ladder, tier), tier)

    tiers = sorted(report.tiers, key=lambda f: order(f.ladder, f.tier))
    met_missed = [(f.ladder, f.tier, f.regulatory_met, f.regulatory_missed) for f in tiers
                  if f.regulatory_met or f.regulatory_missed]
    mm = charts.met_missed("Regulatory deadlines met vs missed, by the tier holding them",
                           [(f"{lad} / {t}", met, missed) for lad, t, met, missed in met_missed])
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0] * len(charts.BUCKETS))
    for ladder, tier, bucket, stays in store.durations(
            since, until, [upper for _b, upper in charts.BUCKETS[:-1]]):
        counts[(ladder, tier)][bucket] += stays
    dist_rows = [(f"{lad} / {t}", counts[(lad, t)]) for lad, t in sorted(counts, key=lambda k:
                                                                        order(*k))]
    dist = charts.distribution("Time in tier: share of stays by duration", dist_rows)
    trend = roll.trend(store, cut)
    tier_lines = sorted(trend.tiers, key=lambda a: order(a.ladder, a.key))

    def cells(a: roll.Achievement) -> list[tuple[str, int, int]]:
        return [(s.label, good, bad) for s, (good, bad) in zip(trend.spans, a.counts,
                                                                 strict=True)]

    word = "week" if period == "week" else "month"
    tier_svg = charts.achievement(
        f"SLA achievement per {word}: stays resolved in the tier vs escalated",
        [(f"{a.ladder} / {a.key}", cells(a)) for a in tier_lines], ("achieved", "breached"))
    deadline_svg = charts.achievement(
        f"Regulatory deadlines met per {word}",
        [(f"{a.ladder} / {a.key}", cells(a)) for a in trend.deadlines], ("met", "missed"))
    return render(request, "sla.html", tiers=tiers, since_t=since_t, until_t=until_t,
                  grace_s=report.grace_s, met_missed_svg=mm, dist_svg=dist,
                  buckets=[b for b, _u in charts.BUCKETS], dist_rows=dist_rows,
                  met_missed=met_missed, period=period, periods=roll.PERIODS,
                  spans=trend.spans, tier_lines=tier_lines, deadline_lines=trend.deadlines,
                  tier_trend_svg=tier_svg, deadline_trend_svg=deadline_svg,
                  percent=charts.percent, end_day=lambda s: s.end - timedelta(microseconds=1))


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
