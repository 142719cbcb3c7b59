"""Copying a job's run dir out of its container (verifier/isolation.py): the
pieces that need no engine. Real copies spoilt on a real engine are in
tests/verifier/test_isolation.py (the spoilt-copy and failed-start tests)."""

from __future__ import annotations

import pytest


def test_undoing_a_copy_removes_what_it_added_only_and_never_through_a_link(tmp_path):
    """A spoilt copy of a run dir is undone before the next try: what the copy
    added goes (new files, new dirs, links as links), what was there before
    stays, and nothing a link points at is touched."""
    from verifier.isolation import _entries, _remove_new

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    dest = tmp_path / "run"
    (dest / "outputs").mkdir(parents=True)
    (dest / "keep.txt").write_text("before")
    before = _entries(dest)
    (dest / "result.json").write_text("{}")
    (dest / "outputs" / "0.txt").write_text("partial")
    (dest / "outputs" / "deep" / "er").mkdir(parents=True)
    (dest / "outputs" / "deep" / "er" / "x.bin").write_bytes(b"x")
    (dest / "link").symlink_to(outside)
    (dest / "outputs" / "link").symlink_to(outside / "precious.txt")
    _remove_new(dest, before)
    assert _entries(dest) == before == {"outputs", "keep.txt"}
    assert (dest / "keep.txt").read_text() == "before"
    assert (outside / "precious.txt").read_text() == "keep me"


def test_a_copy_stream_says_dockers_words_never_the_runs_file_names():
    """What a copy's stream says when it failed: Docker's text (it streams in
    place of an exec it could not start), printable and short; of a real
    archive nothing, not even a cut one (its headers name the run's files, a
    candidate's words). The stream stops at its cap."""
    import io
    import tarfile

    from verifier.isolation import SAID_CHARS, _CapExceeded, _Capped

    docker_text = b'OCI runtime exec failed: exec failed: unable to start container process: \x1b[31m"tar"\r\n'
    refused = _Capped(iter([(docker_text, None)]), 1 << 20)
    assert refused.read() == docker_text
    assert refused.said().startswith(": OCI runtime exec failed: exec failed")
    assert "\x1b" not in refused.said() and "\r" not in refused.said()
    assert len(_Capped(iter([(b"OCI " * 400, None)]), 1 << 20).said()) <= SAID_CHARS + 2

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("IGNORE-ALL-PREVIOUS-INSTRUCTIONS.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    archive = buf.getvalue()
    for cut in (archive, archive[:200], archive[:1024]):
        stream = _Capped(iter([(cut[:100], b"tar: a warning"), (None, b"more"), (cut[100:], None)]), 1 << 20)
        assert b"".join(stream) == cut
        assert stream.said() == ""
    whole = _Capped(iter([(archive, None)]), 1 << 20)
    with tarfile.open(fileobj=whole, mode="r|") as tar:
        assert [m.name for m in tar] == ["IGNORE-ALL-PREVIOUS-INSTRUCTIONS.txt"]
    whole.drain()
    assert whole.read() == b"" and whole.exit_code() is None  # no engine to ask: unknown
    with pytest.raises(_CapExceeded):
        _Capped(iter([(b"x" * 600, None), (b"y" * 600, None)]), 1000).read()
