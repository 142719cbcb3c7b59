"""How many times one candidate's verdict is written as text and read back on
its way verifier -> ledger -> bot -> renderers (issue 21: at most 3).

The whole service runs (webhook, worker, the scripted loop writing the real
ledger, the store, draft PR, report comment, check run, status comment, the
task page). Every JSON text made or read in the process (``json.dumps`` /
``json.loads``, pydantic's ``model_dump_json`` / ``model_validate_json``, which
every model and SQLAlchemy's JSON columns go through) is scanned for the
verdict's schema tag: each occurrence is one verdict written, or read, as text.

Measured on 7e80d97 (this file run against that checkout): 3 writes per
candidate (``LedgerRecord.from_verdict``'s ``json.loads(to_json())``, the
ledger line, the store's JSON column). Now 2: the ledger line and the store.
Reads are re-reads of those two copies (35 before, 33 now, for 2 candidates:
25 of them SQLAlchemy loading the candidates' rows, e.g. for status refreshes;
7 the bot's ledger syncs; 1 the ledger's idempotence check).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from pydantic import BaseModel

from tests.bot.fakeharness import FakeHarness, target_tree

TAG = "rsi.verdict/1"


def _count_verdict_text(monkeypatch) -> Counter:
    counts: Counter = Counter()
    dumps, loads = json.dumps, json.loads
    dump_json = BaseModel.model_dump_json
    validate_json = BaseModel.model_validate_json.__func__  # type: ignore[attr-defined]

    def text(x: Any) -> str:
        return x.decode("utf-8", "replace") if isinstance(x, (bytes, bytearray)) else str(x)

    def counted_dumps(*a: Any, **kw: Any) -> str:
        out = dumps(*a, **kw)
        counts["written"] += out.count(TAG)
        return out

    def counted_loads(s: Any, *a: Any, **kw: Any) -> Any:
        counts["read"] += text(s).count(TAG)
        return loads(s, *a, **kw)

    def counted_dump_json(self: BaseModel, *a: Any, **kw: Any) -> str:
        out = dump_json(self, *a, **kw)
        counts["written"] += out.count(TAG)
        return out

    def counted_validate_json(cls: type[BaseModel], data: Any, *a: Any, **kw: Any) -> Any:
        counts["read"] += text(data).count(TAG)
        return validate_json(cls, data, *a, **kw)

    monkeypatch.setattr(json, "dumps", counted_dumps)
    monkeypatch.setattr(json, "loads", counted_loads)
    monkeypatch.setattr(BaseModel, "model_dump_json", counted_dump_json)
    monkeypatch.setattr(BaseModel, "model_validate_json", classmethod(counted_validate_json))
    return counts


def test_a_verdict_is_written_as_text_twice_per_candidate(make_bot, make_repo, fake_github,
                                                         tmp_path, monkeypatch):
    repo = make_repo(target_tree(tmp_path / "seed"))
    fake_github.set_role(repo, "alice", "write")
    counts = _count_verdict_text(monkeypatch)  # before the store exists: its JSON columns too
    bot = make_bot(FakeHarness(["accept", "reject"]), web_enabled=True, web_token="t" * 24)
    n = fake_github.open_issue(repo, "Faster", "x", by="alice")
    bot.deliver(fake_github.label_issue(repo, n, "rsi", by="alice"))
    task = bot.store.find_task(repo, n)
    cands = bot.store.candidates(task.id)
    assert task.state == "finished" and [c.decision for c in cands] == ["accept", "reject"]
    assert cands[0].pr_number  # published: draft PR, report comment, check run

    from bot.web import render_page

    page = render_page(bot.store, task.id)
    assert page is not None and "Newest report" in page
    written = counts["written"] / len(cands)
    assert written == 2, counts  # the ledger line and the store's column: no copy in between
    assert counts["read"] >= counts["written"]  # each is read back (the ledger at every sync)
