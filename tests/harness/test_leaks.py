"""Issue 30.3 (leak detection): every byte the agent produced is scanned, in
the simple disguises an agent reaches for, or refused when it cannot be.

Each disguise below is a file an agent could leave in its tree holding the
host's key. Before, leak detection missed them all (regex on whitespace
splits only; files over 4 MiB never read; compressed files read as their
compressed bytes). Now each is found by ``scrub_secrets`` (what the harness
runs on the agent's tree: ``harness.leaks.scrub_tree``), and the file no
longer holds it; what the scan cannot read is refused by name. The table of
the same disguises against another checkout: ``benchmarks/leak_disguises.py``.
"""

from __future__ import annotations

import base64
import bz2
import codecs
import gzip
import io
import lzma
import os
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from harness import leaks
from harness.agents.command import scrub_secrets

KEY = "sk-live-9f8e7d6c5b4a3210"
RAW = KEY.encode()


def _zip(name: str, data: bytes, *, encrypted: bool = False) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(name, data)
    out = bytearray(buf.getvalue())
    if encrypted:  # the "encrypted" bit in the local and the central header, as a real one has
        cd = out.index(b"PK\x01\x02")
        out[6] |= 0x1
        out[cd + 8] |= 0x1
    return bytes(out)


def _targz(name: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


LINE = f"api_key = {KEY!r}\n".encode()
PAD = b"# nothing to see here\n" * 200_000  # 4.4 MiB

DISGUISES: dict[str, Callable[[], tuple[str, bytes]]] = {
    "the plain key in a file over 4 MiB": lambda: ("big.py", PAD + LINE),
    "separated by dashes": lambda: ("a.txt", "-".join(KEY).encode()),
    "hex with colons": lambda: ("a.txt", ":".join(f"{b:02x}" for b in RAW).encode()),
    "\\x escapes": lambda: ("a.py", ("k = b'" + "".join(f"\\x{b:02x}" for b in RAW) + "'").encode()),
    "a list of 0x bytes": lambda: ("a.c", ("{" + ", ".join(f"0x{b:02X}" for b in RAW) + "}").encode()),
    "decimal char codes": lambda: ("a.py", f"k = bytes({list(RAW)})".encode()),
    "octal escapes": lambda: ("a.sh", ("printf '" + "".join(f"\\{b:o}" for b in RAW) + "'").encode()),
    "\\u escapes": lambda: ("a.json", ('{"k": "' + "".join(f"\\u{b:04x}" for b in RAW) + '"}').encode()),
    "split across lines in quotes": lambda: (
        "a.py", ('k = ("' + KEY[:5] + '"\n     "' + KEY[5:13] + '"\n     "' + KEY[13:] + '")\n').encode()),
    "ROT13": lambda: ("a.txt", codecs.encode(KEY, "rot13").encode()),
    "reversed, then base64": lambda: ("a.b64", base64.b64encode(RAW[::-1])),
    "UTF-16 text (a binary file to git)": lambda: ("a.txt", ("key: " + KEY).encode("utf-16")),
    "gzip file": lambda: ("notes.gz", gzip.compress(LINE)),
    "zlib stream": lambda: ("blob", __import__("zlib").compress(LINE)),
    "bzip2 file": lambda: ("notes.bz2", bz2.compress(LINE)),
    "xz file": lambda: ("notes.xz", lzma.compress(LINE)),
    "zip archive": lambda: ("notes.zip", _zip("notes.txt", PAD + LINE)),
    "tar.gz": lambda: ("notes.tar.gz", _targz("notes.txt", LINE)),
    "gzip inside a zip": lambda: ("n.zip", _zip("n.gz", gzip.compress(LINE))),
    "in an executable binary between NULs": lambda: ("tool", b"\x7fELF\x00\x00" + RAW + b"\x00" * 64),
}
"""Each disguise: (file name, bytes) as an agent could write it."""


@pytest.mark.parametrize("name", list(DISGUISES))
def test_each_disguise_in_the_tree_is_found_and_taken_out(tmp_path: Path, name: str):
    fn, data = DISGUISES[name]()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / fn).write_bytes(data)
    (tmp_path / "src" / "clean.py").write_text("print('hello')\n")
    assert scrub_secrets(tmp_path, [KEY]) == [f"src/{fn}"]
    after = (tmp_path / "src" / fn).read_bytes()
    assert not leaks.Scanner((KEY,)).found_in(after), after[:200]
    assert scrub_secrets(tmp_path, [KEY]) == []  # nothing left, nothing refused


def test_a_small_plain_file_keeps_its_other_text(tmp_path: Path):
    (tmp_path / "a.py").write_text(f"x = 1\nk = '{'-'.join(KEY)}'\ny = 2\n")
    assert scrub_secrets(tmp_path, [KEY]) == ["a.py"]
    assert (tmp_path / "a.py").read_text() == "x = 1\nk = '[REDACTED]'\ny = 2\n"


@pytest.mark.parametrize(("why", "make"), [
    ("an encrypted zip member", lambda: ("s.zip", _zip("s.txt", b"x" * 100, encrypted=True))),
    ("a zstd stream", lambda: ("s.zst", b"\x28\xb5\x2f\xfd" + os.urandom(64))),
    ("compressed more than 3 levels deep",
     lambda: ("s.gz", gzip.compress(gzip.compress(gzip.compress(gzip.compress(b"hello")))))),
    ("an archive inside a compressed stream", lambda: ("s.zip.gz", gzip.compress(_zip("a", b"hello")))),
])
def test_what_the_scan_cannot_read_is_refused_by_name(tmp_path: Path, why: str, make):
    fn, data = make()
    (tmp_path / fn).write_bytes(data)
    (got,) = scrub_secrets(tmp_path, [KEY])
    assert got.startswith(f"{fn} ({why}") and got.endswith(": not scannable, so not taken"), got
    assert KEY not in got


def test_a_decompression_bomb_is_refused_with_memory_bounded(tmp_path: Path, monkeypatch):
    """A gzip file that expands past the bound: refused by name; expanding it
    never holds more than one piece at a time."""
    monkeypatch.setattr(leaks, "MAX_EXPANDED_BYTES", 8 << 20)
    (tmp_path / "bomb.gz").write_bytes(gzip.compress(b"\0" * (32 << 20)))  # 32 KiB on disk
    (got,) = scrub_secrets(tmp_path, [KEY])
    assert got == "bomb.gz (it decompresses past 8 MiB): not scannable, so not taken", got


def test_the_tree_budget_refuses_the_rest(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(leaks, "MAX_TREE_BYTES", 1 << 20)
    for i in range(3):
        (tmp_path / f"f{i}.bin").write_bytes(b"a" * (600 << 10))
    scan = leaks.scrub_tree(tmp_path, [KEY])
    assert scan.found == [] and scan.refused == ["f1.bin (the tree is over the 0 GiB the leak scan reads)"]


def test_no_false_alarm_on_the_projects_own_files(tmp_path: Path):
    """The harness and verifier sources, a wheel-like zip of them and random
    bytes hold no disguise of the key."""
    root = Path(leaks.__file__).resolve().parents[1]
    scan = leaks.scrub_tree(root / "harness", [KEY, "ghp_abcdefghijklmnopqrstuvwxyz0123456789"])
    assert scan.found == [] and scan.refused == [], scan
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for p in sorted((root / "verifier").glob("*.py")):
            z.write(p, p.name)
    (tmp_path / "v.zip").write_bytes(buf.getvalue())
    (tmp_path / "r.bin").write_bytes(os.urandom(3 << 20))
    scan = leaks.scrub_tree(tmp_path, [KEY])
    assert scan.found == [] and scan.refused == [] and scan.scanned_bytes > 3 << 20, scan


@pytest.mark.parametrize("text", [
    "tuned " + "-".join(KEY),
    "tuned " + ":".join(f"{b:02x}" for b in RAW),
    'k = "' + KEY[:9] + '" + "' + KEY[9:] + '"',
    "codes " + str(list(RAW)),
])
def test_a_hypothesis_or_log_line_in_disguise_is_found_and_redacted(text: str):
    assert leaks.found(text, [KEY])
    red = leaks.redact(text, [KEY])
    assert not leaks.found(red, [KEY]) and "[REDACTED]" in red, red
    assert red.split("[REDACTED]")[0].strip() in ("tuned", 'k = "', "codes ["), red
