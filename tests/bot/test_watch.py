"""The watch after merge, against the fake GitHub (real HTTP, PyGithub
unmodified), real git and the real verifier (in process).

The task's rounds are scripted (:class:`FakeHarness`): each candidate's claimed
verdict is stored as a real ``Verdict`` (+10%, interval +5% to +20%). What the
merged code really does is decided by its files: the target's benchmark sleeps
``src/delay_ms.txt`` milliseconds per request (40 on main). A candidate that
writes 5 there is 8x faster; one that writes an unrelated file is not faster
at all. The watch measures the merge commit against its parent for real, so
whether the claim holds depends on the code, not on a script.
"""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from bot import render
from bot.harness_port import RealHarness
from bot.replies import reply_kind
from bot.tasks.rebaseline import revert_branch_name
from harness.spec import SpecError, build_task
from harness.watch import WatchOutcome, judge_watch, watch_spec
from tests.bot.fakeharness import FakeHarness
from verifier.config import VerifyConfig
from verifier.measure import hidden_env
from verifier.verdict import Decision, GuardResult, Interval, ObjectiveResult, Verdict

BOT = "rsi-bot[bot]"

BENCH = """\
import json, os, time
delay = int(open("src/delay_ms.txt").read())
n = int(os.environ.get("RSI_SETTING_REQUESTS", "1"))
lat = []
t0 = time.perf_counter()
for i in range(n):
    s = time.perf_counter()
    time.sleep(delay / 1000.0)
    lat.append(time.perf_counter() - s)
elapsed = time.perf_counter() - t0
with open(os.environ["RSI_RESULT"], "w") as fh:
    json.dump({"metrics": {"throughput": n / elapsed}, "samples": {"latency_s": lat},
               "counts": {"requests": n, "failed": 0}}, fh)
"""

CONFIG = """\
[benchmarks.speed]
command = "{python} bench.py"
timeout_s = 60
settings = {{ requests = 2 }}

[benchmarks.speed.metrics]
throughput = "higher"

[benchmarks.speed.samples]
latency_s = "lower"

[objective]
benchmark = "speed"
metric = "throughput"
min_gain = 1.0

[[guards]]
metric = "latency_p95_s"
max_ratio = 1.5

[verifier]
warmup = 0
initial_pairs = 4
step = 2
max_pairs = 8
default_guards = false

[policy]
editable = ["src/**"]

[agent]
kind = "replay"
rounds = 1
patches = ["p1.patch"]
{extra}"""


def target_tree(root: Path, extra: str = "") -> Path:
    (root / ".rsi").mkdir(parents=True, exist_ok=True)
    (root / ".rsi" / "config.toml").write_text(CONFIG.format(python=sys.executable, extra=extra))
    (root / "src").mkdir(exist_ok=True)
    (root / "src" / "delay_ms.txt").write_text("40\n")
    (root / "bench.py").write_text(BENCH)
    return root


class WatchedHarness(FakeHarness):
    """Rounds scripted (the claim: +10%, stored); the watch is the real one.
    ``faster``: the candidate really cuts the delay 40 -> 5 ms; else it
    changes a file the benchmark never reads."""

    def __init__(self, *, faster: bool):
        super().__init__(["accept"])
        self.faster = faster
        self.watched: list[str] = []

    def _commit(self, repo, base, branch, n, state_dir):
        from harness.gitutil import git

        wt = state_dir / f"wt-{n}"
        git(repo, "worktree", "add", "--force", "--detach", str(wt), base)
        try:
            if self.faster:
                (wt / "src" / "delay_ms.txt").write_text("5\n")
            else:
                (wt / "src" / "notes.txt").write_text("the cache is warm now\n")
            git(wt, "add", "-A")
            git(wt, "commit", "-q", "-m", f"change {n}")
            sha = git(wt, "rev-parse", "HEAD")
            git(repo, "branch", "-f", branch, sha)
            return sha
        finally:
            git(repo, "worktree", "remove", "--force", str(wt), check=False)

    def watch(self, repo, spec, merge_sha, *, state_dir):
        self.watched.append(merge_sha)
        return RealHarness.watch(self, repo, spec, merge_sha, state_dir=state_dir)


@pytest.fixture(autouse=True)
def _in_process(monkeypatch):
    monkeypatch.setenv("RSI_VERIFY_MODE", "inprocess")


def make_target(make_repo, fake_github, tmp_path, extra: str = "",
                full_name: str = "acme/target") -> str:
    repo = make_repo(target_tree(tmp_path / "seed", extra), full_name)
    fake_github.set_role(repo, "alice", "write")
    return repo


def labelled_candidate(make_bot, fake_github, repo, harness):
    """alice's issue labelled ``rsi`` -> the bot's one candidate PR; returns (bot, the PR)."""
    bot = make_bot(harness)
    n = fake_github.open_issue(repo, "Faster", "Make it faster.", by="alice")
    bot.deliver(fake_github.label_issue(repo, n, "rsi", by="alice"))
    (pull,) = fake_github.pulls(repo)
    return bot, pull


def merged_candidate(make_bot, fake_github, repo, harness):
    """Label -> one candidate PR (claim +10%) -> merged by alice; returns
    (bot, the PR, the merge event, the merge commit)."""
    bot, pull = labelled_candidate(make_bot, fake_github, repo, harness)
    claim = bot.store.candidate_by_pr(repo, pull.number)[1].verdict
    assert claim["objective"]["ratio_ci"] == {"low": 1.05, "high": 1.2, "level": 0.95}
    ev = fake_github.merge_pull(repo, pull.number, by="alice")
    bot.deliver(ev)
    merge = fake_github.pull(repo, pull.number).pull.merge_commit_sha
    return bot, pull, ev, merge


def watch_comments(fake_github, repo, number, merge):
    mark = render.marker(reply_kind(f"watch-{merge[:12]}", "report"))
    return [c for c in fake_github.comments(repo, number)
            if c.user.login == BOT and mark in c.body]


def revert_pulls(fake_github, repo):
    return [p for p in fake_github.pulls(repo, state="all")
            if p.pull.head_ref.startswith("rsi-revert/")]


def test_a_merged_claim_that_does_not_reproduce_gets_a_comment_and_a_revert_pr(
        make_bot, fake_github, make_repo, tmp_path):
    repo = make_target(make_repo, fake_github, tmp_path)
    harness = WatchedHarness(faster=False)
    bot, pull, ev, merge = merged_candidate(make_bot, fake_github, repo, harness)
    assert harness.watched == [merge]
    (job,) = bot.store.jobs(kind="rebaseline")
    assert job.state == "done" and "watch: failed (hidden seed " in job.result, (job.result, [j.last_error for j in bot.store.jobs()])
    assert f"), revert #{revert_pulls(fake_github, repo)[0].number}" in job.result

    # the comment on the merged PR: why, and both reports side by side
    (comment,) = watch_comments(fake_github, repo, pull.number, merge)
    assert "claim did not hold" in comment.body
    # not faster at all: the watch's interval is far below min_gain (+100%; the real
    # change is 8x, +700%); whether it is also below the claim's +5% is up to noise
    assert "lies wholly below min_gain +100.0%" in comment.body
    assert "| interval | [+5.0%, +20.0%] |" in comment.body
    # the claim (scripted) recorded no settings; the watch ran the client with 4x 2 requests
    assert "| requests per run | — | 8 (4x) |" in comment.body
    print("\nWATCH COMMENT:\n" + comment.body)
    assert "(fresh draw)" in comment.body and "The watch's full report" in comment.body

    # the revert PR: a real revert of the merge, labelled, with the evidence
    (rev,) = revert_pulls(fake_github, repo)
    assert f"Opened #{rev.number} to revert it" in comment.body
    assert rev.pull.head_ref == revert_branch_name(pull.number) and rev.pull.base_ref == "main"
    assert rev.user.login == BOT and not rev.pull.draft
    assert rev.title.startswith(f"Revert #{pull.number} (gain did not reproduce after merge): ")
    assert rev.body.startswith(f"Reverts #{pull.number} (merge commit `{merge[:12]}`")
    assert "lies wholly below min_gain +100.0%" in rev.body
    assert "| gain (throughput vs Bk) | +10.0% |" in rev.body
    assert render.REVERT_LABEL in rev.labels
    assert fake_github.repo(repo).label_meta[render.REVERT_LABEL][1] == render.REVERT_LABEL_TEXT
    head = fake_github.branch_sha(repo, rev.pull.head_ref)
    parent = fake_github.git(repo, "rev-parse", f"{merge}^1").strip()
    assert fake_github.git(repo, "rev-parse", f"{head}^1").strip() == merge
    assert fake_github.git(repo, "diff", "--name-only", parent, head).strip() == ""
    assert fake_github.git(repo, "diff", "--name-only", merge, head).strip() == "src/notes.txt"
    print("\nREVERT PR TITLE:", rev.title, "\nREVERT PR BODY:\n" + rev.body)

    # a redelivery of the merge, then the job itself run again: nothing new
    bot.deliver(ev)
    bot.store.enqueue("rebaseline", dict(job.payload), lane=f"task:{job.payload['task_id']}",
                      key="rebaseline:again")
    bot.drain()
    assert harness.watched == [merge]  # not measured again
    assert len(revert_pulls(fake_github, repo)) == 1
    assert len(watch_comments(fake_github, repo, pull.number, merge)) == 1
    assert not bot.store.jobs(state="failed")


def test_a_merged_claim_that_reproduces_gets_neither(make_bot, fake_github, make_repo, tmp_path):
    repo = make_target(make_repo, fake_github, tmp_path)
    harness = WatchedHarness(faster=True)
    bot, pull, _, merge = merged_candidate(make_bot, fake_github, repo, harness)
    assert harness.watched == [merge]
    (job,) = bot.store.jobs(kind="rebaseline")
    assert job.state == "done" and "; watch: reproduced (hidden seed " in job.result, job.result
    assert watch_comments(fake_github, repo, pull.number, merge) == []
    assert revert_pulls(fake_github, repo) == []


def test_comment_only_and_off(make_bot, fake_github, make_repo, tmp_path):
    repo = make_target(make_repo, fake_github, tmp_path,
                       extra='\n[bot]\non_failed_watch = "comment"\n')
    harness = WatchedHarness(faster=False)
    bot, pull, _, merge = merged_candidate(make_bot, fake_github, repo, harness)
    (comment,) = watch_comments(fake_github, repo, pull.number, merge)
    assert 'sets `[bot] on_failed_watch = "comment"`' in comment.body
    assert revert_pulls(fake_github, repo) == []

    repo2 = make_target(make_repo, fake_github, tmp_path / "off",
                        extra='\n[bot]\non_failed_watch = "off"\n', full_name="acme/other")
    harness2 = WatchedHarness(faster=False)
    bot2, pull2, _, merge2 = merged_candidate(make_bot, fake_github, repo2, harness2)
    assert harness2.watched == []  # only rebaselined
    assert bot2.store.find_task(repo2, 1).bk_sha == merge2
    assert watch_comments(fake_github, repo2, pull2.number, merge2) == []


def test_a_merge_the_bot_did_not_open_is_not_watched(make_bot, fake_github, make_repo, tmp_path):
    """alice opens a PR from a branch named like ours; merged, it is not watched."""
    repo = make_target(make_repo, fake_github, tmp_path)
    harness = WatchedHarness(faster=False)
    bot = make_bot(harness)
    fake_github.commit_files(repo, "rsi/1/1", {"src/notes.txt": "mine\n"})
    r = httpx.post(f"{fake_github.url}/repos/{repo}/pulls",
                   headers={"Authorization": f"token {fake_github.token_for('alice')}"},
                   json={"title": "Mine", "head": "rsi/1/1", "base": "main", "body": ""})
    assert r.status_code == 201, r.text
    number = r.json()["number"]
    d = bot.deliver(fake_github.merge_pull(repo, number, by="alice"))
    assert bot.result_of(d).startswith("ignored")
    assert harness.watched == [] and bot.store.jobs(kind="rebaseline") == []
    assert revert_pulls(fake_github, repo) == []


# ------------------------------------------------------------------ the pieces


def _verdict(gain_ci: tuple[float, float] | None, *, decision: str = "accept",
             guards: tuple[GuardResult, ...] = ()) -> Verdict:
    obj = None if gain_ci is None else ObjectiveResult(
        benchmark="speed", metric="throughput", direction="higher", ratio=1 + sum(gain_ci) / 2,
        gain=sum(gain_ci) / 2, gain_ci=Interval(low=gain_ci[0], high=gain_ci[1]), min_gain=0.1)
    return Verdict(schema="rsi.verdict/1", decision=Decision(decision), reason="r", benchmark="speed",
                   objective=obj, guards=guards, pairs=6, runs=12)


def test_judge_watch_rules():
    claim = _verdict((0.20, 0.40))
    assert judge_watch(claim, _verdict((0.15, 0.30)), 0.1).outcome == WatchOutcome.REPRODUCED
    low = judge_watch(claim, _verdict((0.12, 0.18)), 0.1)
    assert low.outcome == WatchOutcome.FAILED and "claimed interval's lower bound" in low.reasons[0]
    small = judge_watch(None, _verdict((-0.02, 0.08)), 0.1)
    assert small.outcome == WatchOutcome.FAILED and "min_gain" in small.reasons[0]
    guard = GuardResult(name="latency_p95_s <= 1.05x", kind="ratio", metric="latency_p95_s",
                        bound="<= 1.05x", value=1.3, status="fail")
    g = judge_watch(claim, _verdict((0.25, 0.35), decision="reject", guards=(guard,)), 0.1)
    assert g.outcome == WatchOutcome.FAILED and g.reasons == (
        "guard latency_p95_s <= 1.05x failed (measured 1.3, bound <= 1.05x)",)
    err = judge_watch(claim, _verdict(None, decision="error"), 0.1)
    assert err.outcome == WatchOutcome.INCONCLUSIVE


def test_watch_spec_draws_the_hidden_seed_and_scales_the_requests(monkeypatch):
    cfg = CONFIG.format(python="python", extra='\n[hidden]\nseed_env = "EVAL_SEED"\n')
    spec = build_task(cfg, None, "7")
    wspec, requests = watch_spec(spec, seed=12345, factor=4)
    assert requests == {"speed": 8} and wspec.verify.benchmarks["speed"].settings["requests"] == 8
    monkeypatch.setenv("EVAL_SEED", "999")
    for config in (wspec.verify, VerifyConfig.from_toml(wspec.verifier_config_text())):
        env, drop = hidden_env(config)
        assert env["RSI_SEED"] == "12345" and drop == ("EVAL_SEED",)
    assert spec.verify.benchmarks["speed"].settings["requests"] == 2  # the task's own is untouched


def test_bot_section_is_validated_and_the_repo_cannot_fix_the_hidden_seed():
    with pytest.raises(SpecError) as e:
        build_task(CONFIG.format(python="python", extra='\n[bot]\non_failed_watch = "revert"\n'),
                   None, "7")
    assert any(x.startswith("[bot] on_failed_watch:") and "revert-pr" in x for x in e.value.errors)
    assert build_task(CONFIG.format(python="python", extra=""), None, "7"
                      ).bot.on_failed_watch == "revert-pr"
    with pytest.raises(SpecError) as e:
        build_task(CONFIG.format(python="python", extra="\n[hidden]\nseed = 5\n"), None, "7")
    assert any("[hidden] seed: not allowed" in x for x in e.value.errors)
    # an issue author cannot turn the watch off
    with pytest.raises(SpecError) as e:
        build_task(CONFIG.format(python="python", extra=""),
                   '```toml\n[bot]\non_failed_watch = "off"\n```', "7")
    assert any(x.startswith("proposal [bot]: not allowed in a proposal") for x in e.value.errors)


def test_the_watch_measures_the_whole_matrix_with_more_pairs():
    from harness.watch import MATRIX_PAIRS_FACTOR, _whole_matrix

    config = {"benchmarks": {"tts": {"matrix": {"concurrency": [2, 4], "pairs": 2}},
                             "big": {"matrix": {"cpus": ["0", "0-1"], "pairs": 20}},
                             "plain": {"command": "x"}}}
    _whole_matrix(config)
    assert config["benchmarks"]["tts"]["matrix"] == {"concurrency": [2, 4],
                                                     "pairs": 2 * MATRIX_PAIRS_FACTOR}
    assert config["benchmarks"]["big"]["matrix"]["pairs"] == 30  # the matrix's own cap
    assert "matrix" not in config["benchmarks"]["plain"]


def test_a_guard_failed_in_another_matrix_cell_fails_the_watch():
    import verifier.verdict as vv

    cell_result = getattr(vv, "CellResult", None)
    if cell_result is None:
        pytest.skip("the deployment matrix (issue 22 item 1) is not merged on this branch")
    guard = GuardResult(name="latency_p95_s <= 1.05x", kind="ratio", metric="latency_p95_s",
                        bound="<= 1.05x", value=1.4, status="fail")
    cells = (cell_result(setting={"concurrency": 2}, primary=True, pairs=8, metric="throughput"),
             cell_result(setting={"concurrency": 32}, pairs=4, metric="throughput",
                         guards=(guard,)))
    watched = _verdict((0.25, 0.35)).model_copy(update={"cells": cells})
    f = judge_watch(_verdict((0.20, 0.40)), watched, 0.1)
    assert f.outcome == WatchOutcome.FAILED
    assert f.reasons == ("guard latency_p95_s <= 1.05x failed in the matrix cell concurrency=32",)


def test_a_runners_watch_must_name_the_merge_this_job_names():
    """The actions executor: a runner's watch of another commit is dropped."""
    from bot.tasks.rebaseline import _runner_watch
    from harness.watch import WatchResult

    w = WatchResult(merge_sha="a" * 40, parent_sha="b" * 40, hidden_seed=3, requests_factor=4,
                    verdict=_verdict((0.1, 0.2)))
    raw = w.model_dump(mode="json", by_alias=True)
    assert _runner_watch(raw, "a" * 40) == w
    assert "not the merge" in str(_runner_watch(raw, "c" * 40))
    assert "not valid" in str(_runner_watch({"merge_sha": 1}, "a" * 40))
    assert _runner_watch(None, "a" * 40) is None


def test_someone_elses_pr_on_the_revert_branch_is_never_pushed_over(
        make_bot, fake_github, make_repo, tmp_path):
    """alice squats the revert branch with her own open PR before the merge: the
    bot does not force-push over it and says why there is no revert PR."""
    repo = make_target(make_repo, fake_github, tmp_path)
    bot, pull = labelled_candidate(make_bot, fake_github, repo, WatchedHarness(faster=False))
    branch = revert_branch_name(pull.number)
    mine = fake_github.commit_files(repo, branch, {"README.md": "alice's work\n"})
    r = httpx.post(f"{fake_github.url}/repos/{repo}/pulls",
                   headers={"Authorization": f"token {fake_github.token_for('alice')}"},
                   json={"title": "Mine", "head": branch, "base": "main", "body": ""})
    assert r.status_code == 201, r.text
    bot.deliver(fake_github.merge_pull(repo, pull.number, by="alice"))
    merge = fake_github.pull(repo, pull.number).pull.merge_commit_sha
    assert fake_github.branch_sha(repo, branch) == mine
    assert [p.user.login for p in revert_pulls(fake_github, repo)] == ["alice"]
    (comment,) = watch_comments(fake_github, repo, pull.number, merge)
    assert "No revert PR: " in comment.body and "a PR the bot did not open" in comment.body
    assert not bot.store.jobs(state="failed")


def test_a_fork_pr_from_the_revert_branch_name_does_not_stop_the_revert(
        make_bot, fake_github, make_repo, tmp_path):
    """Issue 30's low: mallory opens a PR from a branch named ``rsi-revert/<N>`` of her
    fork before the merge. That branch is not this repository's: the bot still opens
    its own revert PR (labelled, review asked), and the watch comment links it."""
    repo = make_target(make_repo, fake_github, tmp_path)
    bot, pull = labelled_candidate(make_bot, fake_github, repo, WatchedHarness(faster=False))
    fork_pr = fake_github.open_fork_pull(repo, revert_branch_name(pull.number),
                                         {"src/notes.txt": "mine\n"}, by="mallory")
    assert fake_github.pull(repo, fork_pr).pull.head_repo == f"mallory/{repo.split('/')[1]}"
    bot.deliver(fake_github.merge_pull(repo, pull.number, by="alice"))
    merge = fake_github.pull(repo, pull.number).pull.merge_commit_sha
    revs = revert_pulls(fake_github, repo)
    ours = [p for p in revs if p.user.login == BOT]
    assert sorted(p.number for p in revs) == sorted([fork_pr, ours[0].number]), revs
    (rev,) = ours
    assert render.REVERT_LABEL in rev.labels and rev.pull.head_repo is None
    assert [u.login for u in rev.pull.requested_reviewers] == ["alice"]
    (comment,) = watch_comments(fake_github, repo, pull.number, merge)
    assert f"Opened #{rev.number} to revert it" in comment.body
    assert "did not open" not in comment.body
