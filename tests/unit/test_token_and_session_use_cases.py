"""HTTP API tokens (service_layer.tokens) and console sessions (service_layer.sessions) on the
in-memory stores: only digests are stored, a token authenticates while active, a session
lives until sign-out, idleness, its absolute end or its token's revocation, and its id is
rotated once with a grace for the old one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from escalation.domain.access import Role
from escalation.domain.errors import ConflictError, InvalidInput, NotFound
from escalation.service_layer import sessions, tokens
from tests.fakes import FakeSessionStore, FakeTokenStore

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


@pytest.fixture()
def store() -> FakeTokenStore:
    return FakeTokenStore(now_at=T0)


def test_a_created_token_is_stored_as_its_digest_and_authenticates_until_it_expires(
    store: FakeTokenStore,
) -> None:
    secret, info = tokens.create_token(tokens.CreateToken("crm-prod", "service", ttl_days=30),
                                       store)
    assert secret.startswith("esc_") and len(secret) == 47
    [(stored, digest)] = store.tokens.values()
    assert digest == tokens.digest(secret) and secret not in digest
    assert stored == info and info.role is Role.SERVICE
    assert info.expires_at == T0 + timedelta(days=30)
    assert tokens.authenticate(store, secret, T0) == info
    assert tokens.authenticate(store, secret, T0 + timedelta(days=30)) is None  # expired
    assert tokens.authenticate(store, secret + "x", T0) is None
    assert tokens.authenticate(store, "Bearer " + secret, T0) is None  # malformed: no lookup


def test_a_revoked_token_stops_authenticating_and_revoking_again_is_a_conflict(
    store: FakeTokenStore,
) -> None:
    secret, _ = tokens.create_token(tokens.CreateToken("ops", "admin", ttl_days=1), store)
    store.now_at = T0 + timedelta(minutes=5)
    revoked = tokens.revoke_token(store, "ops")
    assert revoked.revoked_at == T0 + timedelta(minutes=5)
    assert tokens.authenticate(store, secret, store.now_at) is None
    with pytest.raises(ConflictError, match="already revoked"):
        tokens.revoke_token(store, "ops")
    with pytest.raises(NotFound):
        tokens.revoke_token(store, "nobody")


@pytest.mark.parametrize(("kw", "needle"), [
    ({"ttl_days": 0}, "ttl-days"),
    ({"ttl_days": 3661}, "ttl-days"),
    ({"role": "root"}, "role"),
    ({"role": "admin", "sources": ["crm"]}, "service"),
])
def test_bad_token_requests_are_refused_and_nothing_is_stored(
    store: FakeTokenStore, kw: dict[str, object], needle: str,
) -> None:
    args: dict[str, object] = {"name": "t1", "role": "service", "ttl_days": 30, **kw}
    with pytest.raises(InvalidInput, match=needle):
        tokens.create_token(tokens.CreateToken(**args), store)  # type: ignore[arg-type]
    assert store.tokens == {}


def test_a_token_name_is_taken_for_good(store: FakeTokenStore) -> None:
    tokens.create_token(tokens.CreateToken("t1", "service", ttl_days=1), store)
    tokens.revoke_token(store, "t1")
    with pytest.raises(ConflictError):
        tokens.create_token(tokens.CreateToken("t1", "service", ttl_days=1), store)


def test_a_scoped_token_names_only_its_sources_disputes(store: FakeTokenStore) -> None:
    from escalation.service_layer.importer import stable_dispute_id

    _, info = tokens.create_token(
        tokens.CreateToken("crm", "service", ttl_days=1, sources=["crm"]), store)
    did = stable_dispute_id("CASE-1", "crm")[0]
    assert tokens.dispute_in_scope(info, did, "CASE-1")
    assert not tokens.dispute_in_scope(info, stable_dispute_id("CASE-1", "other")[0], "CASE-1")
    assert not tokens.dispute_in_scope(info, did, None)
    assert tokens.source_refusal(info, "crm") is None
    assert "not 'other'" in (tokens.source_refusal(info, "other") or "")
    assert "name the dispute by source" in (tokens.source_refusal(info, None) or "")


IDLE, ROTATE, GRACE = 900.0, 300.0, 30.0


def _signed_in(store: FakeTokenStore, lifetime_s: float = 8 * 3600) -> tuple[
        FakeSessionStore, str]:
    _, info = tokens.create_token(tokens.CreateToken("jane", "compliance", ttl_days=1), store)
    ses = FakeSessionStore(store)
    return ses, sessions.sign_in(ses, info, lifetime_s)


def test_a_session_is_stored_as_its_digest_and_checks_as_its_token(
    store: FakeTokenStore,
) -> None:
    ses, sid = _signed_in(store)
    assert sid.startswith("ses_") and list(ses.sessions) == [sessions.session_digest(sid)]
    got = sessions.check(ses, sid, IDLE, ROTATE, GRACE)
    assert got is not None and got.token.name == "jane" and got.new_id is None
    assert got.cache_s == ROTATE  # checked at once: the whole rotation period ahead
    assert sessions.check(ses, "esc_" + sid[4:], IDLE, ROTATE, GRACE) is None


def test_sign_out_ends_the_session_and_a_second_sign_out_says_so(
    store: FakeTokenStore,
) -> None:
    ses, sid = _signed_in(store)
    assert sessions.sign_out(ses, sid)
    assert sessions.check(ses, sid, IDLE, ROTATE, GRACE) is None
    assert not sessions.sign_out(ses, sid)


def test_a_session_dies_idle_at_its_absolute_end_and_with_its_token(
    store: FakeTokenStore,
) -> None:
    ses, sid = _signed_in(store)
    store.now_at += timedelta(seconds=IDLE + 1)
    assert sessions.check(ses, sid, IDLE, ROTATE, GRACE) is None
    ses, sid = _signed_in(FakeTokenStore(now_at=T0), lifetime_s=60)
    ses.tokens.now_at += timedelta(seconds=61)
    assert sessions.check(ses, sid, IDLE, ROTATE, GRACE) is None
    ses, sid = _signed_in(FakeTokenStore(now_at=T0))
    tokens.revoke_token(ses.tokens, "jane")
    assert sessions.check(ses, sid, IDLE, ROTATE, GRACE) is None


def test_an_old_id_is_rotated_once_and_accepted_only_within_the_grace(
    store: FakeTokenStore,
) -> None:
    ses, sid = _signed_in(store)
    store.now_at += timedelta(seconds=ROTATE)
    got = sessions.check(ses, sid, IDLE, ROTATE, GRACE)
    assert got is not None and got.new_id is not None and got.new_id != sid
    again = sessions.check(ses, sid, IDLE, ROTATE, GRACE)  # in the grace: no second new id
    assert again is not None and again.new_id is None and again.cache_s == 0.0
    store.now_at += timedelta(seconds=GRACE)
    assert sessions.check(ses, sid, IDLE, ROTATE, GRACE) is None
    fresh = sessions.check(ses, got.new_id, IDLE, ROTATE, GRACE)
    assert fresh is not None and fresh.token.name == "jane"


def test_signing_in_with_a_planted_cookie_ends_it_and_issues_a_new_id(
    store: FakeTokenStore,
) -> None:
    ses, old = _signed_in(store)
    new = sessions.sign_in(ses, tokens.find(store, "esc_x") or store.all()[0], 3600,
                           replacing=old)
    assert new != old
    assert sessions.check(ses, old, IDLE, ROTATE, GRACE) is None
    assert sessions.check(ses, new, IDLE, ROTATE, GRACE) is not None
