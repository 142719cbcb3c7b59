"""The webhook front door, sans I/O: headers + raw body -> :class:`Event`.

The signature (``X-Hub-Signature-256``, HMAC-SHA256 of the raw body) is
checked in constant time against every configured secret *before* the body
is parsed. No network, no database: the FastAPI route only hands bytes over.

==========================================  ======
problem                                      status
==========================================  ======
body larger than the cap                     413
missing, sha1-only or wrong signature        401
missing event or delivery header             400
body not a JSON object                       400
==========================================  ======
"""

from __future__ import annotations

import hashlib
import hmac
import json
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence


class WebhookError(Exception):
    """A delivery we refuse; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str):
        self.status = status
        self.message = message
        super().__init__(f"{status}: {message}")


@dataclass(frozen=True)
class Event:
    name: str  # X-GitHub-Event, e.g. "issues"
    action: str | None  # payload["action"], e.g. "labeled"
    delivery_id: str  # X-GitHub-Delivery
    payload: dict[str, Any] = field(repr=False)
    body: str = field(default="", repr=False, compare=False)  # the payload's JSON text

    @property
    def key(self) -> str:
        """``"issues.labeled"``, or the bare name for events without an action."""
        return f"{self.name}.{self.action}" if self.action else self.name

    @property
    def repo(self) -> str | None:
        return (self.payload.get("repository") or {}).get("full_name")

    @property
    def installation_id(self) -> int | None:
        return (self.payload.get("installation") or {}).get("id")


def sign(body: bytes, secret: str | bytes) -> str:
    """The ``X-Hub-Signature-256`` value GitHub would send for ``body``."""
    key = secret.encode() if isinstance(secret, str) else secret
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def verify_signature(body: bytes, header: str | None, secrets: Sequence[str | bytes]) -> bool:
    """True when ``header`` is a valid sha256 signature of ``body`` under any secret.

    Every secret is tried (no early exit) so the time taken does not say which
    one matched; each comparison is constant-time.
    """
    if not header or not header.startswith("sha256="):
        return False
    given = header.strip().encode("ascii", "replace")
    ok = False
    for secret in secrets:
        ok |= hmac.compare_digest(sign(body, secret).encode(), given)
    return ok


def _header(headers: Mapping[str, str], name: str) -> str | None:
    get = getattr(headers, "get", None)
    value = get(name) if get else None
    if value is None and get:
        value = get(name.lower())  # ASGI header names are lower case
    if value is None:
        lname = name.lower()
        for k, v in headers.items():
            if k.lower() == lname:
                return v
    return value


def parse(
    headers: Mapping[str, str],
    body: bytes,
    *,
    secrets: Sequence[str | bytes],
    max_bytes: int = 25 * 1024 * 1024,
) -> Event:
    """Check and decode one delivery; raise :class:`WebhookError` to refuse it."""
    if len(body) > max_bytes:
        raise WebhookError(413, f"body of {len(body)} bytes exceeds the {max_bytes}-byte cap")
    signature = _header(headers, "X-Hub-Signature-256")
    if signature is None:
        if _header(headers, "X-Hub-Signature"):
            raise WebhookError(401, "sha1 signatures are not accepted; use X-Hub-Signature-256")
        raise WebhookError(401, "missing X-Hub-Signature-256")
    if not verify_signature(body, signature, secrets):
        raise WebhookError(401, "bad signature")
    name = _header(headers, "X-GitHub-Event")
    delivery = _header(headers, "X-GitHub-Delivery")
    if not name:
        raise WebhookError(400, "missing X-GitHub-Event")
    if not delivery or len(delivery) > 200:
        raise WebhookError(400, "missing or overlong X-GitHub-Delivery")
    ctype = (_header(headers, "Content-Type") or "").lower()
    try:
        if ctype.startswith("application/x-www-form-urlencoded"):
            form = urllib.parse.parse_qs(body.decode("utf-8"), strict_parsing=True)
            text = form["payload"][0]
        else:
            text = body.decode("utf-8")
        payload = json.loads(text)
    except (UnicodeDecodeError, ValueError, KeyError, IndexError) as e:
        raise WebhookError(400, f"malformed payload: {type(e).__name__}") from None
    if not isinstance(payload, dict):
        raise WebhookError(400, "payload is not a JSON object")
    action = payload.get("action")
    return Event(
        name=name.strip(),
        action=action if isinstance(action, str) else None,
        delivery_id=delivery.strip(),
        payload=payload,
        body=text,
    )
