"""The failed-authentication throttle and the negative token cache (ADR 0011), in memory:
a repeated unknown token costs one store lookup, and a throttled key waits out its window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from escalation.domain.access import Role, TokenInfo
from escalation.entrypoints.api.auth import Throttle, TokenCache, throttle_keys
from escalation.service_layer.tokens import digest


class CountingStore:
    """A token store answering from a dict and counting lookups."""

    def __init__(self, known: dict[str, TokenInfo]) -> None:
        self.known = {digest(s): i for s, i in known.items()}
        self.lookups = 0

    def by_digest(self, d: str) -> tuple[TokenInfo, str] | None:
        self.lookups += 1
        info = self.known.get(d)
        return None if info is None else (info, d)


def _info(name: str) -> TokenInfo:
    now = datetime.now(UTC)
    return TokenInfo(name=name, role=Role.SERVICE, created_at=now,
                     expires_at=now + timedelta(days=1), revoked_at=None)


def test_an_unknown_token_is_looked_up_once() -> None:
    good = "esc_" + "g" * 43
    store = CountingStore({good: _info("svc")})
    cache = TokenCache(store, ttl_s=0, negative_s=60)  # type: ignore[arg-type]
    bad = "esc_" + "b" * 43
    for _ in range(50):
        assert cache.check(bad) is None
    assert store.lookups == 1
    # malformed: no lookup at all
    assert cache.check("Bearer nonsense") is None and store.lookups == 1
    # a valid token is still looked up every time (ttl 0: revocation at once)
    for _ in range(3):
        info = cache.check(good)
        assert info is not None and info.name == "svc"
    assert store.lookups == 4


def test_without_a_negative_cache_each_unknown_token_is_a_lookup() -> None:
    store = CountingStore({})
    cache = TokenCache(store, ttl_s=0, negative_s=0)  # type: ignore[arg-type]
    for _ in range(5):
        cache.check("esc_" + "b" * 43)
    assert store.lookups == 5


def test_the_negative_cache_is_bounded() -> None:
    store = CountingStore({})
    cache = TokenCache(store, ttl_s=0, negative_s=60, max_unknown=10)  # type: ignore[arg-type]
    for i in range(30):
        cache.check(f"esc_{i:043d}")
    assert cache.cached(f"esc_{29:043d}") is None  # the newest remembered
    assert cache.cached(f"esc_{0:043d}") is False  # the oldest forgotten


def test_throttle_refuses_after_the_limit_until_the_window_ends() -> None:
    now = [1000.0]
    t = Throttle(limit=3, window_s=0.5, clock=lambda: now[0])
    keys = throttle_keys("10.0.0.1", "esc_abcdefghXYZ")
    assert keys == ("addr:10.0.0.1", "prefix:esc_abcdefgh")
    for _ in range(3):
        assert t.wait_s(*keys) == 0
        t.fail(*keys)
    now[0] += 0.25  # (binary fractions: the sums below are exact)
    assert t.wait_s(*keys) == 0.25
    # the same prefix from another address is throttled too; another prefix there is not
    assert t.wait_s(*throttle_keys("10.9.9.9", "esc_abcdefghOTHER")) > 0
    assert t.wait_s(*throttle_keys("10.9.9.9", "esc_zzzzzzzz")) == 0
    now[0] += 0.125
    assert t.wait_s(*keys) == 0.125
    now[0] += 0.125  # the window's end
    assert t.wait_s(*keys) == 0
    t.fail(*keys)  # a failure after it opens a new window: one of three, not throttled
    assert t.wait_s(*keys) == 0


def test_throttle_forgets_the_least_recent_keys_beyond_its_bound() -> None:
    t = Throttle(limit=1, window_s=60, max_keys=5)
    for i in range(10):
        t.fail(f"k{i}")
    assert t.wait_s("k9") > 0 and t.wait_s("k0") == 0
