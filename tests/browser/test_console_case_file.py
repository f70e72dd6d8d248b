"""The dispute page's "Case file" button downloads the signed case file in Chromium; the
offline verifier accepts it under the server's key and it carries the dispute's missed Reg E
deadline with its citation. Before the first checkpoint the download is a 409 line."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from escalation.adapters.checkpoints import PostgresCheckpoints
from escalation.adapters.signing import Ed25519DigestSigner
from escalation.domain.case_file import verify_bundle
from escalation.service_layer.checkpoint import create_checkpoint
from tests.api.conftest import make_tokens, start_server, stop_server
from tests.browser.conftest import Console, seed, session_cookies
from tests.browser.test_console import login
from tests.conftest import signing_key_pem


@pytest.fixture(scope="module")
def console(redis_url: str, console_database: tuple[str, sa.Engine]) -> Iterator[Console]:
    """The console server of this module, with the checkpoint signing key configured."""
    database_url, engine = console_database
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env.update(ESCALATION_REDIS_URL=redis_url, ESCALATION_DATABASE_URL=database_url,
               ESCALATION_NAMESPACE=f"t{uuid.uuid4().hex[:12]}", ESCALATION_LOG_FORMAT="json",
               ESCALATION_LOG_LEVEL="WARNING", ESCALATION_API_TOKEN_CACHE_S="0",
               ESCALATION_API_AUTH_FAIL_LIMIT="1000000",
               ESCALATION_INSTITUTION_TIMEZONE="America/New_York",
               ESCALATION_CHECKPOINT_KEY=signing_key_pem())
    tokens, _names = make_tokens(engine, f"cf{uuid.uuid4().hex[:8]}")
    seeded = seed(engine, f"REGE{uuid.uuid4().hex[:6].upper()}")
    url, proc = start_server(env)
    try:
        yield Console(url, tokens, seeded, env)
    finally:
        stop_server(proc)


def _key() -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key(signing_key_pem().encode(), password=None)
    assert isinstance(key, Ed25519PrivateKey)
    return key


def test_case_file_button_downloads_a_verifying_file(page: Any, console: Console,
                                                     console_database: tuple[str, Any]) -> None:
    ext = f"{console.seeded.prefix}-B"
    did = console.seeded.ids[ext]
    with httpx.Client(base_url=console.url, cookies=session_cookies(console, "compliance"),
                      timeout=60) as c:
        early = c.get(f"/console/disputes/{did}/case-file")
        assert early.status_code == 409 and "no checkpoint yet" in early.text
    create_checkpoint(PostgresCheckpoints(console_database[1]), "test", Ed25519DigestSigner(_key()))
    login(page, console, next_path=f"/disputes/{did}")
    button = page.locator("#case-file")
    assert button.inner_text() == "Case file"
    with page.expect_download() as got:
        button.click()
    assert got.value.suggested_filename == f"case-file-{did}.json"
    raw = Path(got.value.path()).read_bytes()
    raw_key = _key().public_key().public_bytes(serialization.Encoding.Raw,
                                               serialization.PublicFormat.Raw)
    report = verify_bundle(raw, raw_key)
    assert report.ok, report.errors
    doc = json.loads(raw)
    (entry,) = doc["disputes"]
    assert entry["external_id"] == ext and entry["sealed"] is not None
    missed = [d for d in entry["deadlines"] if d["status"] == "missed"]
    assert missed and missed[0]["citation"].startswith("12 CFR 1005.11")
