"""Rule 1 of the trust boundary: the host trusts nothing the sandbox writes.

Each test plays the attacker: an agent (in-process here, so it can plant
anything a container could leave in its tree or scratch dir; the docker tests
do the same from a real agent container) leaves links, FIFOs, git config,
hooks or ignored files, and the test checks the host never follows, reads,
executes or commits them, and that verification only ever sees fresh exports
of the committed sha.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from harness.agents import AgentOutcome, CommandAgent, ReplayAgent
from harness.agents.base import UnsafeFile, read_agent_file, write_host_file
from harness.agents.command import read_hypothesis
from harness.gitutil import GitError, bot_env, git
from harness.ledger import Ledger
from harness.loop import run_task
from harness.policy import check_diff
from harness.spec import load_task
from harness.workspace import ExportLimits, Workspace, export_commit

from . import fakes
from .target import FASTER_SETTINGS, commit_all, make_target, sh


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    return make_target(tmp_path, python=sys.executable)


@pytest.fixture()
def no_hang():
    """Fail (instead of hanging the suite) if the host blocks on a FIFO."""
    def boom(*_):
        raise TimeoutError("the host blocked (a FIFO opened for reading?)")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


class Attacker:
    """An agent that edits like an honest one (faster settings) and also
    plants whatever ``plant(tree, scratch)`` leaves."""

    name = "attacker"

    def __init__(self, plant, hypothesis="lower the per-request delay"):
        self.plant = plant
        self.hypothesis = hypothesis

    def run(self, ctx) -> AgentOutcome:
        if ctx.state.get("done"):
            return AgentOutcome(done=True)
        ctx.state["done"] = True
        (ctx.worktree / "app" / "settings.toml").write_text(FASTER_SETTINGS)
        scratch = Path(ctx.scratch_dir)
        scratch.mkdir(parents=True, exist_ok=True)
        self.plant(ctx.worktree, scratch)
        return AgentOutcome(hypothesis=self.hypothesis, log="attacker log\n")


class RecordingVerifier(fakes.FakeVerifier):
    """The fake verifier, noting what each tree it was given looked like."""

    def __init__(self):
        self.seen: list[dict] = []

    def verify(self, baseline, candidate, spec, *, b0, shas, calibration, progress=None):
        files = sorted(str(p.relative_to(candidate)) for p in Path(candidate).rglob("*") if p.is_file())
        self.seen.append({"candidate": Path(candidate), "bk": Path(baseline), "files": files, "shas": dict(shas),
                          "settings": (Path(candidate) / "app" / "settings.toml").read_text()})
        return super().verify(baseline, candidate, spec, b0=b0, shas=shas, calibration=calibration, progress=progress)


def run_attack(repo: Path, tmp_path: Path, plant, verifier=None):
    spec = load_task(repo, None, "t")
    verifier = verifier or RecordingVerifier()
    res = run_task(repo, spec, state_dir=tmp_path / "state", agent=Attacker(plant), rounds=1, verifier=verifier)
    return res, verifier


# ------------------------------------------------------------- agent IO


def test_symlinked_hypothesis_is_not_followed(tmp_path: Path):
    secret = tmp_path / "host-secret.txt"
    secret.write_text("APP_PRIVATE_KEY=very-secret\n")
    scratch = tmp_path / "out"
    scratch.mkdir()
    (scratch / "hypothesis.txt").symlink_to(secret)
    hyp, note = read_hypothesis(scratch, "some output\n")
    assert hyp == "" and "refused" in note
    with pytest.raises(UnsafeFile):
        read_agent_file(scratch, "hypothesis.txt")
    # nor through a symlinked scratch dir
    (tmp_path / "linked").symlink_to(tmp_path)
    with pytest.raises(UnsafeFile):
        read_agent_file(tmp_path / "linked", "host-secret.txt")


def test_fifo_and_huge_hypothesis_do_not_hang_or_flood_the_host(tmp_path: Path, no_hang):
    scratch = tmp_path / "out"
    scratch.mkdir()
    os.mkfifo(scratch / "hypothesis.txt")
    hyp, note = read_hypothesis(scratch, "RSI-HYPOTHESIS: said on stdout instead\n")
    assert hyp == "said on stdout instead" and "not a regular file" in note
    (scratch / "hypothesis.txt").unlink()
    (scratch / "hypothesis.txt").write_text("x" * (1 << 20))
    with pytest.raises(UnsafeFile, match="larger than"):
        read_agent_file(scratch, "hypothesis.txt", max_bytes=4096)


def test_host_file_write_replaces_a_planted_symlink(tmp_path: Path):
    victim = tmp_path / "victim.pth"
    victim.write_text("original\n")
    log = tmp_path / "agent.log"
    log.symlink_to(victim)
    write_host_file(log, "the log\n")
    assert victim.read_text() == "original\n"
    assert not log.is_symlink() and log.read_text() == "the log\n"


def test_loop_never_follows_what_the_agent_leaves_in_its_dirs(repo: Path, tmp_path: Path, no_hang):
    victim = tmp_path / "victim.pth"
    victim.write_text("original\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("GITHUB_TOKEN=ghs_secret\n")

    def plant(tree: Path, scratch: Path):
        (scratch / "agent.log").symlink_to(victim)
        (scratch / "hypothesis.txt").symlink_to(secret)
        os.mkfifo(scratch / "fifo")
        os.mkfifo(tree / "app" / "pipe")
        (tree / "app" / "leak.txt").symlink_to(secret)

    res, ver = run_attack(repo, tmp_path, plant)
    (c,) = res.candidates
    assert victim.read_text() == "original\n"
    io = tmp_path / "state" / "rounds" / "1"
    assert stat.S_IMODE(os.lstat(io).st_mode) == 0o700
    assert not (io / "agent.log").is_symlink() and "attacker log" in (io / "agent.log").read_text()
    assert "app/pipe (fifo): not a regular file, not exported" in (io / "agent.log").read_text()
    # the link reached the edit policy as a link, and was rejected there
    assert c.decision == "reject" and "app/leak.txt: symbolic link" in c.reason, c.reason
    assert "ghs_secret" not in sh(repo, "show", c.sha) and ver.seen == []
    rec = Ledger(repo).records()[0]
    assert "app/pipe (fifo)" in " ".join(rec.left_out)


# ------------------------------------------------ git config in the agent tree


def _marker_script(tmp_path: Path, name: str) -> tuple[Path, Path]:
    marker = tmp_path / f"MARKER-{name}"
    script = tmp_path / f"evil-{name}.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\nenv > {marker}.env\n")
    script.chmod(0o755)
    return script, marker


def test_agent_git_config_hooks_and_fsmonitor_never_run_on_the_host(repo: Path, tmp_path: Path):
    scripts = {n: _marker_script(tmp_path, n) for n in ("sub-fsmonitor", "top-fsmonitor", "gitfile", "hook")}
    evil_gitdir = tmp_path / "evil-gitdir"
    subprocess.run(["git", "init", "-q", "--bare", str(evil_gitdir)], check=True)
    (evil_gitdir / "config").write_text(f"[core]\n\tfsmonitor = {scripts['gitfile'][0]}\n\tbare = false\n")

    def plant(tree: Path, scratch: Path):
        sub = tree / "app" / "sub"
        sub.mkdir()
        subprocess.run(["git", "init", "-q", str(sub)], check=True)
        (sub / "x.py").write_text("X = 1\n")
        with open(sub / ".git" / "config", "a") as fh:
            fh.write(f"[core]\n\tfsmonitor = {scripts['sub-fsmonitor'][0]}\n")
        top = tree / ".git"
        top.mkdir()
        subprocess.run(["git", "init", "-q", "--bare", str(top)], check=True)
        (top / "config").write_text(f"[core]\n\tfsmonitor = {scripts['top-fsmonitor'][0]}\n\thooksPath = ../hooks\n"
                                    "\tbare = false\n\tworktree = ..\n")
        hooks = tree / "hooks"
        hooks.mkdir()
        for h in ("pre-commit", "post-commit", "post-checkout", "reference-transaction", "post-index-change"):
            (hooks / h).write_text(f"#!/bin/sh\n{scripts['hook'][0]}\n")
            (hooks / h).chmod(0o755)
        (tree / "app" / "vendored").mkdir()
        (tree / "app" / "vendored" / ".git").write_text(f"gitdir: {evil_gitdir}\n")

    res, _ = run_attack(repo, tmp_path, plant)
    for name, (_script, marker) in scripts.items():
        assert not marker.exists(), f"{name}: the host ran a command the agent configured"
    (c,) = res.candidates
    names = sh(repo, "ls-tree", "-r", "--name-only", c.sha).splitlines()
    assert not [n for n in names if ".git" in n.split("/")], names
    rec = Ledger(repo).records()[0]
    assert {".git: .git entry not exported", "app/sub/.git: .git entry not exported",
            "app/vendored/.git: .git entry not exported"} <= set(rec.left_out)
    assert c.decision == "reject" and "hooks/pre-commit" in c.reason, c.reason  # the hooks are just files


def test_host_git_is_hardened_and_clean(tmp_path: Path, monkeypatch):
    """Even in a repo whose own config asks for them, host git runs no
    fsmonitor and no hooks, and sees none of the bot's secrets."""
    fsm, fsm_marker = _marker_script(tmp_path, "fsmonitor")
    hook, hook_marker = _marker_script(tmp_path, "hook")
    repo = make_target(tmp_path, python=sys.executable)
    sh(repo, "config", "core.fsmonitor", str(fsm))
    (repo / ".git" / "hooks" / "pre-commit").write_text(f"#!/bin/sh\n{hook}\n")
    (repo / ".git" / "hooks" / "pre-commit").chmod(0o755)
    sh(repo, "config", "alias.envdump", f"!env > {tmp_path / 'env.txt'}")
    for name, value in {"GITHUB_APP_PRIVATE_KEY": "pk", "RSI_WEBHOOK_SECRET": "whs", "ANTHROPIC_API_KEY": "sk",
                        "SOME_TOKEN": "tok", "DB_PASSWORD": "pw"}.items():
        monkeypatch.setenv(name, value)
    (repo / "app" / "new.py").write_text("N = 1\n")
    git(repo, "status", "--porcelain")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "x")
    assert not fsm_marker.exists() and not hook_marker.exists()
    git(repo, "envdump")
    env = dict(line.split("=", 1) for line in (tmp_path / "env.txt").read_text().splitlines() if "=" in line)
    assert not {"GITHUB_APP_PRIVATE_KEY", "RSI_WEBHOOK_SECRET", "ANTHROPIC_API_KEY", "SOME_TOKEN", "DB_PASSWORD"} & set(env)
    assert env["GIT_CONFIG_NOSYSTEM"] == "1" and "PATH" in env
    assert set(bot_env()) <= {"PATH", "HOME", "LANG", "LC_ALL", "TZ", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL",
                              "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "GIT_TERMINAL_PROMPT",
                              "GIT_CONFIG_NOSYSTEM"}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand a repo to another uid")
def test_host_git_refuses_a_repo_owned_by_the_sandbox_uid(repo: Path):
    for dirpath, dirnames, filenames in os.walk(repo):
        for n in [*dirnames, *filenames]:
            os.lchown(os.path.join(dirpath, n), 1000, 1000)
    os.lchown(repo, 1000, 1000)
    with pytest.raises(GitError, match="dubious ownership"):
        git(repo, "status")


# ---------------------------------------------------- ignored files, exports


IGNORING = "__pycache__/\n*.pyc\nbuild/\n"


def test_ignored_pyc_shadowing_a_protected_module_never_reaches_the_verified_tree(repo: Path, tmp_path: Path):
    (repo / ".gitignore").write_text(IGNORING)
    commit_all(repo, "ignore caches")

    def plant(tree: Path, scratch: Path):
        (tree / "bench" / "__pycache__").mkdir()
        (tree / "bench" / "__pycache__" / "run.cpython-311.pyc").write_bytes(b"\x00evil bytecode\x00")
        (tree / "app" / "core.cpython-311.pyc").write_bytes(b"\x00evil\x00")

    res, ver = run_attack(repo, tmp_path, plant)
    (c,) = res.candidates
    assert c.decision == "accept", c.reason
    (seen,) = ver.seen
    assert not [f for f in seen["files"] if f.endswith(".pyc") or "__pycache__" in f], seen["files"]
    assert "bench/__pycache__/run.cpython-311.pyc: ignored by the repo, not committed" in Ledger(repo).records()[0].left_out
    assert sh(repo, "diff", "--name-only", res.b0_sha, c.sha) == "app/settings.toml"


def test_unignored_pyc_is_seen_and_rejected_by_the_policy(repo: Path, tmp_path: Path):
    def plant(tree: Path, scratch: Path):
        (tree / "bench" / "__pycache__").mkdir()
        (tree / "bench" / "__pycache__" / "run.cpython-311.pyc").write_bytes(b"\x00evil bytecode\x00")

    res, ver = run_attack(repo, tmp_path, plant)
    (c,) = res.candidates
    assert c.decision == "reject" and "bench/__pycache__/run.cpython-311.pyc" in c.reason, c.reason
    assert ver.seen == []


def test_verification_runs_on_fresh_exports_of_the_committed_sha(repo: Path, tmp_path: Path):
    (repo / ".gitignore").write_text(IGNORING)
    commit_all(repo, "ignore builds")

    def plant(tree: Path, scratch: Path):
        (tree / "build").mkdir()
        (tree / "build" / "fast.so").write_bytes(b"\x7fELF")

    res, ver = run_attack(repo, tmp_path, plant)
    (c,) = res.candidates
    (seen,) = ver.seen
    tracked = sorted(sh(repo, "ls-tree", "-r", "--name-only", c.sha).splitlines())
    assert seen["files"] == tracked  # exactly the committed tree: no .git, no build/, nothing else
    assert seen["shas"]["candidate"] == c.sha and "delay_ms = 17" in seen["settings"]
    assert "worktrees/verify-1-candidate" in str(seen["candidate"]) and "verify-1-bk" in str(seen["bk"])
    assert not seen["candidate"].exists() and not seen["bk"].exists()  # removed afterwards


# --------------------------------------------------------------- export rules


def test_export_tree_rules(repo: Path, tmp_path: Path, no_hang):
    ws = Workspace(repo, tmp_path / "wts")
    tree = ws.agent_tree("agent", "main")
    assert not (tree / ".git").exists()
    (tree / "app" / "core.py").chmod(0o755)                      # a mode change
    (tree / "tests" / "test_core.py").unlink()                   # a deletion of a tracked file
    (tree / "app" / "link.py").symlink_to("/etc/passwd")         # a symlink
    (tree / "app" / "deep" / ".git").mkdir(parents=True)         # .git at depth
    (tree / "app" / "deep" / ".git" / "config").write_text("[core]\n")
    (tree / "app" / "deep" / "ok.py").write_text("OK = 1\n")
    os.mkfifo(tree / "app" / "fifo")
    (tree / "app" / "big.bin").write_bytes(b"0" * 5000)
    dest, rep = ws.export_candidate(tree, "taken", ExportLimits(max_file_bytes=4096))
    assert rep.symlinks == ["app/link.py"] and os.readlink(dest / "app" / "link.py") == "/etc/passwd"
    assert rep.skipped_git == ["app/deep/.git"] and rep.skipped_special == ["app/fifo (fifo)"]
    assert rep.problems() == ["app/big.bin: file larger than the export cap"]
    taken = ws.commit_candidate(dest, "main", "rsi/t/9", "many things")
    pol = check_diff(taken.diff, load_task(repo, None, "t").policy)
    rules = {(v.rule, v.path) for v in pol.violations}
    assert ("mode", "app/core.py") in rules and ("symlink", "app/link.py") in rules, rules
    assert "deleted file mode" in taken.diff and "tests/test_core.py" in taken.diff
    assert "app/deep/ok.py" in taken.diff and ".git" not in sh(repo, "ls-tree", "-r", "--name-only", taken.sha)


def test_export_commit_is_exact(repo: Path, tmp_path: Path):
    (repo / "app" / "run.sh").write_text("#!/bin/sh\n")
    (repo / "app" / "run.sh").chmod(0o755)
    (repo / "app" / "alias.toml").symlink_to("settings.toml")
    (repo / ".gitattributes").write_text("*.toml text eol=crlf\napp/core.py export-ignore\n")
    sha = commit_all(repo, "modes, links, attributes")
    out = export_commit(repo, sha, tmp_path / "exp")
    assert os.access(out / "app" / "run.sh", os.X_OK) and not os.access(out / "app" / "core.py", os.X_OK)
    assert os.readlink(out / "app" / "alias.toml") == "settings.toml"
    assert b"\r\n" not in (out / "app" / "settings.toml").read_bytes()  # blob bytes, no eol filter
    assert (out / "app" / "core.py").exists()  # export-ignore does not hide files from the verifier
    assert not (out / ".git").exists()


# --------------------------------------------------------------------- replay


def test_replay_cannot_write_outside_the_tree(repo: Path, tmp_path: Path):
    from .test_agents import ctx_for

    outside = tmp_path / "escaped.txt"
    escape = tmp_path / "escape.patch"
    escape.write_text("--- /dev/null\n+++ b/../escaped.txt\n@@ -0,0 +1 @@\n+pwned\n")
    through_link = tmp_path / "link.patch"
    through_link.write_text(
        "diff --git a/app/out b/app/out\nnew file mode 120000\n--- /dev/null\n+++ b/app/out\n@@ -0,0 +1 @@\n"
        f"+{tmp_path}\n\\ No newline at end of file\n"
        "diff --git a/app/out/escaped.txt b/app/out/escaped.txt\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/app/out/escaped.txt\n@@ -0,0 +1 @@\n+pwned\n"
    )
    agent = ReplayAgent([escape, through_link])
    out1 = agent.run(ctx_for(repo, tmp_path, name="r1"))
    ctx2 = ctx_for(repo, tmp_path, name="r2", state={"next": 1})
    out2 = agent.run(ctx2)
    assert out1.error and out2.error, (out1, out2)
    assert not outside.exists()
    src = Path(sys.modules[ReplayAgent.__module__].__file__).read_text()
    assert "safe.directory" not in src


# ------------------------------------------------------- the agent container


@pytest.mark.docker
def test_agent_container_outputs_are_not_trusted(repo: Path, tmp_path: Path, no_hang):
    victim = tmp_path / "victim.pth"
    victim.write_text("original\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("APP_KEY=secret\n")
    script = (
        f"ln -s {victim} /rsi/out/agent.log; ln -s {secret} /rsi/out/hypothesis.txt; "
        "mkfifo app/pipe; ln -s /etc/passwd app/pw; mkdir -p app/sub/.git; "
        "echo '[core] fsmonitor = touch /tmp/x' > app/sub/.git/config; "
        "sed -i 's/delay_ms = 25/delay_ms = 17/' app/settings.toml; "
        "(echo hacked > /rsi/TASK.md) 2>/dev/null && echo TASK-WRITABLE; "
        "echo 'RSI-HYPOTHESIS: lower the delay'"
    )
    spec = load_task(repo, None, "t")
    res = run_task(repo, spec, state_dir=tmp_path / "state", agent=CommandAgent(template=script), rounds=1,
                   verifier=RecordingVerifier())
    (c,) = res.candidates
    io = tmp_path / "state" / "rounds" / "1"
    log = (io / "agent.log").read_text()
    assert victim.read_text() == "original\n" and "TASK-WRITABLE" not in log
    assert "TASK.md" in os.listdir(io) and "hacked" not in (io / "TASK.md").read_text()
    assert c.hypothesis == "lower the delay" and "APP_KEY" not in c.hypothesis
    assert c.decision == "reject" and "app/pw: symbolic link" in c.reason, c.reason
    left = " ".join(Ledger(repo).records()[0].left_out)
    assert "app/pipe (fifo)" in left and "app/sub/.git" in left


def test_any_bytes_the_agent_writes_are_taken_not_crashed_on(repo: Path, tmp_path: Path):
    def plant(tree: Path, scratch: Path):
        (tree / "app" / "latin1.py").write_bytes(b"# caf\xe9 \x9c\xff\n")

    res, _ = run_attack(repo, tmp_path, plant)
    (c,) = res.candidates
    assert c.sha and "app/latin1.py" in sh(repo, "ls-tree", "-r", "--name-only", c.sha)
    assert c.decision in ("accept", "reject"), c.reason


# ------------------------------------------------------------- the measuring code (issue 17.6)

SERVING_CONFIG = '''\
[benchmarks.speed]
command = "{python} bench/run.py"
timeout_s = 60

[benchmarks.speed.metrics]
throughput = "higher"

[benchmarks.served]
serve = "{python} -m app.server --port 0"
ready_path = "/health"
client = "{python} tools/client.py"
evaluator = "{python} -m scoring.judge"
timeout_s = 60

[benchmarks.served.metrics]
throughput = "higher"

[objective]
benchmark = "speed"
metric = "throughput"
min_gain = 0.1

[verifier]
warmup = 0

[policy]
editable = ["**"]
protected = ["tests/**"]
max_changed_lines = 50
'''


@pytest.mark.parametrize("path", [
    "tools/client.py",        # the client script
    "tools/prompts.py",       # what the client imports from its folder
    "scoring/judge.py",       # the evaluator, module form
    "scoring/__init__.py",    # runs before it
    "app/server.py",          # the server's entry point, module form
    "bench/run.py",           # an in-process command (protected before too)
])
def test_an_agent_edit_of_the_measuring_code_is_a_policy_reject(tmp_path: Path, path: str):
    """Attack: a config that protects only ``tests/**`` and lets the agent edit
    everything; the agent makes a real speedup and also edits the code that
    measures it. Every file a benchmark's command, setup, serve, client or
    evaluator names (script or module form) is protected by default: the round
    is a policy reject naming the file, and the verifier never runs."""
    from .target import make_target

    repo = make_target(tmp_path, python=sys.executable, config=SERVING_CONFIG)
    for f in ("tools/client.py", "tools/prompts.py", "scoring/__init__.py", "scoring/judge.py",
              "app/server.py"):
        (repo / f).parent.mkdir(parents=True, exist_ok=True)
        (repo / f).write_text("# measuring code\n")
    commit_all(repo, "serving benchmark")

    def plant(tree: Path, scratch: Path):
        (tree / path).write_text("# the agent's own yardstick\n")

    res, ver = run_attack(repo, tmp_path, plant)
    (c,) = res.candidates
    assert c.decision == "reject" and path in c.reason and "protected" in c.reason, c.reason
    assert ver.seen == []  # refused before any verification


def test_the_same_open_config_accepts_an_honest_edit(tmp_path: Path):
    """The control: under the config above, a round that only edits the
    settings is verified and accepted."""
    from .target import make_target

    repo = make_target(tmp_path, python=sys.executable, config=SERVING_CONFIG)
    res, ver = run_attack(repo, tmp_path, lambda tree, scratch: None)
    (c,) = res.candidates
    assert c.decision == "accept", c.reason
    assert len(ver.seen) == 1


def test_measuring_paths_cover_every_role_and_form():
    from harness.spec import build_task, measuring_paths

    spec = build_task(SERVING_CONFIG.replace("{python}", "python"), None, "t")
    served = measuring_paths(spec.verify.benchmarks["served"])
    assert {"tools/client.py", "tools/*.py", "app/server.py", "app/__init__.py",
            "app/server/__main__.py", "scoring/judge.py", "scoring/__init__.py",
            "src/app/server.py"} <= set(served)
    assert "app/*.py" not in served  # the server's folder is the candidate's code
    protected = spec.protected_paths()
    assert {"bench/run.py", "tools/client.py", "scoring/judge.py", "tests/**"} <= set(protected)
