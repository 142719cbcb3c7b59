"""Pytest fixtures around the fake GitHub, re-exported by tests/bot/conftest.py.

    def test_x(fake_github, make_repo, gh):
        repo = make_repo(Path("examples/target"))   # "acme/target", app installed
        n = fake_github.open_issue(repo, "Faster", body, by="alice")
        fake_github.set_role(repo, "alice", "write")
        event = fake_github.label_issue(repo, n, "rsi", by="alice")  # -> WebhookEvent
        ...post event.event / event.body() to the bot...
        assert fake_github.comments(repo, n)[0].user.login == gh.bot_login()
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bot.gh import PyGithubPort

from .server import FakeGitHub
from .state import App

APP_SLUG = "rsi-bot"
OWNER = "acme"


@pytest.fixture
def fake_github(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGitHub]:
    """A running fake GitHub (fresh per test), on 127.0.0.1 and a free port: `fake_github.url`."""
    fake = FakeGitHub(tmp_path_factory.mktemp("fakegithub")).start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def fake_app(fake_github: FakeGitHub) -> App:
    """The bot's GitHub App: `.id`, `.slug`, `.private_key_pem`, `.bot.login` ("rsi-bot[bot]")."""
    return fake_github.register_app(APP_SLUG)


@pytest.fixture
def make_repo(fake_github: FakeGitHub, fake_app: App,
              tmp_path_factory: pytest.TempPathFactory) -> Callable[..., str]:
    """`make_repo(source=None, full_name="acme/target", default_branch="main", install=True)`:
    a repository whose default branch is one commit of `source` (a directory; default: a
    README), with the app installed; returns "owner/name". The owner has role admin."""

    def make(source: Path | str | None = None, full_name: str = f"{OWNER}/target", *,
             default_branch: str = "main", install: bool = True, private: bool = False) -> str:
        if source is None:
            source = tmp_path_factory.mktemp("seed")
            (Path(source) / "README.md").write_text("# target\n")
        fake_github.create_repo(full_name, source, default_branch=default_branch, private=private)
        if install:
            fake_github.install_app(fake_app, [full_name])
        return full_name

    return make


@pytest.fixture
def fake_repo(make_repo: Callable[..., str]) -> str:
    """"acme/target": a README on `main`, the app installed."""
    return make_repo()


@pytest.fixture
def gh(fake_github: FakeGitHub, fake_app: App) -> Iterator[PyGithubPort]:
    """The port as the bot builds it in production: GitHub App auth (installation looked up
    per repository), pointed at the fake; no write pacing and no HTTP retries, so tests are
    fast and injected failures surface at once."""
    port = PyGithubPort.from_app(fake_app.id, fake_app.private_key_pem, base_url=fake_github.url,
                                 throttle=False, retry=None)
    try:
        yield port
    finally:
        port.close()


@pytest.fixture
def token_port(fake_github: FakeGitHub) -> Iterator[Callable[[str], PyGithubPort]]:
    """`token_port("alice")`: the port authenticated with alice's personal token."""
    ports: list[PyGithubPort] = []

    def make(login: str) -> PyGithubPort:
        port = PyGithubPort.from_token(fake_github.token_for(login), base_url=fake_github.url,
                                       throttle=False, retry=None)
        ports.append(port)
        return port

    yield make
    for p in ports:
        p.close()


@pytest.fixture
def github_app_env(fake_github: FakeGitHub, fake_app: App) -> dict[str, str]:
    """The bot's RSI_GITHUB_* settings for the fake app (merge into the bot's environment)."""
    return {"RSI_GITHUB_API_URL": fake_github.url, "RSI_GITHUB_APP_ID": str(fake_app.id),
            "RSI_GITHUB_PRIVATE_KEY": fake_app.private_key_pem}
