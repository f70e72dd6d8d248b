"""Webhook delivery against real local HTTP servers: redirects are never followed (a 3xx is a
failed delivery with its reason), every POST is signed the Standard Webhooks way, and each
failed delivery is logged with why it failed."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from structlog.testing import capture_logs

from escalation.adapters.webhook import WebhookError, post_notification, secret_key, sign
from escalation.domain.retry import RetryPolicy
from escalation.service_layer.core import CorePorts
from escalation.service_layer.fire import FireDue, fire_due
from escalation.service_layer.notify import ConsumeReviews, Notifier, NotifyPorts
from tests.e2e.helpers import due_requests, enqueue
from tests.integration.reliability_support import reliability_redis

DID = "7f0c1e9a-1111-4222-8333-444455556666"
FIELDS = {"idempotency_key": f"{DID}:2", "dispute_id": DID, "seq": "2", "kind": "PROMOTED",
          "match_decision": "PROMOTED_TO_SENIOR", "from_tier": "standard", "to_tier": "senior",
          "ladder": "cfpb@3", "trace_id": "t1", "source_hash": "ab12", "external_id": "CFPB-9",
          "source": "cfpb", "materiality": "1250.00", "decided_ms": "1700000000123"}
EVENT = {"type": "escalation.promoted", "version": 1, "id": f"{DID}:2", "dispute_id": DID,
         "external_id": "CFPB-9", "source": "cfpb", "seq": 2, "tier": "senior",
         "previous_tier": "standard",
         "match_decision": "PROMOTED_TO_SENIOR", "ladder": "cfpb", "ladder_version": 3,
         "materiality": "1250.00", "decided_at": "2023-11-14T22:13:20.123Z",
         "trace_id": "t1", "source_hash": "ab12"}


class Server:
    """A real HTTP server on 127.0.0.1 answering every request with ``status`` (+ Location)."""

    def __init__(self, status: int = 200, location: str = "") -> None:
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                outer.requests.append(
                    (self.command, {k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = _any

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def servers() -> Iterator[Any]:
    made: list[Server] = []

    def make(status: int = 200, location: str = "") -> Server:
        made.append(Server(status, location))
        return made[-1]

    yield make
    for s in made:
        s.close()


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_to_another_host_is_a_failed_delivery_and_is_not_followed(
    servers: Any, code: int
) -> None:
    other = servers(200)
    hook = servers(code, location=other.url.replace("127.0.0.1", "localhost"))
    with pytest.raises(WebhookError) as info:
        post_notification(hook.url, FIELDS, 2.0, b"k")
    assert f"HTTP {code} redirect not followed" in str(info.value)
    assert "localhost" in str(info.value)
    assert len(hook.requests) == 1 and other.requests == []


def test_a_redirect_to_ftp_is_a_failed_delivery(servers: Any) -> None:
    hook = servers(302, location="ftp://127.0.0.1/x")
    with pytest.raises(WebhookError, match=r"302 redirect not followed.*ftp://"):
        post_notification(hook.url, FIELDS, 2.0, b"k")


def test_every_delivery_carries_a_standard_webhooks_signature_the_receiver_can_verify(
    servers: Any,
) -> None:
    hook = servers(204)
    raw = b"0123456789abcdef0123456789abcdef"
    secret = "whsec_" + base64.b64encode(raw).decode()
    assert post_notification(hook.url, FIELDS, 2.0, secret_key(secret), now_s=1_700_000_000) == 204
    ((method, headers, body),) = hook.requests
    assert method == "POST" and json.loads(body) == EVENT
    assert headers["user-agent"].startswith("escalation/")
    assert headers["webhook-id"] == FIELDS["idempotency_key"]
    assert headers["webhook-timestamp"] == "1700000000"
    # verify exactly as the Standard Webhooks spec tells a receiver to: HMAC-SHA256 over
    # "<id>.<timestamp>.<body>" with the base64-decoded secret, compared as "v1,<base64>"
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(raw, signed, hashlib.sha256).digest()).decode()
    assert headers["webhook-signature"] == f"v1,{expected}"
    # a tampered body or another secret does not verify
    assert sign(raw, headers["webhook-id"], 1_700_000_000, body + b" ") != f"v1,{expected}"
    assert sign(b"other", headers["webhook-id"], 1_700_000_000, body) != f"v1,{expected}"


def test_a_plain_string_secret_is_used_as_its_utf8_bytes() -> None:
    assert secret_key("s3cret") == b"s3cret"


@pytest.mark.parametrize("secret", [
    "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode(),
    "a plain shared secret",
])
def test_the_reference_library_verifies_a_delivery_as_docs_reliability_says(
    servers: Any, secret: str,
) -> None:
    """The verifier snippet of docs/reliability.md: a ``whsec_`` secret as the string, any
    other secret as its UTF-8 bytes."""
    from standardwebhooks.webhooks import Webhook, WebhookVerificationError

    hook = servers(200)
    post_notification(hook.url, FIELDS, 2.0, secret_key(secret))
    ((_, headers, body),) = hook.requests
    verifier = Webhook(secret) if secret.startswith("whsec_") else Webhook(secret.encode())
    assert verifier.verify(body, headers) == EVENT
    with pytest.raises(WebhookVerificationError):
        verifier.verify(body + b" ", headers)
    if not secret.startswith("whsec_"):  # the reason for the snippet: the string form fails
        with pytest.raises(Exception):  # noqa: B017 - any refusal (bad base64 or mismatch)
            Webhook(secret).verify(body, headers)


def test_each_failed_delivery_is_logged_with_its_reason(app: Any, servers: Any) -> None:
    hook = servers(302, location="http://elsewhere.invalid/")
    ids = enqueue(app, due_requests(1, app.scheduler.time()))
    fire_due(
        FireDue(batch_size=10, lease_ms=30_000, worker_id="w"),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
    )
    n = Notifier(
        ConsumeReviews("c", "notifier", RetryPolicy((0.01,))),
        NotifyPorts(reliability_redis(app), app.scheduler, app.store,
                    lambda f: post_notification(hook.url, f, 2.0, b"k")))
    with capture_logs() as logs:
        assert n.run_once().deferred == 1
    failed = [e for e in logs if e["event"] == "notify.delivery_failed"]
    assert len(failed) == 1
    assert failed[0]["dispute_id"] == str(ids[0]) and failed[0]["outcome"] == "retry"
    assert "HTTP 302 redirect not followed" in failed[0]["reason"]
    assert failed[0]["trace_id"]


def test_notify_with_a_webhook_but_no_secret_is_refused_in_one_line(
    cli_env: dict[str, str],
) -> None:
    res = subprocess.run([sys.executable, "-m", "escalation", "notify", "--burst",
                          "--webhook-url", "http://127.0.0.1:9/hook"],
                         env=cli_env, capture_output=True, text=True, timeout=120,
                         check=False)
    assert res.returncode == 2
    assert "ESCALATION_WEBHOOK_SECRET must be set" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("status", "code", "counts"), [
    (200, 0, "delivered 1, acknowledged without delivery 0, retried 0"),
    (503, 1, "delivered 0, acknowledged without delivery 0, retried 1"),
])
def test_notify_burst_exits_1_when_a_delivery_failed(
    app: Any, cli_env: dict[str, str], status: int, code: int, counts: str
) -> None:
    """A cron job running `notify --burst` must see that a notification was not delivered."""
    enqueue(app, due_requests(1, app.scheduler.time()))
    fire_due(
        FireDue(batch_size=10, lease_ms=30_000, worker_id="w"),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
    )
    hook = Server(status)
    try:
        res = subprocess.run([sys.executable, "-m", "escalation", "notify", "--burst",
                              "--webhook-url", hook.url],
                             env=dict(cli_env, ESCALATION_WEBHOOK_SECRET="s3cret"),
                             capture_output=True, text=True, timeout=120, check=False)
    finally:
        hook.close()
    assert res.returncode == code, res.stdout + res.stderr[-1500:]
    assert counts in res.stdout and len(hook.requests) == 1
