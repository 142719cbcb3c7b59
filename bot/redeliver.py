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

Bounded: each ask is counted in the store (``Redelivery``); a guid is not asked
for again while an ask is in flight (one interval, at least 60 s), and after
``max_asks`` asks (5) it is given up: logged at error level once and counted in
``/metrics`` (``rsi_redeliver_gave_up``), never asked for again (a delivery that
always fails was asked for every interval, 288 times a day, without end).

One sweep per service: the loop sweeps only while it holds the store's lease
``redeliver`` (renewed every interval), so ``rsi serve --processes N`` and
several hosts on one database ask once, not once per process.
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


MAX_ASKS = 5
"""Asks per delivery before the sweep gives it up (GitHub keeps 3 days of attempts)."""
LEASE = "redeliver"


@dataclass
class SweepResult:
    seen: int = 0  # distinct guids in the window
    redelivered: list[str] = field(default_factory=list)  # guids asked for again
    errors: int = 0
    gave_up: list[str] = field(default_factory=list)  # guids given up in this sweep


@dataclass
class Redeliverer:
    """Sweeps on a schedule (:meth:`start`) or once (:meth:`sweep`)."""

    gh: Any  # GitHubPort
    store: Any  # bot.store.Store
    lookback_s: float = 86400.0
    interval_s: float = 300.0
    max_per_sweep: int = 200
    max_asks: int = MAX_ASKS
    clock: Any = time.time
    owner: str = ""
    """Who holds the lease (:func:`bot.worker.worker_id` when empty)."""
    swept: int = 0  # sweeps this loop made (it skips those another process holds the lease for)
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
        in_flight = max(self.interval_s, 60)  # GitHub redelivers asynchronously
        for guid, tries in by_guid.items():
            if len(out.redelivered) >= self.max_per_sweep:
                break
            if any(200 <= t.status_code < 300 for t in tries):
                continue
            newest = max(tries, key=lambda t: (t.delivered_at, t.id))
            if not transient(newest.status_code):
                continue
            if self.store.delivery(guid) is not None:
                continue  # stored after its answer was late: it is being processed
            asked = self.store.redelivery(guid)
            if asked is not None and (asked.gave_up_at is not None
                                      or now - asked.last_asked_at < in_flight):
                continue
            if asked is not None and asked.asks >= self.max_asks:
                if self.store.give_up_redelivery(guid):
                    out.gave_up.append(guid)
                    log.error("gave up on delivery %s after %d redeliveries (last answer %s): "
                              "it is not asked for again", guid, asked.asks,
                              newest.status_code or "none")
                continue
            try:
                self.gh.redeliver(newest.id)
            except GitHubError as e:
                out.errors += 1
                log.warning("could not ask for delivery %s again: %s", guid, e)
                continue
            self.store.count_redelivery_ask(guid)
            out.redelivered.append(guid)
        if out.redelivered:
            log.info("asked GitHub to redeliver %d delivery(ies)", len(out.redelivered),
                     extra={"guids": out.redelivered[:20]})
        return out

    def _loop(self) -> None:
        if not self.owner:
            from bot.worker import worker_id

            self.owner = worker_id("redeliver")
        while True:
            try:
                # the lease outlives one missed interval; a dead holder's runs out
                if self.store.take_lease(LEASE, self.owner, hold_s=self.interval_s * 3 + 5):
                    self.swept += 1
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
        if self.owner:
            try:
                self.store.drop_lease(LEASE, self.owner)
            except Exception:  # noqa: BLE001 - stopping; the lease runs out anyway
                log.warning("could not drop the redelivery lease", exc_info=True)
