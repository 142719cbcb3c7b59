"""The onboarding PR, driven by recorded installation payloads against the
fake GitHub: one PR with rsi init's files where no config is, never twice,
never where a config exists, never through a link in the repository."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from bot.handlers.onboarding import BRANCH, TITLE
from harness.onboard import FILES
from harness.spec import CONFIG_PATH, build_task
from tests.bot._support import load_payload
from tests.bot.fakeharness import FakeHarness
from tests.fakegithub.server import WebhookEvent
from tests.harness import target


def _seed(tmp_path: Path, name: str, files: dict[str, str]) -> Path:
    src = tmp_path / name
    for rel, text in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    return src


def _created(fake_github, repos: list[str]) -> WebhookEvent:
    p = load_payload("installation", "created")
    p["installation"]["id"] = fake_github.installation_id(repos[0])
    p["repositories"] = [{"full_name": r, "name": r.split("/")[1], "private": False} for r in repos]
    return WebhookEvent("installation", p)


def _added(fake_github, repos: list[str]) -> WebhookEvent:
    p = load_payload("installation_repositories", "added")
    p["installation"]["id"] = fake_github.installation_id(repos[0])
    p["repositories_added"] = [{"full_name": r, "name": r.split("/")[1]} for r in repos]
    return WebhookEvent("installation_repositories", p)


def _onboarding_pulls(fake_github, repo: str, state: str = "all"):
    return [p for p in fake_github.pulls(repo, state) if p.pull.head_ref == BRANCH]


def test_installation_opens_one_onboarding_pr(make_bot, make_repo, fake_github, tmp_path):
    repo = make_repo(_seed(tmp_path, "t", {"bench/run.py": target.BENCH, "README.md": "x\n"}))
    bot = make_bot(FakeHarness())
    d = bot.deliver(_created(fake_github, [repo]))
    assert f"{repo}: opened #" in bot.result_of(d)
    [pr] = _onboarding_pulls(fake_github, repo)
    assert pr.title == TITLE and not pr.pull.draft and pr.pull.base_ref == "main"
    assert "`python bench/run.py` was detected" in pr.body and "`throughput`" in pr.body
    shown = {f: fake_github.git(repo, "show", f"{BRANCH}:{f}") for f in FILES}
    spec = build_task(shown[CONFIG_PATH], None, "t")
    assert spec.benchmark.command == "python bench/run.py"
    assert tomllib.loads(shown[CONFIG_PATH])["benchmarks"]["main"]["samples"] == {"latency_s": "lower"}
    assert "uses: rsi-bot/rsi-bot/.github/workflows/rsi-job.yml@v" in shown[FILES[1]]
    assert fake_github.git(repo, "rev-parse", f"{BRANCH}~1") == fake_github.branch_sha(repo, "main")

    # a redelivery, or the repository added again: no second PR, even once closed
    again = bot.deliver(_added(fake_github, [repo]))
    assert "onboarding PR exists" in bot.result_of(again)
    fake_github.close_pull(repo, pr.number, by="acme")
    bot.deliver(_created(fake_github, [repo]))
    assert len(_onboarding_pulls(fake_github, repo)) == 1
    assert not bot.store.jobs(state="failed")


def test_no_pr_where_a_config_exists_and_a_placeholder_where_nothing_is_detected(
        make_bot, make_repo, fake_github, tmp_path):
    configured = make_repo(_seed(tmp_path, "c", {CONFIG_PATH: "x = 1\n"}), full_name="acme/configured")
    bare = make_repo(_seed(tmp_path, "b", {"README.md": "x\n"}), full_name="acme/bare")
    bot = make_bot(FakeHarness())
    d = bot.deliver(_added(fake_github, [configured, bare]))
    result = bot.result_of(d)
    assert f"{configured}: has {CONFIG_PATH}" in result and f"{bare}: opened #" in result
    assert _onboarding_pulls(fake_github, configured) == []
    [pr] = _onboarding_pulls(fake_github, bare)
    assert "No benchmark was found" in pr.body
    build_task(fake_github.git(bare, "show", f"{BRANCH}:{CONFIG_PATH}"), None, "t")


def test_links_in_the_repository_are_never_followed(make_bot, make_repo, fake_github, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.py").write_text('{"metrics": {"leaked_secret": 1}}  # RSI_RESULT\n')
    src = _seed(tmp_path, "l", {"README.md": "x\n"})
    (src / "bench").mkdir()
    os.symlink(outside / "secret.py", src / "bench" / "run.py")
    os.symlink(outside, src / ".github")
    repo = make_repo(src, full_name="acme/links")
    bot = make_bot(FakeHarness())
    d = bot.deliver(_created(fake_github, [repo]))
    assert "symbolic link" in bot.result_of(d)
    assert sorted(p.name for p in outside.iterdir()) == ["secret.py"]
    assert _onboarding_pulls(fake_github, repo) == []


def test_unknown_repositories_are_skipped_not_failed(make_bot, fake_github, make_repo):
    repo = make_repo()
    bot = make_bot(FakeHarness())
    d = bot.deliver(_created(fake_github, [repo, "ghost/nowhere"]))
    assert "ghost/nowhere: skipped" in bot.result_of(d)
    assert not bot.store.jobs(state="failed")


def test_install_onboard_merge_then_a_labelled_proposal_starts_a_task(
        make_bot, make_repo, fake_github, tmp_path):
    """The adopter's path: install -> onboarding PR -> merge -> proposal from the
    form the PR added -> label -> a task built from the onboarded config."""
    from tests.bot.test_github_files import render_form

    repo = make_repo(_seed(tmp_path, "p", {"bench/run.py": target.BENCH, "README.md": "x\n"}))
    fake_github.set_role(repo, "alice", "write")
    harness = FakeHarness(["reject"])
    bot = make_bot(harness)
    bot.deliver(_created(fake_github, [repo]))
    [pr] = _onboarding_pulls(fake_github, repo)
    bot.deliver(fake_github.merge_pull(repo, pr.number, by="acme"))
    assert fake_github.git(repo, "show", f"main:{CONFIG_PATH}").startswith("#:schema ")

    body = render_form({"Idea": "Cache the model.", "Minimum gain": "10%",
                        "Budget (rounds)": "1"})
    n = fake_github.open_issue(repo, "Faster", body, by="alice")
    bot.deliver(fake_github.label_issue(repo, n, "rsi", by="alice"))
    assert ("run_task", str(n)) in harness.calls
    assert harness.proposals[-1] == body
    task = bot.store.find_task(repo, n)
    assert task is not None and task.proposal == body


def test_repositories_the_bot_does_not_serve_are_left_alone(make_bot, make_repo, fake_github):
    repo = make_repo()
    bot = make_bot(FakeHarness(), allowed_repos="acme/other,elsewhere/*")
    d = bot.deliver(_created(fake_github, [repo]))
    assert f"{repo}: not in RSI_ALLOWED_REPOS" in bot.result_of(d)
    assert _onboarding_pulls(fake_github, repo) == []


def test_onboarding_off_opens_nothing(make_bot, make_repo, fake_github, tmp_path):
    repo = make_repo(_seed(tmp_path, "o", {"bench/run.py": target.BENCH, "README.md": "x\n"}))
    bot = make_bot(FakeHarness(), onboarding=False)
    d = bot.deliver(_created(fake_github, [repo]))
    assert bot.result_of(d).startswith("installation") and "onboarding" not in bot.result_of(d)
    assert _onboarding_pulls(fake_github, repo) == []


def test_a_committed_symlinked_directory_is_not_read(make_bot, make_repo, fake_github, tmp_path):
    """Issue 18: ``bench -> /some/host/dir`` committed as a link. Detection reads
    the git tree, where ``bench`` is a link blob and ``bench/*.py`` does not
    exist: nothing of the host directory reaches the onboarding PR."""
    outside = tmp_path / "host-dir"
    outside.mkdir()
    (outside / "run.py").write_text('{"metrics": {"leaked_host_secret": 1}}  # RSI_RESULT\n')
    src = _seed(tmp_path, "d", {"README.md": "x\n", "Makefile": "bench:\n\tpython x.py\n"})
    os.symlink(outside, src / "bench")
    repo = make_repo(src, full_name="acme/dirlink")
    bot = make_bot(FakeHarness())
    d = bot.deliver(_created(fake_github, [repo]))
    assert f"{repo}: opened #" in bot.result_of(d)
    [pr] = _onboarding_pulls(fake_github, repo)
    config = fake_github.git(repo, "show", f"{BRANCH}:{CONFIG_PATH}")
    assert "leaked_host_secret" not in pr.body + config and "bench/run.py" not in pr.body
    assert "`make bench` was detected" in pr.body  # the Makefile, a real blob, still counts
