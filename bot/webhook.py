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
JSON nested deeper than ``MAX_DEPTH``        400
payload that does not fit its event          400
==========================================  ======

The delivery id and the event name are not signed: ``Event.digest`` (SHA-256 of
the signed body) lets the store refuse a body it already processed under a new
delivery id, and :data:`SHAPES` refuses a body sent under an event name it
does not fit. :func:`admitted` says whether a repository or installation is
served at all (``RSI_ALLOWED_REPOS`` / ``RSI_ALLOWED_INSTALLATIONS``).
"""

from __future__ import annotations

import fnmatch
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
    def digest(self) -> str:
        """SHA-256 of the payload text (what the signature covers)."""
        return hashlib.sha256(self.body.encode()).hexdigest()

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
    except RecursionError:
        raise WebhookError(400, "malformed payload: JSON nested too deeply") from None
    if not isinstance(payload, dict):
        raise WebhookError(400, "payload is not a JSON object")
    if _depth(payload) > MAX_DEPTH:
        raise WebhookError(400, f"payload nested deeper than {MAX_DEPTH} levels")
    problem = shape_problem(name.strip(), payload)
    if problem:
        raise WebhookError(400, f"payload does not fit event {name.strip()!r}: {problem}")
    action = payload.get("action")
    return Event(
        name=name.strip(),
        action=action if isinstance(action, str) else None,
        delivery_id=delivery.strip(),
        payload=payload,
        body=text,
    )


MAX_DEPTH = 64
"""GitHub's payloads nest about 8 levels; anything past this is refused (400)."""

_OBJ = dict
# event -> (required object keys, allowed actions or None for any/none)
SHAPES: dict[str, tuple[tuple[str, ...], frozenset[str] | None]] = {
    "issues": (("issue", "repository", "sender"), None),
    "issue_comment": (("issue", "comment", "repository", "sender"),
                      frozenset({"created", "edited", "deleted"})),
    "pull_request": (("pull_request", "repository", "sender"), None),
    "workflow_run": (("workflow_run", "workflow", "repository", "sender"),
                     frozenset({"requested", "in_progress", "completed"})),
    "installation": (("installation", "sender"), None),
    "installation_repositories": (("installation", "sender"), frozenset({"added", "removed"})),
}


def shape_problem(name: str, payload: dict[str, Any]) -> str | None:
    """Why ``payload`` cannot be a ``name`` event (None when it fits). Events
    the bot does not act on are not checked: they are acknowledged and ignored."""
    shape = SHAPES.get(name)
    if shape is None:
        return None
    keys, actions = shape
    for k in keys:
        if not isinstance(payload.get(k), dict):
            return f"'{k}' is missing or not an object"
    action = payload.get("action")
    if not isinstance(action, str):
        return "'action' is missing"
    if actions is not None and action not in actions:
        return f"unknown action {action!r}"
    if "repository" in keys and not isinstance(payload["repository"].get("full_name"), str):
        return "'repository.full_name' is missing"
    return None


def _depth(obj: Any) -> int:
    deepest, stack = 0, [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, dict):
            deepest = max(deepest, d)
            stack.extend((v, d + 1) for v in o.values())
        elif isinstance(o, list):
            deepest = max(deepest, d)
            stack.extend((v, d + 1) for v in o)
    return deepest


def admitted(event: Event, *, repos: Sequence[str] = (),
             installations: Sequence[int] = ()) -> str | None:
    """None when the bot serves this event's repository and installation; else
    why not. Empty allow-lists allow everything; ``repos`` entries are
    ``owner/name`` or ``owner/*`` (case-insensitive)."""
    if installations:
        inst = event.installation_id
        if inst is not None and inst not in installations:
            return f"installation {inst} is not in RSI_ALLOWED_INSTALLATIONS"
        if inst is None and event.name not in ("ping",):
            return "no installation, and RSI_ALLOWED_INSTALLATIONS is set"
    if repos:
        repo = event.repo
        if repo is None:
            return None if event.name.startswith("installation") or event.name == "ping" \
                else "no repository, and RSI_ALLOWED_REPOS is set"
        if not any(fnmatch.fnmatchcase(repo.lower(), p.lower()) for p in repos):
            return f"repository {repo} is not in RSI_ALLOWED_REPOS"
    return None
