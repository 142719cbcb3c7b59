"""Secrets in what an agent wrote: found in their common disguises, and redacted.

Defence in depth behind the model gateway (:mod:`harness.gateway`: the agent
never holds the model key): every secret the host holds is looked for in the
agent's log, hypothesis and tree, not only as its exact bytes but as the
transforms a prompt-injected agent reaches for first:

* reversed;
* base64 (standard and URL-safe, at each of the 3 alignments it can take
  inside a longer encoded text), base32 (5 alignments), hex (any case);
* URL-encoded (``quote`` and every byte as ``%XX``);
* any of these split by whitespace (``s k - 1 2 ...``, one char per line).

A match is replaced by ``[REDACTED]``; :func:`found` says whether any was
there (the round is then flagged and its tree not taken). Secrets shorter
than :data:`MIN_SECRET` chars are not looked for (they would match by chance),
nor are encoded forms shorter than :data:`MIN_FORM` chars.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from urllib.parse import quote

MIN_SECRET = 8
MIN_FORM = 10
REDACTED = "[REDACTED]"
SECRET_NAME = re.compile(r"API_?KEY|_KEY$|^KEY$|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE|DATABASE_URL",
                         re.IGNORECASE)
"""The names under which a host keeps secrets (an agent with the gateway gets none of them)."""
_ALIGN_RX = re.compile(r"=+$")


def _b64_cores(raw: bytes, encode, block_in: int, block_out: int) -> list[str]:
    """The encoded text of ``raw`` as it appears inside any longer encoding:
    for each alignment, the output chars that depend on ``raw`` alone."""
    out = []
    for pad in range(block_in):
        enc = encode(b"\0" * pad + raw).decode()
        enc = _ALIGN_RX.sub("", enc)
        # drop the chars mixed with the padding before, and the last partial block after
        start = -(-pad * block_out // block_in)  # ceil(pad * out / in)
        end = ((pad + len(raw)) * block_out) // block_in
        core = enc[start:end]
        if len(core) >= MIN_FORM:
            out.append(core)
    return out


def forms(secret: str) -> list[tuple[str, bool]]:
    """(text, case-insensitive) for every disguise of ``secret`` looked for."""
    raw = secret.encode()
    out: list[tuple[str, bool]] = [(secret, False), (secret[::-1], False)]
    for enc in (base64.b64encode, base64.urlsafe_b64encode):
        out += [(c, False) for c in _b64_cores(raw, enc, 3, 4)]
        out += [(c, False) for c in _b64_cores(raw[::-1], enc, 3, 4)]
    out += [(c, True) for c in _b64_cores(raw, base64.b32encode, 5, 8)]
    out.append((binascii.hexlify(raw).decode(), True))
    out.append((binascii.hexlify(raw[::-1]).decode(), True))
    q = quote(secret, safe="")
    if q != secret:
        out.append((q, True))
    out.append(("".join(f"%{b:02x}" for b in raw), True))
    seen: set[str] = set()
    uniq = []
    for text, ci in out:
        if len(text) >= MIN_FORM and text not in seen:
            seen.add(text)
            uniq.append((text, ci))
    return uniq


@lru_cache(maxsize=64)
def _pattern(secrets: tuple[str, ...]) -> re.Pattern[str] | None:
    alts = []
    for s in secrets:
        for text, ci in forms(s):
            body = r"\s*".join(re.escape(ch) for ch in text)  # split by whitespace, any amount
            alts.append(f"(?i:{body})" if ci else body)
    if not alts:
        return None
    # longest first: a form that contains another is replaced whole
    alts.sort(key=len, reverse=True)
    return re.compile("|".join(alts))


def _key(secrets: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted({s for s in secrets if s and len(s) >= MIN_SECRET}))


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every disguise of every secret replaced by ``[REDACTED]``."""
    rx = _pattern(_key(secrets))
    return text if rx is None or not text else rx.sub(REDACTED, text)


def found(text: str, secrets: Iterable[str]) -> bool:
    """Whether ``text`` holds any disguise of any secret."""
    rx = _pattern(_key(secrets))
    return bool(rx is not None and text and rx.search(text))


MIN_HOST_SECRET = 12
"""A value under a secret-like name shorter than this is not looked for in an
agent's tree (a weak ``changeme`` would flag every file that says it)."""


def host_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """Every value the host's environment holds under a secret's name (API
    keys, tokens, the webhook secret, a database URL with its password...),
    long enough to look for."""
    env = os.environ if environ is None else environ
    return [v for k, v in env.items() if SECRET_NAME.search(k) and v and len(v) >= MIN_HOST_SECRET]
