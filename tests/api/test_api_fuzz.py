"""Generated bad inputs (hypothesis) on every route of a real server: each is refused with a
4xx problem document (never a 5xx), and nothing is written (no dispute created, no ledger row
for the tokens used)."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import quote

import sqlalchemy as sa
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from escalation.adapters.audit_store import PostgresAuditStore
from escalation.service_layer.disputes import SOURCE_RE
from tests.api.conftest import body

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(),
                         st.floats(allow_nan=False, allow_infinity=False),
                         st.text(max_size=30))
json_values = st.recursive(json_scalars, lambda c: st.lists(c, max_size=3)
                           | st.dictionaries(st.text(max_size=5), c, max_size=3), max_leaves=6)
naive = st.datetimes().map(lambda d: d.isoformat())
not_iso = st.text(min_size=1, max_size=20).filter(lambda t: not t[:1].isdigit())
bad_money = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),  # JSON numbers are never money
    st.integers(),
    st.sampled_from(["NaN", "-1.00", "inf", "1e400", "1,000.00", "", "٣٤",
                     "9" * 20]),
    st.text(alphabet="abcxyz-+ ", min_size=1, max_size=10),
)
non_hex = st.text(min_size=1, max_size=40).filter(lambda t: any(c not in "0123456789abcdefABCDEF"
                                                                for c in t))
BAD: dict[str, st.SearchStrategy[Any]] = {
    "due_at": st.one_of(naive, not_iso, st.integers(), st.lists(st.integers(), max_size=2)),
    "materiality": bad_money,
    "source_hash": st.one_of(non_hex, st.just(""), st.just("a" * 129), st.integers()),
    "tier": st.text(min_size=1, max_size=20).filter(
        lambda t: t not in ("standard", "senior", "compliance")),
    "ladder": st.text(min_size=1, max_size=20).map(lambda t: "zz" + t),
    "dispute_id": st.text(max_size=40).filter(lambda t: not _is_uuid(t)),
    "notice_at": st.one_of(naive, not_iso),
    "trace_id": st.one_of(st.text(min_size=65, max_size=80), st.integers()),  # "" = absent
    "source": st.text(max_size=10).filter(lambda t: not SOURCE_RE.match(t)),
    "opened_at": st.one_of(naive, not_iso),
}


def _is_uuid(t: str) -> bool:
    try:
        uuid.UUID(t.strip())
    except ValueError:
        return False
    return True


def _rows_by(engine: sa.Engine, actors: list[str]) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM escalation_audit "
                                        "WHERE actor = ANY(:a)"), {"a": actors}).scalar_one())


@st.composite
def bad_bodies(draw: st.DrawFn) -> dict[str, Any]:
    b = body()
    field = draw(st.sampled_from([*BAD, "extra"]))
    if field == "extra":
        b[draw(st.text(min_size=1, max_size=10).filter(lambda k: k not in b and k not in BAD
                                                        and k != "external_id"))] = (
            draw(json_values))
    elif field == "source":  # source goes with external_id, without dispute_id
        b.pop("dispute_id")
        b.update(source=draw(BAD["source"]), external_id="E1")
    elif field == "opened_at":  # both due_at and opened_at, or a bad opened_at alone
        b["opened_at"] = draw(BAD["opened_at"])
    else:
        b[field] = draw(BAD[field])
    return b


def _check_problem(r: Any, *allowed: int) -> None:
    assert r.status_code in allowed, (r.status_code, r.text)
    assert r.headers["content-type"] == "application/problem+json", r.text
    assert r.json()["status"] == r.status_code


@SETTINGS
@given(b=bad_bodies())
def test_create_refuses_bad_bodies_and_writes_nothing(service, engine, b):
    r = service.post("/v1/escalations", json=b)
    _check_problem(r, 422)
    assert r.json()["errors"], r.text
    if isinstance(b.get("dispute_id"), str) and _is_uuid(b["dispute_id"]):
        assert PostgresAuditStore(engine).get(uuid.UUID(b["dispute_id"])) is None


@SETTINGS
@given(bad=bad_bodies(), at=st.integers(0, 4))
def test_batch_with_one_bad_item_writes_nothing(service, engine, bad, at):
    items = [body() for _ in range(4)]
    items.insert(at, bad)
    r = service.post("/v1/escalations/batch", json={"items": items})
    _check_problem(r, 422)
    store = PostgresAuditStore(engine)
    assert all(store.get(uuid.UUID(i["dispute_id"])) is None for i in items if i is not bad)


@SETTINGS
@given(seg=st.text(min_size=1, max_size=40), action=st.sampled_from(
    ["", "/cancel", "/pause", "/resume", "/audit"]), source=st.text(min_size=1, max_size=12))
def test_dispute_routes_refuse_bad_or_unknown_ids(api_server, admin, engine, seg, action,
                                                  source):
    # "." and ".." are dot segments: the client removes them (RFC 3986 5.2.4), so the
    # request goes to another route (GET /v1/escalations: 405), not to a dispute route
    assume(seg not in (".", "..") and source not in (".", ".."))
    before = _rows_by(engine, list(api_server.names.values()))
    method = "GET" if action in ("", "/audit") else "POST"
    for path in (f"/v1/escalations/{quote(seg, safe='')}{action}",
                 f"/v1/sources/{quote(source, safe='')}/escalations/{quote(seg, safe='')}"
                 f"{action}"):
        r = admin.request(method, path)
        _check_problem(r, 404, 422)
    assert _rows_by(engine, list(api_server.names.values())) == before


@SETTINGS
@given(params=st.dictionaries(
    st.sampled_from(["dispute_id", "source", "external_id", "tier", "decision", "from", "to",
                     "actor", "ladder", "ladder_version", "limit", "cursor"]),
    st.text(max_size=30), min_size=1, max_size=4))
def test_audit_search_never_fails_on_bad_parameters(compliance, params):
    r = compliance.get("/v1/audit", params=params)
    if r.status_code == 200:
        assert "rows" in r.json()
    else:
        _check_problem(r, 422)


@SETTINGS
@given(name=st.text(min_size=1, max_size=20), version=st.text(min_size=1, max_size=6),
       since=st.text(max_size=25), until=st.text(max_size=25),
       grace=st.text(max_size=6))
def test_ladder_and_report_routes_refuse_bad_parameters(compliance, name, version, since,
                                                        until, grace):
    r = compliance.get(f"/v1/ladders/{quote(name, safe='')}/versions/{quote(version, safe='')}")
    if r.status_code != 200:
        _check_problem(r, 404, 422)
    r = compliance.get("/v1/reports/sla", params={"from": since, "to": until,
                                                  "grace_s": grace})
    if r.status_code != 200:
        _check_problem(r, 422)


@SETTINGS
@given(b=st.one_of(json_values, st.dictionaries(st.text(max_size=8), json_values,
                                                max_size=4)))
def test_any_json_body_on_write_routes_is_refused_or_harmless(api_server, admin, engine, b):
    before = _rows_by(engine, list(api_server.names.values()))
    did = uuid.uuid4()
    for path in ("/v1/escalations", "/v1/escalations/batch", f"/v1/escalations/{did}/cancel",
                 f"/v1/escalations/{did}/pause", f"/v1/escalations/{did}/resume"):
        r = admin.post(path, json=b)
        _check_problem(r, 404, 422)
    assert _rows_by(engine, list(api_server.names.values())) == before


@SETTINGS
@given(header=st.text(max_size=60))
def test_any_authorization_header_but_a_token_is_401(api_server, header):
    import httpx

    try:
        r = httpx.get(api_server.url + "/readyz", headers={"Authorization": header})
    except (httpx.InvalidURL, UnicodeEncodeError, httpx.LocalProtocolError):
        return  # not a header value HTTP can carry
    # a control character is not a field value (RFC 9110 5.5): uvicorn's C parser
    # (httptools) refuses the request itself with a plain 400 before the app sees it
    if r.status_code == 400 and any((ord(c) < 32 and c != "\t") or ord(c) == 127
                                    for c in header):
        return
    _check_problem(r, 401)


def test_non_standard_json_numbers_and_malformed_json_are_refused(service, engine):
    did = str(uuid.uuid4())
    for raw in (f'{{"dispute_id": "{did}", "source_hash": "ab", "materiality": NaN, '
                '"due_at": "2030-01-01T00:00:00+00:00"}',
                f'{{"dispute_id": "{did}", "source_hash": "ab", "materiality": Infinity, '
                '"due_at": "2030-01-01T00:00:00+00:00"}',
                f'{{"dispute_id": "{did}", "source_hash": "ab"', "", "[]", "null"):
        r = service.post("/v1/escalations", content=raw.encode(),
                         headers={"Content-Type": "application/json"})
        _check_problem(r, 422)
    assert PostgresAuditStore(engine).get(uuid.UUID(did)) is None
