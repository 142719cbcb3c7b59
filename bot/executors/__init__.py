"""Where a task's heavy jobs (``run_task``, ``rebaseline``, ``reverify``) run.

* ``local``: on this host, in the worker that claimed the job (:mod:`.local`).
* ``actions``: on the target repo's self-hosted runners through GitHub
  Actions (:mod:`.actions`): dispatched here, run by ``rsi worker`` there,
  ingested on ``workflow_run.completed``.

Which jobs are heavy, and what each does here, on a runner and at ingestion,
is in one registry: :data:`bot.tasks.JOBS`.
"""

from __future__ import annotations

from typing import Any, Protocol


class Executor(Protocol):
    name: str

    def run(self, ctx: Any, run: Any) -> str: ...


def make_executor(kind: str) -> Executor:
    if kind == "local":
        from bot.executors.local import LocalExecutor

        return LocalExecutor()
    if kind == "actions":
        from bot.executors.actions import ActionsExecutor

        return ActionsExecutor()
    raise ValueError(f"unknown executor {kind!r} (local | actions)")
