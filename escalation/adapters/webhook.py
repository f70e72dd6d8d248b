"""HTTP webhook delivery of review-queue notifications: a pooled ``httpx`` client.

One POST per notification; the body is the typed, versioned event of
:func:`escalation.domain.review_event.review_event` (JSON, keys sorted; docs/reliability.md
"Webhook event"). Headers:

- ``User-Agent: escalation/<version>``;
- ``Idempotency-Key: <dispute id>:<seq>`` so a receiver can drop repeats (delivery is
  at-least-once: a crash between a 2xx and the XACK re-delivers);
- Standard Webhooks signing (https://www.standardwebhooks.com/, spec v1):
  ``webhook-id`` (= the idempotency key: the same for every attempt of one message),
  ``webhook-timestamp`` (integer seconds since the Unix epoch, UTC) and
  ``webhook-signature: v1,<base64(HMAC-SHA256(secret, "<id>.<timestamp>.<body>"))>``.
  A secret of the spec's form ``whsec_<base64>`` is used as the decoded key bytes; any other
  secret as its UTF-8 bytes (a reference verifier then takes the secret as bytes:
  docs/reliability.md has the snippet).

:class:`WebhookClient` keeps one ``httpx.Client`` per process: connections are pooled and
kept alive (at most ``max_connections`` to the receiver), and it is safe to call
:meth:`WebhookClient.deliver` from several threads at once (``service_layer.notify``
delivers with bounded concurrency). Redirects are never followed: a 3xx is a failed delivery
whose reason names the status and the ``Location`` (a 302/303 would otherwise turn the POST
into a bodyless GET, possibly to another host or scheme, and its 200 would count as
delivered).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from types import TracebackType

import httpx

from escalation.domain.errors import EscalationError, InvalidInput
from escalation.domain.review_event import review_event


def _product_version() -> str:
    try:
        return version("escalation")
    except PackageNotFoundError:  # a checkout run without installing the package
        from escalation import __version__

        return __version__


USER_AGENT = f"escalation/{_product_version()}"
"""The ``User-Agent`` of every delivery."""


class WebhookError(EscalationError):
    """A delivery failed: network error, timeout, a redirect or a non-2xx status (the message
    says which)."""


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


class WebhookClient:
    """Signed deliveries to one receiver over a pooled, keep-alive HTTP client.

    Args:
        url: http(s) URL of the receiver.
        key: HMAC key (see :func:`secret_key`).
        timeout_s: connect, read and write timeout of one attempt, seconds (> 0).
        max_connections: most connections open to the receiver at once (>= 1); also the
            most kept alive between deliveries.

    Raises:
        InvalidInput: a URL that is not http(s), a timeout <= 0, ``max_connections`` < 1.
    """

    def __init__(self, url: str, key: bytes, timeout_s: float, max_connections: int = 16,
                 ) -> None:
        if not url.startswith(("http://", "https://")):
            raise InvalidInput(f"webhook url must be http(s): {url!r}")
        if not timeout_s > 0:
            raise InvalidInput(f"webhook timeout must be > 0 seconds, got {timeout_s}")
        if max_connections < 1:
            raise InvalidInput(f"webhook max_connections must be >= 1, got {max_connections}")
        self.url, self.key = url, key
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout_s),
            limits=httpx.Limits(max_connections=max_connections,
                                max_keepalive_connections=max_connections),
            follow_redirects=False,
            headers={"User-Agent": USER_AGENT, "Content-Type": "application/json"},
        )

    def deliver(self, fields: Mapping[str, str], now_s: int | None = None) -> int:
        """POST the event of review-stream entry ``fields``, signed.

        Args:
            fields: the review-stream entry (str -> str); ``idempotency_key`` is the message
                id.
            now_s: the ``webhook-timestamp`` (Unix seconds, UTC); default: the current time.

        Returns:
            the HTTP status (2xx).

        Raises:
            WebhookError: any failure (refused, timeout, 3xx redirect not followed, non-2xx);
                the caller retries with backoff.
            InvalidInput: an entry whose event cannot be built (see
                :func:`~escalation.domain.review_event.review_event`).
        """
        body = json.dumps(review_event(fields), sort_keys=True,
                          separators=(",", ":")).encode()
        msg_id = fields.get("idempotency_key", "")
        ts = int(time.time()) if now_s is None else now_s
        headers = {"Idempotency-Key": msg_id, "webhook-id": msg_id,
                   "webhook-timestamp": str(ts), "webhook-signature": sign(self.key, msg_id,
                                                                           ts, body)}
        try:
            resp = self._client.post(self.url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            raise WebhookError(f"delivery failed: {type(exc).__name__}: {exc}") from None
        status = resp.status_code
        if 300 <= status < 400:
            where = resp.headers.get("Location", "")
            raise WebhookError(
                f"HTTP {status} redirect not followed (Location: {where or 'none'})")
        if not 200 <= status < 300:
            raise WebhookError(f"HTTP {status}")
        return status

    def close(self) -> None:
        """Close the pooled connections."""
        self._client.close()

    def __enter__(self) -> WebhookClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def post_notification(url: str, fields: Mapping[str, str], timeout_s: float, key: bytes,
                      now_s: int | None = None) -> int:
    """One delivery on a client of its own (no pooling across calls; ``notify`` uses a
    :class:`WebhookClient`). Same arguments, result and errors as
    :meth:`WebhookClient.deliver`; a URL that is not http(s) is a :class:`WebhookError`."""
    if not url.startswith(("http://", "https://")):
        raise WebhookError(f"webhook url must be http(s): {url!r}")
    with WebhookClient(url, key, timeout_s, max_connections=1) as client:
        return client.deliver(fields, now_s)
