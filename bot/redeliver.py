"""No delivery left behind: ask GitHub again for what the bot never stored.

GitHub does not retry a webhook delivery that failed (a timeout, a 5xx, a
connection refused while the bot restarted). On start and every
``RSI_REDELIVER_INTERVAL_S``, :func:`sweep` lists the App's delivery attempts of
the last ``RSI_REDELIVER_LOOKBACK_S`` (``GET /app/hook/deliveries``, App JWT),
groups them by ``guid`` (the ``X-GitHub-Delivery`` id a redelivery keeps), and
for each guid that

* has no 2xx attempt,
* failed in a way that may pass (no answer, 429 or 5xx; a 4xx is the bot's own
  refusal, e.g. a bad signature, and would be refused again), and
* is not in the store (a delivery stored after its answer timed out needs nothing),

asks GitHub to deliver it again (``POST /app/hook/deliveries/{id}/attempts``).
The redelivery arrives on ``POST /webhook`` like any delivery; the store claims
its guid once, so a guid asked for twice is still processed once.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from bot.gh import GitHubError

log = logging.getLogger("rsi.bot.redeliver")


def transient(status_code: int) -> bool:
    """A failure worth a redelivery: no answer at all, 429, or a 5xx."""
    return status_code == 0 or status_code == 429 or status_code >= 500


@dataclass
class SweepResult:
    seen: int = 0  # distinct guids in the window
    redelivered: list[str] = field(default_factory=list)  # guids asked for again
    errors: int = 0


@dataclass
class Redeliverer:
    """Sweeps on a schedule (:meth:`start`) or once (:meth:`sweep`)."""

    gh: Any  # GitHubPort
    store: Any  # bot.store.Store
    lookback_s: float = 86400.0
    interval_s: float = 300.0
    max_per_sweep: int = 200
    clock: Any = time.time
    _asked: dict[str, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sweep(self) -> SweepResult:
        now = self.clock()
        out = SweepResult()
        attempts = self.gh.list_hook_deliveries(since=now - self.lookback_s)
        by_guid: dict[str, list[Any]] = {}
        for a in attempts:
            if a.guid:
                by_guid.setdefault(a.guid, []).append(a)
        out.seen = len(by_guid)
        # an ask is in flight for one interval: GitHub redelivers asynchronously
        self._asked = {g: t for g, t in self._asked.items() if now - t < max(self.interval_s, 60)}
        for guid, tries in by_guid.items():
            if len(out.redelivered) >= self.max_per_sweep:
                break
            if guid in self._asked or any(200 <= t.status_code < 300 for t in tries):
                continue
            newest = max(tries, key=lambda t: (t.delivered_at, t.id))
            if not transient(newest.status_code):
                continue
            if self.store.delivery(guid) is not None:
                continue  # stored after its answer was late: it is being processed
            try:
                self.gh.redeliver(newest.id)
            except GitHubError as e:
                out.errors += 1
                log.warning("could not ask for delivery %s again: %s", guid, e)
                continue
            self._asked[guid] = now
            out.redelivered.append(guid)
        if out.redelivered:
            log.info("asked GitHub to redeliver %d delivery(ies)", len(out.redelivered),
                     extra={"guids": out.redelivered[:20]})
        return out

    def _loop(self) -> None:
        while True:
            try:
                self.sweep()
            except GitHubError as e:
                log.warning("redelivery sweep failed: %s", e)
            except Exception:  # the sweep must never take the service down
                log.exception("redelivery sweep failed")
            if self._stop.wait(self.interval_s):
                return

    def start(self) -> "Redeliverer":
        self._thread = threading.Thread(target=self._loop, daemon=True, name="rsi-redeliver")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
