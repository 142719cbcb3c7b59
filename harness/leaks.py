"""Secrets in what an agent wrote: found in their common disguises, and redacted.

Defence in depth behind the model gateway (:mod:`harness.gateway`: the agent
never holds the model key): every secret the host holds is looked for in the
agent's log, hypothesis and tree, not only as its exact bytes but as the
transforms a prompt-injected agent reaches for first:

* reversed; ROT13;
* base64 (standard and URL-safe, at each of the 3 alignments it can take
  inside a longer encoded text), base32 (5 alignments), hex (any case; also
  as ``\\x73``, ``0x73`` or ``\\u0073`` per byte), the bytes' decimal or
  octal codes (``[115, 107, ...]``, ``\\163\\153``);
* URL-encoded (``quote`` and every byte as ``%XX``);
* any of these split by anything that is not a letter or digit: whitespace,
  separators (``s-k-l-i-v-e``, ``de:ad:be:ef``), quotes and ``+`` across
  lines (``"sk-li" + "ve..."``), NUL bytes (UTF-16 text): each form is
  looked for in the text's *skeleton*, its ASCII letters and digits alone;
* in every byte of every regular file of the tree, whatever its size, read
  as a stream (:class:`Scanner`: bounded memory), and inside gzip, zlib,
  bzip2, xz and zip files (decompressed as a stream, nested up to
  :data:`MAX_DEPTH` deep).

What cannot be scanned is refused, never skipped (:func:`scrub_tree`): an
encrypted zip member, a zstd file, a file that expands past
:data:`MAX_EXPANDED_BYTES`, a tree past :data:`MAX_TREE_BYTES`.

A match is replaced by ``[REDACTED]`` (a file where it cannot be cut out
exactly, compressed or over :data:`REWRITE_MAX_BYTES`, is replaced whole);
:func:`found` says whether any was there (the round is then flagged and its
tree not taken). Secrets shorter than :data:`MIN_SECRET` chars are not
looked for (they would match by chance), nor are encoded forms shorter than
:data:`MIN_FORM` chars.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import bz2
import codecs
import lzma
import os
import re
import stat
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import BinaryIO
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
    """``text`` with every disguise of every secret replaced by ``[REDACTED]``
    (the forms split by whitespace, then the skeleton's: the stretch from the
    form's first letter or digit to its last)."""
    key = _key(secrets)
    rx = _pattern(key)
    if rx is None or not text:
        return text
    text = rx.sub(REDACTED, text)
    spans = _skeleton_spans(text, _scanner(key))
    for lo, hi in reversed(spans):
        text = text[:lo] + REDACTED + text[hi:]
    return text


def found(text: str, secrets: Iterable[str]) -> bool:
    """Whether ``text`` holds any disguise of any secret."""
    key = _key(secrets)
    rx = _pattern(key)
    if rx is None or not text:
        return False
    return bool(rx.search(text)) or _scanner(key).found_in(text.encode("utf-8", "surrogatepass"))


# ---- the skeleton: letters and digits alone ------------------------------------------

_ALNUM = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_NOT_ALNUM = bytes(b for b in range(256) if b not in _ALNUM)
_ALNUM_RUN = re.compile(r"[0-9A-Za-z]+")


def skeleton(data: bytes) -> bytes:
    """``data``'s ASCII letters and digits, in order (every other byte dropped)."""
    return data.translate(None, _NOT_ALNUM)


def _rot13(raw: bytes) -> bytes:
    return codecs.encode(raw.decode("latin-1"), "rot13").encode("latin-1")


def skeleton_forms(secret: str) -> tuple[list[bytes], list[bytes]]:
    """(case-sensitive, case-insensitive lowercased) skeletons of every form
    of ``secret`` looked for in a text's skeleton, each at least
    :data:`MIN_FORM` long."""
    raw = secret.encode()
    exact: list[bytes] = [raw, raw[::-1], _rot13(raw), _rot13(raw)[::-1]]
    folded: list[bytes] = []
    for text, ci in forms(secret):
        (folded if ci else exact).append(text.encode())
    for r in (raw, raw[::-1]):
        folded += [b"".join(b"x%02x" % b for b in r), b"".join(b"0x%02x" % b for b in r),
                   b"".join(b"u%04x" % b for b in r), b"".join(b"%d" % b for b in r),
                   b"".join(b"%o" % b for b in r)]
    keep_e = {k for f in exact if len(k := skeleton(f)) >= MIN_FORM}
    keep_f = {k for f in folded if len(k := skeleton(f).lower()) >= MIN_FORM} - {k.lower() for k in keep_e}
    return sorted(keep_e, key=len, reverse=True), sorted(keep_f, key=len, reverse=True)


class Scanner:
    """Every skeleton form of some secrets, looked for in bytes fed chunk by
    chunk (:meth:`stream`): memory is one chunk and the longest form."""

    def __init__(self, secrets: tuple[str, ...]):
        self.exact: list[bytes] = []
        self.folded: list[bytes] = []
        self.raw: list[bytes] = []
        """Secrets whose skeleton is too short to look for: searched as written."""
        for s in secrets:
            e, f = skeleton_forms(s)
            self.exact += e
            self.folded += f
            if len(skeleton(s.encode())) < MIN_FORM:
                self.raw.append(s.encode())
        self.keep = max((len(x) for x in (*self.exact, *self.folded, *self.raw)), default=1) - 1

    def hits(self, skel: bytes) -> list[tuple[int, int]]:
        """(start, end) of every form in a skeleton."""
        out = []
        low = skel.lower() if self.folded else b""
        for forms_, hay in ((self.exact, skel), (self.folded, low)):
            for f in forms_:
                i = hay.find(f)
                while i >= 0:
                    out.append((i, i + len(f)))
                    i = hay.find(f, i + 1)
        return out

    def found_in(self, data: bytes) -> bool:
        st = self.stream()
        st.feed(data)
        return st.hit

    def stream(self) -> _Stream:
        return _Stream(self)


class _Stream:
    """One stream of bytes fed to a :class:`Scanner` (``hit`` once a form
    was seen); keeps only the tails a form could straddle."""

    def __init__(self, scanner: Scanner):
        self.sc, self.skel_tail, self.raw_tail, self.hit = scanner, b"", b"", False

    def feed(self, chunk: bytes) -> None:
        if self.hit or not chunk:
            return
        sc = self.sc
        skel = self.skel_tail + skeleton(chunk)
        if sc.hits(skel):
            self.hit = True
            return
        self.skel_tail = skel[-sc.keep:] if sc.keep else b""
        if sc.raw:
            raw = self.raw_tail + chunk
            if any(r in raw for r in sc.raw):
                self.hit = True
                return
            self.raw_tail = raw[-sc.keep:] if sc.keep else b""


@lru_cache(maxsize=64)
def _scanner(secrets: tuple[str, ...]) -> Scanner:
    return Scanner(secrets)


def _skeleton_spans(text: str, sc: Scanner) -> list[tuple[int, int]]:
    """Merged spans of ``text`` (from a form's first letter or digit to its
    last) where the skeleton holds a form."""
    starts, ends, parts = [], [], []
    n = 0
    for m in _ALNUM_RUN.finditer(text):
        starts.append(n)
        ends.append(m.start())
        parts.append(m.group())
        n += len(m.group())
    skel = "".join(parts).encode()

    def where(k: int) -> int:  # text index of skeleton index k
        j = bisect.bisect_right(starts, k) - 1
        return ends[j] + (k - starts[j])

    spans = sorted((where(a), where(b - 1) + 1) for a, b in sc.hits(skel))
    merged: list[tuple[int, int]] = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return merged


MIN_HOST_SECRET = 12
"""A value under a secret-like name shorter than this is not looked for in an
agent's tree (a weak ``changeme`` would flag every file that says it)."""


def host_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """Every value the host's environment holds under a secret's name (API
    keys, tokens, the webhook secret, a database URL with its password...),
    long enough to look for."""
    env = os.environ if environ is None else environ
    return [v for k, v in env.items() if SECRET_NAME.search(k) and v and len(v) >= MIN_HOST_SECRET]


# ---- every byte of the agent's tree ------------------------------------------------------

READ_BYTES = 1 << 20
PIECE_BYTES = 1 << 20
"""The most a decompressor yields at a time (a bomb never expands in memory)."""
MAX_DEPTH = 3
"""Compressed streams inside compressed streams, at most (gzip in zip in xz...)."""
MAX_EXPANDED_BYTES = 1 << 30
"""Decompressed bytes of one file, at most: past it the file is refused."""
MAX_TREE_BYTES = 4 << 30
"""Bytes scanned in one tree (as written plus decompressed), at most: past it
the rest is refused (~50 MiB/s per secret set on a loaded 2-core machine)."""
REWRITE_MAX_BYTES = 4 << 20
"""A file holding a secret is rewritten with each match cut out when it is at
most this big and plain; otherwise it is replaced whole by ``[REDACTED]``."""


class Unscannable(Exception):
    """What the scan cannot read: the message says why (never a secret)."""


@dataclass
class TreeScan:
    """What :func:`scrub_tree` saw: paths (relative) holding a secret, and
    ``path (why)`` for what it could not scan (both mean: take nothing)."""

    found: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    scanned_bytes: int = 0


class _Budget:
    def __init__(self, tree_left: int):
        self.tree_left, self.file_expanded = tree_left, 0

    def take(self, n: int, expanded: bool) -> None:
        self.tree_left -= n
        if self.tree_left < 0:
            raise Unscannable(f"the tree is over the {MAX_TREE_BYTES >> 30} GiB the leak scan reads")
        if expanded:
            self.file_expanded += n
            if self.file_expanded > MAX_EXPANDED_BYTES:
                raise Unscannable(f"it decompresses past {MAX_EXPANDED_BYTES >> 20} MiB")


Decoder = Callable[[bytes], Iterator[bytes]]


def _zlib_decoder(wbits: int) -> Decoder:
    """gzip (``16 + MAX_WBITS``) or zlib, members one after another, output in
    pieces of at most ``PIECE_BYTES``."""
    d = zlib.decompressobj(wbits)

    def feed(data: bytes) -> Iterator[bytes]:
        nonlocal d
        while data:
            out = d.decompress(data, PIECE_BYTES)
            if out:
                yield out
            data = d.unconsumed_tail
            if d.eof:
                data = d.unused_data
                if not data.startswith(b"\x1f\x8b") or wbits != 16 + zlib.MAX_WBITS:
                    return
                d = zlib.decompressobj(wbits)
    return feed


def _bz_xz_decoder(make: Callable[[], bz2.BZ2Decompressor | lzma.LZMADecompressor]) -> Decoder:
    d = make()

    def feed(data: bytes) -> Iterator[bytes]:
        nonlocal d
        while True:
            out = d.decompress(data, PIECE_BYTES)
            data = b""
            if out:
                yield out
            if d.eof:
                rest = d.unused_data
                if not rest:
                    return
                d, data = make(), rest
            elif d.needs_input:
                return
    return feed


def _decoder(head: bytes) -> Decoder | None:
    """The decompressor of a stream starting with ``head``, None when it is
    not compressed; Unscannable for a format the scan cannot open."""
    if head.startswith(b"\x1f\x8b"):
        return _zlib_decoder(16 + zlib.MAX_WBITS)
    if head.startswith(b"BZh"):
        return _bz_xz_decoder(bz2.BZ2Decompressor)
    if head.startswith(b"\xfd7zXZ\x00"):
        return _bz_xz_decoder(lzma.LZMADecompressor)
    if len(head) >= 2 and head[0] == 0x78 and head[1] in (0x01, 0x5E, 0x9C, 0xDA):  # zlib's levels
        return _zlib_decoder(zlib.MAX_WBITS)
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        raise Unscannable("a zstd stream (no zstd decoder here): store it uncompressed or gzip it")
    if head.startswith(b"PK\x03\x04") or head.startswith(b"7z\xbc\xaf\x27\x1c") or head.startswith(b"Rar!"):
        raise Unscannable("an archive inside a compressed stream or archive: store it unpacked")
    return None


class _Level:
    """One stream: scanned as written, and, when it starts like a compressed
    stream, decompressed (as it comes) into the next level."""

    def __init__(self, sc: Scanner, budget: _Budget, depth: int):
        self.sc, self.budget, self.depth = sc, budget, depth
        self.raw = sc.stream()
        self.head = b""
        self.decided = False
        self.decode: Decoder | None = None
        self.child: _Level | None = None

    @property
    def hit(self) -> bool:
        return self.raw.hit or (self.child is not None and self.child.hit)

    def feed(self, chunk: bytes) -> None:
        self.budget.take(len(chunk), expanded=self.depth > 0)
        self.raw.feed(chunk)
        if not self.decided:
            self.head += chunk
            if len(self.head) < 8:
                return
            self._decide()
            chunk, self.head = self.head, b""
        self._expand(chunk)

    def close(self) -> None:
        if not self.decided:
            self._decide()
            self._expand(self.head)
            self.head = b""

    def _decide(self) -> None:
        self.decided = True
        if self.depth == 0 and self.head.startswith(b"PK\x03\x04"):
            return  # a zip file: scan_file reads its members
        decode = _decoder(self.head)
        if decode is not None and self.depth >= MAX_DEPTH:
            raise Unscannable(f"compressed more than {MAX_DEPTH} levels deep")
        if decode is not None:
            self.decode, self.child = decode, _Level(self.sc, self.budget, self.depth + 1)

    def _expand(self, chunk: bytes) -> None:
        if self.decode is None or self.child is None or not chunk:
            return
        try:
            for piece in self.decode(chunk):
                self.child.feed(piece)
        except (zlib.error, OSError, EOFError, lzma.LZMAError, ValueError):
            self.decode = None  # a corrupt stream: what it decoded so far was scanned
            self.child.close()


def _scan_zip(f: BinaryIO, sc: Scanner, budget: _Budget) -> bool:
    """Every member of a zip archive, decompressed as a stream."""
    try:
        zf = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, OSError, ValueError):
        return False  # not an archive after all: scanned as written
    with zf:
        for info in zf.infolist():
            if info.flag_bits & 0x1:
                raise Unscannable("an encrypted zip member: the scan cannot read it")
            level = _Level(sc, budget, 1)
            try:
                with zf.open(info) as m:
                    while chunk := m.read(READ_BYTES):
                        level.feed(chunk)
                        if level.hit:
                            return True
            except (zipfile.BadZipFile, NotImplementedError, zlib.error, OSError, EOFError,
                    lzma.LZMAError) as e:
                raise Unscannable(f"a zip member the scan cannot read ({type(e).__name__})") from None
            level.close()
            if level.hit:
                return True
    return False


def scan_file(f: BinaryIO, sc: Scanner, budget: _Budget) -> bool:
    """Whether the open file ``f`` holds any form, in every byte as written
    and in what it decompresses to; Unscannable when it cannot tell."""
    budget.file_expanded = 0
    level = _Level(sc, budget, 0)
    while chunk := f.read(READ_BYTES):
        level.feed(chunk)
        if level.hit:
            return True
    level.close()
    if level.hit:
        return True
    f.seek(0)
    if f.read(4) == b"PK\x03\x04" or zipfile.is_zipfile(f):
        f.seek(0)
        return _scan_zip(f, sc, budget)
    return False


def scrub_tree(tree: Path, secrets: Iterable[str]) -> TreeScan:
    """Scan every byte of every regular file under ``tree`` (links never
    followed) for every disguise of every secret, compressed files
    decompressed; redact what holds one (``REWRITE_MAX_BYTES``). What the scan
    cannot read is listed in ``refused``, never skipped."""
    key = _key(secrets)
    out = TreeScan()
    if not key:
        return out
    sc, budget = _scanner(key), _Budget(MAX_TREE_BYTES)
    for dirpath, dirnames, filenames in os.walk(tree):
        dirnames[:] = sorted(d for d in dirnames if not os.path.islink(os.path.join(dirpath, d)))
        for fn in sorted(filenames):
            path = os.path.join(dirpath, fn)
            rel = os.path.relpath(path, tree)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                continue  # a symlink (never followed) or gone
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode):
                    continue  # a FIFO or device holds no bytes of the tree
                try:
                    hit = scan_file(f, sc, budget)
                except Unscannable as e:
                    out.refused.append(f"{rel} ({e})")
                    if budget.tree_left < 0:
                        out.scanned_bytes = MAX_TREE_BYTES
                        return out
                    continue
            if hit:
                out.found.append(rel)
                _redact_file(path, key, st.st_size)
    out.scanned_bytes = MAX_TREE_BYTES - budget.tree_left
    return out


def _plain(head: bytes) -> bool:
    """Whether a file starting with ``head`` is neither compressed nor an archive."""
    try:
        return _decoder(head) is None and not head.startswith(b"PK\x03\x04")
    except Unscannable:
        return False


def _redact_file(path: str, key: tuple[str, ...], size: int) -> None:
    """Cut every match out of a small plain file; replace any other file whole."""
    data = None
    if size <= REWRITE_MAX_BYTES:
        with open(path, "rb") as f:  # the agent is done: nothing swaps it for a link now
            raw = f.read(REWRITE_MAX_BYTES + 1)
        text = redact(raw.decode("latin-1"), key)  # byte for byte: secrets are ASCII
        if not _scanner(key).found_in(text.encode("latin-1")) and _plain(raw[:8]):
            data = text.encode("latin-1")
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "wb") as f:
        f.write(data if data is not None else (REDACTED + "\n").encode())
