"""The ``local`` executor: run the job here, in the claiming worker's thread."""

from __future__ import annotations

from typing import Any

from bot.tasks import job


class LocalExecutor:
    name = "local"

    def run(self, ctx: Any, run: Any) -> str:
        return job(run.job.kind).run(ctx, run)
