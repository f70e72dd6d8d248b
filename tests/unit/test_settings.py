"""escalation.settings: the scheduler's configuration table, refused out of range, boundaries kept.

docs/operations.md, "Configuration": poll_interval_s 5 (1-60), batch_size 50 (1-500),
lock_ttl_s 30 (5-300), jitter 0.2 (0.0-0.5). ``shards`` (1-1024) is ours.
"""

from __future__ import annotations

import os

import pytest

from escalation import settings as settings_module
from escalation.domain.errors import ConfigError, InvalidInput
from escalation.settings import RANGES, Settings, get_settings

# parameter -> (range as the message shows it, values below / above the range, boundaries)
TABLE: dict[str, tuple[str, list[float], list[float]]] = {
    "poll_interval_s": ("1-60", [0, 0.5, 61, 3600], [1, 60]),
    "batch_size": ("1-500", [0, -1, 501], [1, 500]),
    "lock_ttl_s": ("5-300", [4, 0, 301], [5, 300]),
    "jitter": ("0-0.5", [-0.01, 0.51, 1.0], [0.0, 0.5]),
    "shards": ("1-1024", [0, 1025], [1, 1024]),
}

OUT_OF_RANGE = [(name, bad) for name, (_, bads, _) in TABLE.items() for bad in bads]
BOUNDARIES = [(name, ok) for name, (_, _, oks) in TABLE.items() for ok in oks]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ESCALATION_* variable from the machine leaks into these tests."""
    for key in list(os.environ):
        if key.upper().startswith("ESCALATION_"):
            monkeypatch.delenv(key)


def _env_value(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def test_defaults_are_the_seed_table() -> None:
    settings = get_settings()

    assert settings.poll_interval_s == 5
    assert settings.batch_size == 50
    assert settings.lock_ttl_s == 30
    assert settings.jitter == 0.2
    assert settings.shards == 1


def test_no_urls_by_default_means_embedded_servers() -> None:
    settings = get_settings()

    assert settings.redis_url is None
    assert settings.database_url is None


def test_every_ranged_parameter_is_covered_here() -> None:
    assert set(RANGES) == set(TABLE)


@pytest.mark.parametrize(("name", "value"), OUT_OF_RANGE)
def test_out_of_range_env_var_is_refused_naming_parameter_and_range(
    monkeypatch: pytest.MonkeyPatch, name: str, value: float
) -> None:
    monkeypatch.setenv(f"ESCALATION_{name.upper()}", _env_value(value))

    with pytest.raises(ConfigError) as info:
        get_settings()

    message = str(info.value)
    assert f"ESCALATION_{name.upper()}" in message
    assert name in message
    assert TABLE[name][0] in message


@pytest.mark.parametrize(("name", "value"), OUT_OF_RANGE)
def test_out_of_range_override_is_refused_naming_parameter_and_range(
    name: str, value: float
) -> None:
    with pytest.raises(ConfigError) as info:
        get_settings(**{name: value})

    message = str(info.value)
    assert name in message
    assert TABLE[name][0] in message


def test_an_override_is_named_by_the_option_that_gave_it() -> None:
    with pytest.raises(ConfigError) as info:
        get_settings(audit_retention_days=10,
                     spelled={"audit_retention_days": "--retention-days"})
    assert "--retention-days:" in str(info.value)
    assert "--audit-retention-days" not in str(info.value)


@pytest.mark.parametrize(("name", "value"), BOUNDARIES)
def test_boundary_values_are_accepted_from_env(
    monkeypatch: pytest.MonkeyPatch, name: str, value: float
) -> None:
    monkeypatch.setenv(f"ESCALATION_{name.upper()}", _env_value(value))

    assert getattr(get_settings(), name) == value


@pytest.mark.parametrize(("name", "value"), BOUNDARIES)
def test_boundary_values_are_accepted_as_overrides(name: str, value: float) -> None:
    assert getattr(get_settings(**{name: value}), name) == value


def test_override_wins_over_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ESCALATION_BATCH_SIZE", "10")

    assert get_settings(batch_size=20).batch_size == 20


def test_none_override_is_ignored_and_env_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ESCALATION_LOCK_TTL_S", "60")

    assert get_settings(lock_ttl_s=None).lock_ttl_s == 60


def test_env_var_names_are_case_insensitive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("escalation_poll_interval_s", "7")

    assert get_settings().poll_interval_s == 7


def test_a_value_of_the_wrong_type_is_refused_naming_the_parameter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ESCALATION_BATCH_SIZE", "fifty")

    with pytest.raises(ConfigError, match="ESCALATION_BATCH_SIZE"):
        get_settings()


def test_several_bad_values_are_all_named_in_one_error() -> None:
    with pytest.raises(ConfigError) as info:
        get_settings(batch_size=0, jitter=0.9)

    assert "batch_size" in str(info.value)
    assert "jitter" in str(info.value)


def test_config_error_is_a_usage_error_with_exit_code_2() -> None:
    with pytest.raises(InvalidInput) as info:
        get_settings(poll_interval_s=0)

    assert info.value.exit_code == 2


def test_lease_ms_is_lock_ttl_in_milliseconds() -> None:
    assert get_settings(lock_ttl_s=45).lease_ms == 45_000


def test_namespace_with_illegal_characters_is_refused() -> None:
    with pytest.raises(ConfigError, match="namespace"):
        get_settings(namespace="has space{")


def test_home_comes_from_escalation_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]
) -> None:
    monkeypatch.setenv("ESCALATION_HOME", str(tmp_path))

    assert str(get_settings().home) == str(tmp_path)


def test_settings_class_is_not_instantiated_at_import() -> None:
    assert not any(isinstance(v, Settings) for v in vars(settings_module).values())


def test_printed_server_urls_hide_their_passwords() -> None:
    from escalation.entrypoints.cli_common import redact_url

    assert redact_url("redis://:s3cret@127.0.0.1:6379/0") == "redis://:***@127.0.0.1:6379/0"
    assert (redact_url("postgresql://postgres:pw@127.0.0.1:5432/escalation")
            == "postgresql://postgres:***@127.0.0.1:5432/escalation")
    assert redact_url("redis://127.0.0.1:6379/9") == "redis://127.0.0.1:6379/9"
    assert redact_url(None) is None
