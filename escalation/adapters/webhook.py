"""HTTP webhook delivery of review-queue notifications (stdlib ``urllib``).

One POST per notification, JSON body = the review-stream entry fields. Headers:

- ``Idempotency-Key: <dispute id>:<seq>`` so a receiver can drop repeats (delivery is
  at-least-once: a crash between a 2xx and the XACK re-delivers);
- Standard Webhooks signing (https://www.standardwebhooks.com/, spec v1):
  ``webhook-id`` (= the idempotency key: the same for every attempt of one message),
  ``webhook-timestamp`` (integer seconds since the Unix epoch, UTC) and
  ``webhook-signature: v1,<base64(HMAC-SHA256(secret, "<id>.<timestamp>.<body>"))>``.
  A secret of the spec's form ``whsec_<base64>`` is used as the decoded key bytes; any other
  secret as its UTF-8 bytes.

Redirects are never followed: a 3xx is a failed delivery whose reason names the status and
the ``Location`` (a 302/303 would otherwise turn the POST into a bodyless GET, possibly to
another host or scheme, and its 200 would count as delivered).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import IO, Any

from escalation.domain.errors import EscalationError, InvalidInput


class WebhookError(EscalationError):
    """A delivery failed: network error, timeout, a redirect or a non-2xx status (the message
    says which)."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuse every redirect: the 3xx surfaces as an ``HTTPError`` with its own code."""

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int,
                         msg: str, headers: Any, newurl: str) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect())


def secret_key(secret: str) -> bytes:
    """The HMAC key of a webhook secret: ``whsec_<base64>`` decoded, else the UTF-8 bytes.

    Raises:
        InvalidInput: an empty secret, or a ``whsec_`` secret that is not valid base64.
    """
    if not secret:
        raise InvalidInput("webhook secret must not be empty")
    if secret.startswith("whsec_"):
        try:
            return base64.b64decode(secret.removeprefix("whsec_"), validate=True)
        except ValueError:
            raise InvalidInput("webhook secret whsec_... is not valid base64") from None
    return secret.encode()


def sign(key: bytes, msg_id: str, timestamp_s: int, body: bytes) -> str:
    """Standard Webhooks v1 signature header value: ``v1,<base64 HMAC-SHA256>``.

    Signed content is ``f"{msg_id}.{timestamp_s}.".encode() + body``.
    """
    signed = f"{msg_id}.{timestamp_s}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def post_notification(url: str, fields: Mapping[str, str], timeout_s: float, key: bytes,
                      now_s: int | None = None) -> int:
    """POST ``fields`` as JSON to ``url``, signed, with ``Idempotency-Key``.

    Args:
        url: http(s) URL of the receiver.
        fields: the review-stream entry (str -> str); ``idempotency_key`` is the message id.
        timeout_s: connect + read timeout, seconds.
        key: HMAC key (see :func:`secret_key`).
        now_s: the ``webhook-timestamp`` (Unix seconds, UTC); default: the current time.

    Returns:
        the HTTP status (2xx).

    Raises:
        WebhookError: any failure (refused, timeout, 3xx redirect not followed, non-2xx); the
            caller retries with backoff.
    """
    if not url.startswith(("http://", "https://")):
        raise WebhookError(f"webhook url must be http(s): {url!r}")
    body = json.dumps(dict(fields), sort_keys=True).encode()
    msg_id = fields.get("idempotency_key", "")
    ts = int(time.time()) if now_s is None else now_s
    req = urllib.request.Request(  # noqa: S310 - scheme checked above
        url, data=body, method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": msg_id,
                 "webhook-id": msg_id, "webhook-timestamp": str(ts),
                 "webhook-signature": sign(key, msg_id, ts, body)},
    )
    try:
        with _OPENER.open(req, timeout=timeout_s) as resp:
            status = int(resp.status)
    except urllib.error.HTTPError as exc:
        if 300 <= exc.code < 400:
            where = exc.headers.get("Location", "") if exc.headers else ""
            raise WebhookError(
                f"HTTP {exc.code} redirect not followed (Location: {where or 'none'})"
            ) from None
        raise WebhookError(f"HTTP {exc.code}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise WebhookError(f"delivery failed: {exc}") from None
    if not 200 <= status < 300:
        raise WebhookError(f"HTTP {status}")
    return status
