"""Shared fixtures for the bot's tests.

The fake GitHub fixtures live in tests/fakegithub/fixtures.py and are
re-exported here: fake_github, fake_app, make_repo, fake_repo, gh, token_port,
github_app_env.
"""

# The bot's own fixtures (settings, store, live server): tests/bot/_fixtures.py
from tests.bot._fixtures import bot_settings, bot_store, live_app, make_bot  # noqa: E402,F401
from tests.fakegithub.fixtures import (  # noqa: F401  (pytest fixtures)
    fake_app,
    fake_github,
    fake_repo,
    gh,
    github_app_env,
    make_repo,
    token_port,
)
