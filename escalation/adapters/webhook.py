"""HTTP webhook delivery of review-queue notifications (stdlib ``urllib``; issue 7 point 1).

One POST per notification, JSON body = the review-stream entry fields, header
``Idempotency-Key: <dispute id>:<seq>`` so a receiver can drop repeats (delivery is
at-least-once: a crash between a 2xx and the XACK re-delivers).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping

from escalation.domain.errors import EscalationError


class WebhookError(EscalationError):
    """A delivery failed: network error, timeout or a non-2xx status (message says which)."""


def post_notification(url: str, fields: Mapping[str, str], timeout_s: float) -> int:
    """POST ``fields`` as JSON to ``url`` with ``Idempotency-Key`` = ``fields["idempotency_key"]``.

    Args:
        url: http(s) URL of the receiver.
        fields: the review-stream entry (str -> str).
        timeout_s: connect + read timeout, seconds.

    Returns:
        the HTTP status (2xx).

    Raises:
        WebhookError: any failure (refused, timeout, non-2xx); the caller retries with backoff.
    """
    if not url.startswith(("http://", "https://")):
        raise WebhookError(f"webhook url must be http(s): {url!r}")
    body = json.dumps(dict(fields), sort_keys=True).encode()
    req = urllib.request.Request(  # noqa: S310 - scheme checked above
        url, data=body, method="POST",
        headers={"Content-Type": "application/json",
                 "Idempotency-Key": fields.get("idempotency_key", "")},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - checked
            status = int(resp.status)
    except urllib.error.HTTPError as exc:
        raise WebhookError(f"HTTP {exc.code}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise WebhookError(f"delivery failed: {exc}") from None
    if not 200 <= status < 300:
        raise WebhookError(f"HTTP {status}")
    return status
