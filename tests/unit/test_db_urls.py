"""Database URLs: both libpq multi-host spellings, and what the engine sends on connect."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from escalation.adapters.db import make_engine, normalize_url
from escalation.domain.errors import ConfigError


def _connect_args(url: str) -> dict[str, object]:
    engine = make_engine(url)
    try:
        return dict(engine.dialect.create_connect_args(engine.url)[1])
    finally:
        engine.dispose()


@pytest.mark.parametrize("url", [
    "postgresql://u@h1:5433,h2:5434/db?target_session_attrs=read-write",
    "postgresql://u@/db?host=h1,h2&port=5433,5434&target_session_attrs=read-write",
])
def test_both_multi_host_forms_reach_libpq_as_one_host_list(url: str) -> None:
    args = _connect_args(url)
    assert args["host"] == "h1,h2" and args["port"] == "5433,5434"
    assert args["target_session_attrs"] == "read-write" and args["dbname"] == "db"


def test_a_host_without_a_port_gets_5432_and_the_password_is_kept() -> None:
    url = sa.engine.make_url(normalize_url("postgres://u:p%40ss@h1,[::1]:6000/db"))
    assert url.password == "p@ss" and url.database == "db"
    assert url.query["host"] == "h1,::1" and url.query["port"] == "5432,6000"


def test_a_bad_port_in_the_host_list_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"port 'x' of host 'h2'"):
        normalize_url("postgresql://u@h1:5432,h2:x/db")
