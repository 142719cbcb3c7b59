"""Issue 12, the read-only task page ``/tasks/<id>``: off unless enabled, behind a
token, the database only (the app below has no GitHub port at all), every
outside string escaped; and the page as a real headless Chromium renders it
from a real uvicorn server, screenshot included."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import httpx
import pytest

from bot.app import create_app
from bot.web import COOKIE, cookie_value
from tests.bot._support import free_port
from tests.bot.fakeharness import FakeHarness, target_tree

TOKEN = "page-token-0123456789"
EVIL = "<script>alert(1)</script><img src=x onerror=alert(2)>"


@pytest.fixture
def finished_task(make_bot, make_repo, fake_github, tmp_path):
    """A task that ran two rounds (one kept, one rolled back) with a hostile hypothesis;
    the bot's public URL is where ``serve`` will listen."""
    repo = make_repo(target_tree(tmp_path / "seed"))
    fake_github.set_role(repo, "alice", "write")
    harness = FakeHarness(["accept", "reject"])
    harness.hypothesis = EVIL
    port = free_port()
    bot = make_bot(harness, public_url=f"http://127.0.0.1:{port}", web_enabled=True,
                   web_token=TOKEN)
    bot.port = port
    n = fake_github.open_issue(repo, "Faster", "x", by="alice")
    bot.deliver(fake_github.label_issue(repo, n, "rsi", by="alice"))
    task = bot.store.find_task(repo, n)
    assert task.state == "finished"
    return bot, task


def serve(bot, live_app, **overrides):
    """The web process alone: no GitHub port exists in it (the page reads the store)."""
    settings = bot.ctx.settings.model_copy(update=overrides)
    return live_app(create_app(settings, store=bot.store), port=bot.port)


def test_off_unless_enabled(finished_task, live_app):
    bot, task = finished_task
    with serve(bot, live_app, web_enabled=False) as server:
        r = httpx.get(f"{server.url}/tasks/{task.id}", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 404


def test_token_required_and_traded_for_a_cookie(finished_task, live_app):
    bot, task = finished_task
    with serve(bot, live_app) as server, httpx.Client(base_url=server.url) as c:
        assert c.get(f"/tasks/{task.id}").status_code == 401
        assert c.get(f"/tasks/{task.id}", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.get(f"/tasks/{task.id}?token=wrong").status_code == 401
        r = c.get(f"/tasks/{task.id}?token={TOKEN}")
        assert r.status_code == 303 and r.headers["location"] == f"/tasks/{task.id}"
        assert r.cookies[COOKIE] == cookie_value(TOKEN) and TOKEN not in r.headers["set-cookie"]
        assert "httponly" in r.headers["set-cookie"].lower()
        r = c.get(f"/tasks/{task.id}")  # the cookie alone now
        assert r.status_code == 200 and "rsi task" in r.text
        assert c.get("/tasks/99999").status_code == 404


def test_page_shows_status_candidates_chart_ledger_escaped(finished_task, live_app):
    bot, task = finished_task
    with serve(bot, live_app) as server:
        r = httpx.get(f"{server.url}/tasks/{task.id}", headers={"Authorization": f"Bearer {TOKEN}"})
    page = r.text
    assert r.status_code == 200
    assert "script-src" not in r.headers["content-security-policy"]  # default-src 'none'
    assert r.headers["x-frame-options"] == "DENY"
    assert 'id="status" class="status finished"' in page and "🏁 finished" in page
    assert page.count('<tr class="candidate"') == 2
    assert "<svg" in page and page.count('<rect class="bar') == 2
    assert 'class="bar rolled_back"' in page and 'class="bar open"' in page
    assert "Ledger (2 records)" in page and "Reproduce locally" in page
    assert "<script" not in page and "<img" not in page and "&lt;script&gt;" in page
    assert f"/{task.repo}/pull/" in page  # links to the PRs, from the store's numbers


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.chromium
def test_page_in_headless_chromium(finished_task, live_app, fake_github, tmp_path):
    """The check's details link, opened in a real browser, shows the task."""
    bot, task = finished_task
    browser = chromium()
    shot = tmp_path / "task-page.png"
    details = {c.details_url for c in fake_github.check_runs(task.repo, name="rsi/verifier")}
    assert details == {f"http://127.0.0.1:{bot.port}/tasks/{task.id}"}
    with serve(bot, live_app):
        url = f"{details.pop()}?token={TOKEN}"
        common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--no-first-run", "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}"]
        dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True,
                             timeout=120)
        shoot = subprocess.run([*common, "--window-size=1280,1800", f"--screenshot={shot}", url],
                               capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'id="status" class="status finished"' in dom.stdout  # the DOM after the redirect
    assert "🏁 finished" in dom.stdout and dom.stdout.count('class="candidate"') == 2
    assert shoot.returncode == 0 and shot.is_file(), shoot.stderr[-2000:]
    data = shot.read_bytes()
    assert _png_size(data) == (1280, 1800) and len(data) > 20_000  # not a blank page
    keep = os.environ.get("RSI_SCREENSHOT_DIR")
    if keep:  # CI keeps it as an artifact
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / "task-page.png")


def test_github_login_opens_the_pages_of_readable_repos(finished_task, live_app, fake_github,
                                                        fake_app):
    bot, task = finished_task
    cid, secret = fake_github.oauth_client(fake_app)
    elsewhere = bot.store.start_task("acme/elsewhere", 9, labeler="x", installation_id=None)
    fake_github.clear_requests()
    with serve(bot, live_app, web_token=[], web_oauth_client_id=cid,
               web_oauth_client_secret=secret) as server, \
            httpx.Client(base_url=server.url) as c:
        r = c.get(f"/tasks/{task.id}")
        assert r.status_code == 303 and r.headers["location"] == f"/auth/login?next=/tasks/{task.id}"
        r = c.get(r.headers["location"])
        assert r.status_code == 303 and r.headers["location"].startswith(
            f"{fake_github.url}/login/oauth/authorize?client_id={cid}&")
        back = fake_github.oauth_consent(r.headers["location"], by="alice")
        assert back.startswith(f"{server.url}/auth/callback?code=")
        r = c.get(back)
        assert r.status_code == 303 and r.headers["location"] == f"/tasks/{task.id}"
        r = c.get(f"/tasks/{task.id}")
        assert r.status_code == 200 and 'id="status" class="status finished"' in r.text
        assert c.get(f"/tasks/{elsewhere.id}").status_code == 403  # not readable by alice
        assert c.get(back).status_code == 400  # the state cookie is spent: no replay
        forged = c.cookies.get("rsi_session")
        c.cookies.set("rsi_session", forged[:-4] + "0000", domain="127.0.0.1", path="/")
        assert c.get(f"/tasks/{task.id}").status_code == 303  # a forged session: log in again
    # GitHub was called at login only (never for a page view), as alice, never as the App
    calls = [(q.method, re.sub(r"/\d+/", "/N/", q.path)) for q in fake_github.requests]
    assert sorted(set(calls)) == [("GET", "/user"), ("GET", "/user/installations"),
                                  ("GET", "/user/installations/N/repositories"),
                                  ("POST", "/login/oauth/access_token")]
    assert len(fake_github.requests_to("POST", "/login/oauth/access_token")) == 1


def test_task_summary_is_a_list_with_only_bold_and_code_as_tags():
    from bot.web import summary_html

    out = summary_html("- **objective**: `throughput` of <b>x</b>\n- **agent**: **<script>x</script>**\n")
    assert out.startswith('<ul class="summary"><li><strong>objective</strong>: <code>throughput</code>')
    assert out.count("<li>") == 2 and "<b>" not in out and "<script" not in out
    assert "<strong>&lt;script&gt;x&lt;/script&gt;</strong>" in out


def test_the_ledger_shows_each_candidates_round_and_agent():
    """From the store alone; a candidate stored before round and agent were kept
    shows blanks, never a wrong value."""
    from bot.store import Store
    from bot.web import render_page
    from verifier.verdict import Verdict

    store = Store("sqlite://")
    t = store.start_task("o/r", 3, labeler="alice", installation_id=None)
    v = Verdict(decision="accept", reason="faster").model_dump(mode="json", by_alias=True)
    store.upsert_candidate(t.id, 1, decision="reject", verdict=v, state="none", sha="a" * 40,
                           round=1, agent="tuner")
    store.upsert_candidate(t.id, 2, decision="accept", verdict=v, state="open", sha="b" * 40,
                           round=2, agent=EVIL)
    store.upsert_candidate(t.id, 3, decision="accept", verdict=v, state="pending", sha="c" * 40)
    page = render_page(store, t.id)
    ledger = page.split("<h2>Ledger (3 records)</h2>", 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr><td>#(\d)</td><td class=\"num\">(\d*)</td><td>(.*?)</td>", ledger)
    assert rows == [("1", "1", "tuner"), ("2", "2", "&lt;script&gt;alert(1)&lt;/script&gt;"
                                                    "&lt;img src=x onerror=alert(2)&gt;"),
                    ("3", "", "")]
    assert "<script" not in page
    assert f"<code>{'b' * 12}</code>" in page  # short shas: 12 digits, as everywhere


def test_the_page_gives_the_objective_one_estimate():
    """The candidates table and the report say the same change for a
    lower-is-better objective (the table used to show the gain, +11.1%, beside
    the report's -10.0%), and never the descriptive estimate (-12.0%)."""
    from bot.store import Store
    from bot.web import render_page
    from verifier.verdict import Interval, MetricComparison, ObjectiveResult, Verdict

    obj = ObjectiveResult(benchmark="b", metric="latency_s", direction="lower", ratio=0.9,
                          ratio_ci=Interval(low=0.85, high=0.95, level=0.98), gain=1 / 0.9 - 1,
                          gain_ci=Interval(low=1 / 0.95 - 1, high=1 / 0.85 - 1, level=0.98),
                          min_gain=0.05)
    row = MetricComparison(name="latency_s", direction="lower", unit="s", bk=0.2, candidate=0.18,
                           ratio_vs_bk=0.88, ratio_vs_bk_ci=Interval(low=0.87, high=0.89))
    v = Verdict(decision="accept", reason="faster", objective=obj, metrics=(row,),
                shas={"bk": "a" * 40, "candidate": "b" * 40})
    store = Store("sqlite://")
    t = store.start_task("o/r", 3, labeler="alice", installation_id=None)
    store.upsert_candidate(t.id, 1, decision="accept", sha="b" * 40, state="open",
                           verdict=v.model_dump(mode="json", by_alias=True))
    page = render_page(store, t.id)
    cell = re.search(r'<tr class="candidate" data-n="1">.*?</tr>', page).group(0)
    assert "-10.0% better" in cell and "+11.1%" not in cell
    assert "latency_s -10.0% better vs Bk" in page and "-12.0%" not in page
    # (the chart plots gains in the better direction, on an axis that says so)
