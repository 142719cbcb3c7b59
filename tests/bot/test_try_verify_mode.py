"""Issue 30.4 (a low): ``rsi try`` runs the candidate on this host only when
the user typed ``--verify inprocess``, and then says so.

The attack, as it was: ``RSI_VERIFY_MODE=inprocess`` in the environment (a
dotfile, a CI variable, another tool's setting) and a plain ``rsi try``; the
harness read the variable and ran the candidate's code on the host, outside
any container, without a word. Now the variable alone is refused before
anything runs (exit 2, saying which flag to pass), and the flag prints that
the candidate runs on this host as the output's first line.

Every command runs as a user types it (``python -m bot.cli try ...``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.trylocal import EXIT_INVALID, verify_mode


def _rsi_try(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "RSI_VERIFY_MODE"} | env
    return subprocess.run([sys.executable, "-m", "bot.cli", "try", *args], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=120)


def _repo_without_config(tmp_path: Path) -> Path:
    """A git repo with no .rsi/config.toml: ``rsi try`` stops at the config
    (exit 2) once it has cloned it, so nothing of a candidate ever runs."""
    repo = tmp_path / "repo"
    repo.mkdir()
    ident = {**os.environ, "GIT_AUTHOR_NAME": "m", "GIT_AUTHOR_EMAIL": "m@example.com",
             "GIT_COMMITTER_NAME": "m", "GIT_COMMITTER_EMAIL": "m@example.com"}
    (repo / "README.md").write_text("a repo\n")
    for cmd in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run(["git", *cmd], cwd=repo, env=ident, check=True, capture_output=True)
    return repo


def test_the_environment_alone_never_runs_the_candidate_on_this_host(tmp_path):
    repo = _repo_without_config(tmp_path)
    out = tmp_path / "out"
    r = _rsi_try("--repo", str(repo), "--out", str(out), cwd=tmp_path,
                 env={"RSI_VERIFY_MODE": "inprocess"})
    assert r.returncode == EXIT_INVALID, r.stdout + r.stderr
    assert "RSI_VERIFY_MODE=inprocess is set, but rsi try takes its verification mode only from " \
           "--verify" in r.stderr, r.stderr
    assert "runs the candidate on this host" in r.stderr and "pass --verify inprocess" in r.stderr
    assert not out.exists()  # refused before the clone: nothing ran


def test_the_flag_says_first_that_the_candidate_runs_on_this_host(tmp_path):
    repo = _repo_without_config(tmp_path)
    r = _rsi_try("--repo", str(repo), "--out", str(tmp_path / "out"), "--verify", "inprocess",
                 cwd=tmp_path, env={})
    first = r.stdout.splitlines()[0]
    assert "--verify inprocess: the candidate's code runs ON THIS HOST" in first, r.stdout
    assert "outside any container" in first
    assert r.returncode == EXIT_INVALID  # then the missing config stops it, as without the flag
    plain = _rsi_try("--repo", str(repo), "--out", str(tmp_path / "out2"), cwd=tmp_path,
                     env={"RSI_VERIFY_MODE": "sandbox"})
    assert "ON THIS HOST" not in plain.stdout + plain.stderr
    assert plain.returncode == EXIT_INVALID


@pytest.mark.parametrize(("flag", "env", "mode"), [
    (None, {}, "sandbox"),
    (None, {"RSI_VERIFY_MODE": "sandbox"}, "sandbox"),
    ("inprocess", {}, "inprocess"),
    ("inprocess", {"RSI_VERIFY_MODE": "sandbox"}, "inprocess"),
    ("sandbox", {"RSI_VERIFY_MODE": "inprocess"}, "sandbox"),
])
def test_only_the_flag_chooses_the_mode(flag, env, mode):
    assert verify_mode(flag, env) == mode


@pytest.mark.parametrize("named", ["inprocess", "in-process", "local", "mysite.backend:make"])
def test_any_other_mode_from_the_environment_is_refused(named):
    with pytest.raises(ValueError, match=f"pass --verify {named} to mean it"):
        verify_mode(None, {"RSI_VERIFY_MODE": named})
