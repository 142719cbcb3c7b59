"""Issue 12, the adopter's whole path in one test, against the fake GitHub over
real HTTP (PyGithub unmodified, real git, the real spec builder):

install the App -> the onboarding PR carries ``rsi init``'s files -> merge ->
a proposal from the issue form the PR added -> label -> the ``rsi/verifier``
check goes queued -> in progress -> completed with a details URL -> the report
on the candidate's PR links its commits, compare views and ledger and says how
to reproduce it -> the check's details URL opened in a real headless Chromium
shows the task page.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from bot.handlers.onboarding import BRANCH
from harness.onboard import FILES
from harness.spec import CONFIG_PATH
from tests.bot.fakeharness import FakeHarness
from tests.bot.test_github_files import render_form
from tests.bot.test_onboarding import _created, _onboarding_pulls, _seed
from tests.bot.test_web import TOKEN, _png_size, chromium
from tests.harness import target

CHECK = "rsi/verifier"
#: a repository with a benchmark script that `rsi init` detects, and code under src/
SEED = {"bench/run.py": target.BENCH, "README.md": "x\n", "src/speed.txt": "speed = 1\n"}


def _init_files_match_the_cli(repo_files: dict[str, str], tmp_path: Path) -> None:
    """The onboarding PR holds exactly what ``rsi init --yes`` writes locally."""
    from typer.testing import CliRunner

    from bot.cli import build_app

    local = _seed(tmp_path, "local", SEED)
    res = CliRunner().invoke(build_app(), ["init", "--repo", str(local), "--yes"])
    assert res.exit_code == 0, res.output
    for rel in FILES:
        assert (local / rel).read_text().rstrip("\n") == repo_files[rel].rstrip("\n"), rel


@pytest.mark.chromium
def test_install_to_a_verified_pr_and_its_page(make_bot, make_repo, fake_github, live_app,
                                               tmp_path):
    from tests.bot._support import free_port

    repo = make_repo(_seed(tmp_path, "t", SEED))
    fake_github.set_role(repo, "alice", "write")
    port = free_port()
    bot = make_bot(FakeHarness(["accept"]), public_url=f"http://127.0.0.1:{port}",
                   web_enabled=True, web_token=TOKEN)

    # 1. install -> onboarding PR with init's files -> merged by a maintainer
    bot.deliver(_created(fake_github, [repo]))
    [onboarding] = _onboarding_pulls(fake_github, repo)
    files = {f: fake_github.git(repo, "show", f"{BRANCH}:{f}") for f in FILES}
    _init_files_match_the_cli(files, tmp_path)
    bot.deliver(fake_github.merge_pull(repo, onboarding.number, by="acme"))
    assert fake_github.git(repo, "show", f"main:{CONFIG_PATH}") == files[CONFIG_PATH]  # merged as is
    base = fake_github.branch_sha(repo, "main")

    # 2. a proposal from the form, labelled: the check is queued before any work
    body = render_form({"Idea": "Cache the model.", "Minimum gain": "10%", "Budget (rounds)": "1"})
    n = fake_github.open_issue(repo, "Faster decode", body, by="alice")
    bot.deliver(fake_github.label_issue(repo, n, "rsi", by="alice"), drain=False)
    assert bot.worker.run_once()
    (check,) = fake_github.check_runs(repo, base, CHECK)
    task = bot.store.find_task(repo, n)
    details = f"http://127.0.0.1:{port}/tasks/{task.id}"
    assert check.status == "queued" and check.details_url == details

    # 3. the work: in progress with progress text, then completed
    bot.drain()
    sent = [q.json for q in fake_github.requests_to("PATCH", re.compile(rf".*/check-runs/{check.id}$"))]
    assert sent[0]["status"] == "in_progress"
    assert any("round 1/1" in p.get("output", {}).get("title", "") for p in sent)
    assert check.status == "completed" and check.conclusion == "success"
    assert bot.store.find_task(repo, n).state == "finished"

    # 4. the candidate's PR: its report links commits, compare views, the ledger
    [pr] = [p for p in fake_github.pulls(repo) if p.number != onboarding.number]
    report = next(c.body for c in fake_github.comments(repo, pr.number) if "Reproduce locally" in c.body)
    head = pr.pull.head_sha
    assert re.search(rf"\[`[0-9a-f]{{12}}`\]\([^)]*/{repo}/commit/[0-9a-f]{{40}}\)", report)
    assert re.search(rf"\(http[^)]*/{repo}/compare/[0-9a-f]{{40}}\.\.\.[0-9a-f]{{40}}\)", report)
    assert re.search(rf"\[ledger\]\([^)]*/{repo}/blob/[^)]+/ledger\.jsonl\)", report)
    assert f"git fetch origin {pr.pull.head_ref}" in report and "rsi verify " in report
    assert f"[task page]({details})" in report
    (cand_check,) = fake_github.check_runs(repo, head, CHECK)
    assert cand_check.conclusion == "success" and cand_check.details_url == details

    # 5. the details URL in a real browser: the page reads the store only
    from bot.app import create_app

    settings = bot.ctx.settings
    shot = tmp_path / "path-page.png"
    with live_app(create_app(settings, store=bot.store), port=port):
        common = [chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                  "--disable-dev-shm-usage", "--no-first-run", "--hide-scrollbars",
                  f"--user-data-dir={tmp_path / 'profile'}"]
        url = f"{details}?token={TOKEN}"
        dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True,
                             timeout=120)
        shoot = subprocess.run([*common, "--window-size=1280,1400", f"--screenshot={shot}", url],
                               capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'id="status" class="status finished"' in dom.stdout
    assert dom.stdout.count('class="candidate"') == 1 and repo in dom.stdout
    assert shoot.returncode == 0 and _png_size(shot.read_bytes()) == (1280, 1400)
