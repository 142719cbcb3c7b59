"""One sticky comment per issue or PR and kind, edited in place.

A comment is ours when it carries the hidden marker *and* was written by our
own login (anyone can paste a marker). Its id is cached in the store; the
cache is only a shortcut, GitHub is the truth.
"""

from __future__ import annotations

import threading
from typing import Protocol, Sequence

from bot import render
from bot.gh import CommentInfo, GitHubError, NotFound


class StickyPort(Protocol):
    def list_issue_comments(self, repo: str, number: int) -> list[CommentInfo]: ...

    def create_issue_comment(self, repo: str, number: int, body: str) -> CommentInfo: ...

    def edit_issue_comment(self, repo: str, comment_id: int, body: str) -> CommentInfo: ...


class StickyCache(Protocol):
    def sticky(self, repo: str, number: int, marker: str) -> int | None: ...

    def set_sticky(self, repo: str, number: int, marker: str, comment_id: int) -> None: ...


def find(comments: Sequence[CommentInfo], kind: str, login: str) -> CommentInfo | None:
    """Our sticky comment of ``kind`` among ``comments`` (the first, if several)."""
    mark = render.marker(kind)
    for c in comments:
        if c.user.lower() == login.lower() and mark in c.body:
            return c
    return None


_guard = threading.Lock()
_locks: dict[tuple[str, int, str], threading.Lock] = {}


def _lock(repo: str, number: int, kind: str) -> threading.Lock:
    with _guard:
        return _locks.setdefault((repo, number, kind), threading.Lock())


def upsert(gh: StickyPort, cache: StickyCache | None, repo: str, number: int, kind: str,
           body: str, *, login: str) -> CommentInfo:
    """Edit our sticky comment of ``kind`` in place, or create it. ``body`` must
    already carry the marker (``render.with_marker``). Two jobs of this process
    never look-then-create at once (both would find none and create one each)."""
    with _lock(repo, number, kind):
        return _upsert(gh, cache, repo, number, kind, body, login=login)


def _upsert(gh: StickyPort, cache: StickyCache | None, repo: str, number: int, kind: str,
            body: str, *, login: str) -> CommentInfo:
    if render.marker(kind) not in body:
        body = render.with_marker(body, kind)
    cached = cache.sticky(repo, number, kind) if cache else None
    if cached is not None:
        try:
            return gh.edit_issue_comment(repo, cached, body)
        except NotFound:
            pass  # deleted by someone: look again
        except GitHubError as e:
            if e.status not in (403, 404, 410):
                raise
    found = find(gh.list_issue_comments(repo, number), kind, login)
    if found is not None:
        comment = gh.edit_issue_comment(repo, found.id, body) if found.body != body else found
    else:
        comment = gh.create_issue_comment(repo, number, body)
    if cache:
        cache.set_sticky(repo, number, kind, comment.id)
    return comment
