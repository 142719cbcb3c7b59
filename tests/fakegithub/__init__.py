"""A fake GitHub for tests: REST + git smart HTTP over real HTTP (see README.md)."""

from .server import ApiError, FakeGitHub, WebhookEvent, make_zip

__all__ = ["ApiError", "FakeGitHub", "WebhookEvent", "make_zip"]
