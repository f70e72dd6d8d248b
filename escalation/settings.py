"""Settings from ``ESCALATION_*`` environment variables (pydantic-settings) and CLI flags.

The scheduler's configuration boundaries (docs/operations.md "The scheduler table"); a value out of
range is refused at start with a message naming the parameter and its range.

| parameter        | default | range  |
|------------------|---------|--------|
| poll_interval_s  | 5       | 1-60   |
| batch_size       | 50      | 1-500  |
| lock_ttl_s       | 30      | 5-300  |
| jitter           | 0.2     | 0.0-0.5|
| tier ladder      | ``<ladders_dir>/<default_ladder>.v<N>.toml`` |

``ladders_dir`` (``ESCALATION_LADDERS_DIR``) defaults to the ladders shipped in the package.

No ``Settings()`` is created at import time; entry points call :func:`get_settings`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from escalation.domain.errors import ConfigError
from escalation.resources import shipped_ladders_dir

RANGES: dict[str, tuple[float, float]] = {
    "poll_interval_s": (1, 60),
    "batch_size": (1, 500),
    "lock_ttl_s": (5, 300),
    "jitter": (0.0, 0.5),
    "shards": (1, 1024),
}


def default_home() -> Path:
    """Per-user data directory for the embedded servers (``ESCALATION_HOME`` overrides)."""
    return Path(platformdirs.user_data_dir("escalation"))


class Settings(BaseSettings):
    """All runtime configuration. Env vars are ``ESCALATION_<NAME>`` (case-insensitive).

    ``redis_url`` / ``database_url`` unset means: start the embedded Valkey and PostgreSQL
    under ``home`` (see ``escalation.adapters.embedded``).
    """

    model_config = SettingsConfigDict(env_prefix="ESCALATION_", extra="ignore")

    redis_url: str | None = None
    database_url: str | None = None
    home: Path = Field(default_factory=default_home)
    namespace: str = Field(default="esc", pattern=r"^[A-Za-z0-9_.-]{1,40}$")
    shards: int = 1
    poll_interval_s: float = 5
    batch_size: int = 50
    lock_ttl_s: int = 30
    jitter: float = 0.2
    # A deployment's own ladder files (``ESCALATION_LADDERS_DIR``); unset means the ladders
    # shipped inside the package (escalation.resources).
    ladders_dir: Path = Field(default_factory=shipped_ladders_dir)
    # Seconds between re-reads of the ladder directory and the releases by a running process
    # (docs/operations.md "Ladder directory out of step with the releases")
    ladder_refresh_s: float = Field(default=5.0, ge=0.0, le=3600.0)
    calendars_file: Path | None = None
    default_ladder: str = "dispute_review"
    worker_id: str | None = None
    log_format: Literal["auto", "json", "console"] = "auto"
    log_level: str = "INFO"
    # Audit ledger (docs/audit.md "Partitions and retention"): retention of ledger partitions
    # (default 7 years = 2557 days) and how many months of partitions maintenance creates
    # ahead of the current one.
    audit_retention_days: int = Field(default=2557, ge=365, le=36525)
    audit_partitions_ahead: int = Field(default=3, ge=1, le=120)
    # Ready-set priority (ADR 0006): one materiality weight is worth this much waiting
    # (docs/sla.md "Priority under backlog", starvation bound)
    priority_aging_s: int = Field(default=300, ge=1, le=86_400)
    # Dead letters (docs/reliability.md "Dead letters"): beyond this many, or older than
    # this many days, the maintenance job alerts (ERROR maintenance.dead_letters_over_cap)
    # and purges the oldest undeliverable notifications (a PURGED ledger row each); a
    # dead-lettered escalation is never purged by the cap (the ledger still owes it)
    dead_letter_max: int = Field(default=10_000, ge=1, le=10_000_000)
    dead_letter_max_age_days: int = Field(default=30, ge=1, le=3650)
    # Reconcile (docs/reliability.md "Incremental reconcile"): each periodic run checks the
    # disputes whose ledger changed since the last run plus a slice of a full sweep of every
    # pending escalation and ZSET member; the sweep covers everything once per this period
    reconcile_sweep_period_s: int = Field(default=21_600, ge=600, le=2_592_000)
    # HTTP API: verified bearer tokens are remembered this long per process (a revocation
    # takes effect within it); 0 = check PostgreSQL on every request
    api_token_cache_s: float = Field(default=5, ge=0, le=300)
    # HTTP API request limits (docs/adr/0011-http-hardening.md): a body over
    # api_max_body_bytes is 413 before it is read on; a JSON body nested deeper than
    # api_max_json_depth or naming more than api_max_json_keys object keys in all, or a batch
    # of more than api_max_batch items, is 422 before any schema check; a 422 lists at most
    # api_max_errors errors (and counts them all).
    api_max_body_bytes: int = Field(default=1_048_576, ge=1024, le=67_108_864)
    api_max_batch: int = Field(default=1000, ge=1, le=1000)
    api_max_json_depth: int = Field(default=16, ge=4, le=256)
    api_max_json_keys: int = Field(default=20_000, ge=100, le=1_000_000)
    api_max_errors: int = Field(default=20, ge=1, le=1000)
    # Failed authentication (in memory, per process): more than api_auth_fail_limit failures
    # within api_auth_fail_window_s from one client address, or with one token prefix, get
    # 429 with Retry-After until the window ends; an unknown token is remembered unknown for
    # api_negative_cache_s (no second PostgreSQL lookup)
    api_auth_fail_limit: int = Field(default=10, ge=1, le=1_000_000)
    api_auth_fail_window_s: float = Field(default=60, ge=1, le=3600)
    api_negative_cache_s: float = Field(default=300, ge=0, le=86_400)
    # Load shedding (per API process): at most api_max_in_flight requests are being served at
    # once; one more is answered 503 with Retry-After at once, before authentication (the
    # probes /livez, /readyz, /healthz are never shed). On SIGTERM a process stops accepting
    # and lets the requests in flight finish for up to api_shutdown_grace_s seconds.
    api_max_in_flight: int = Field(default=32, ge=1, le=100_000)
    api_shutdown_grace_s: int = Field(default=30, ge=0, le=3600)
    # OpenTelemetry tracing of the HTTP API (the ``otel`` extra): unset = off; else the OTLP
    # over HTTP traces endpoint, e.g. http://collector:4318/v1/traces
    otel_endpoint: str | None = Field(default=None, min_length=1, max_length=2048)
    # Console sessions: ended after console_session_idle_s without a request and at the
    # latest console_session_lifetime_s after sign-in (PostgreSQL's clock)
    console_session_idle_s: float = Field(default=900, ge=2, le=86_400)
    console_session_lifetime_s: float = Field(default=28_800, ge=2, le=604_800)
    # ... and a live session's id is replaced by a new one at the first request
    # console_session_rotate_s after it was issued; the old id works
    # console_session_rotate_grace_s more (the rest of a page load), then never again
    console_session_rotate_s: float = Field(default=900, ge=1, le=604_800)
    console_session_rotate_grace_s: float = Field(default=5, ge=0, le=60)
    # The institution's home time zone and business calendar: what the calendar id
    # ``institution`` in ladder windows means, and the zone of date-only / naive inputs.
    # A ladder version (``[institution]``) and each escalation may override them.
    institution_timezone: str = "America/New_York"
    institution_calendar: str = "us_federal_reserve"

    @field_validator("institution_timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        from escalation.domain.calendars import zone
        from escalation.domain.errors import InvalidInput

        try:
            zone(value)
        except InvalidInput as exc:
            raise ValueError(str(exc)) from None
        return value
    # Shared secret signing webhook deliveries (Standard Webhooks: ``whsec_<base64>`` or any
    # string); required when a webhook URL is configured.
    webhook_secret: SecretStr | None = None
    # Run workers/enqueue/import on a Redis whose maxmemory-policy may evict keys (logged at
    # error level on every start; see adapters/redis_policy.py). Default: refuse.
    allow_evicting_redis: bool = False
    # Start-up retries: a worker or command keeps retrying an unreachable / resetting Redis or
    # PostgreSQL with capped exponential backoff for this long, then fails with one line.
    startup_timeout_s: float = Field(default=30.0, ge=0.0, le=600.0)
    # The named operator who acts through this shell's CLI (``escalation enqueue``, ``pause``,
    # ``resume``, ``cancel``, ``action record``, ``resolve``, ``ladder release`` / ``apply``;
    # a command's ``--actor`` overrides it): the actor on the ledger rows.
    operator: str | None = None

    @field_validator("poll_interval_s", "batch_size", "lock_ttl_s", "jitter", "shards")
    @classmethod
    def _in_range(cls, value: float, info: Any) -> float:
        lo, hi = RANGES[info.field_name]
        if not lo <= value <= hi:
            raise ValueError(f"{info.field_name} must be in {lo:g}-{hi:g}, got {value:g}")
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        from escalation.adapters.redis_client import URL_PREFIXES, parse_topology

        if not value.startswith(URL_PREFIXES):
            raise ValueError(
                "must be a redis://, rediss://, unix://, redis+cluster:// or redis+sentinel:// "
                "URL, e.g. redis://127.0.0.1:6379/1 (docs/operations.md)"
            )
        try:
            parse_topology(value)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not value.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
            raise ValueError(
                "must be a postgresql:// URL, e.g. postgresql://postgres@127.0.0.1:5432/escalation"
            )
        return value

    @property
    def io_timeout_s(self) -> float:
        """Bound on one Redis/PostgreSQL network wait (connect or read), seconds.

        ``lock_ttl_s / 4`` clamped to 1.5-5 s: well below the lease, so a call stuck on a
        silent network (packets dropped, no reset) fails and is retried on a fresh connection
        long before the lease of what the worker claimed runs out.
        """
        return max(1.5, min(5.0, self.lock_ttl_s / 4))

    @property
    def lease_ms(self) -> int:
        """Lease (visibility timeout) in milliseconds = lock_ttl_s * 1000."""
        return int(self.lock_ttl_s * 1000)


def get_settings(*, spelled: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Build Settings from the environment plus explicit overrides (CLI flags; ``None`` ignored).

    ``spelled``: the CLI option of an override whose option is not its setting's name
    (``{"audit_retention_days": "--retention-days"}``); by default the option of
    ``batch_size`` is ``--batch-size``.

    Raises:
        ConfigError: a value out of range or of the wrong type; the message names the
            parameter the way the user gave it (``--batch-size`` for an override, which is a
            CLI flag; ``ESCALATION_BATCH_SIZE`` for the environment) and the accepted range.
    """
    options = dict(spelled or {})
    clean = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings(**clean)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            name = ".".join(str(p) for p in err["loc"]) or "settings"
            msg = str(err["msg"]).removeprefix("Value error, ")
            source = (options.get(name, f"--{name.replace('_', '-')}") if name in clean
                      else f"ESCALATION_{name.upper()} ({name})")
            problems.append(f"{source}: {msg}")
        raise ConfigError("invalid configuration: " + "; ".join(problems)) from None
