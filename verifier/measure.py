"""Measurement sessions: arms run in randomized ABBA blocks, warm-ups discarded.

A block over arms (X, Y[, Z]) runs a seeded random order and then its reverse
(X Y Z Z Y X), giving two "pairs" (one run of every arm each) whose mean is
free of linear drift. The seed is the verification's secret (``judge``
draws one per verification unless ``[verifier] seed`` is set), so no run can
predict the order. Any failed run stops the session with a ``RunError``.

Where each run happens is the session's ``Isolation`` (default: a fresh
process group; ``ContainerIsolation``: a fresh container per run, setup and
warm-up included). Every run (warm-up and measured) sees its own fresh export
of its arm's checkout (``export.fresh_export``: same timestamps in every run,
made just before it, removed after it), so nothing in the checkout tells a run
which run it is. A serving benchmark's client and an evaluator run from
``base_checkout`` (B0's checkout: the base the maintainer approved) for every
arm.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .config import (
    PERCENTILES,
    BenchmarkConfig,
    Direction,
    Source,
    VerifyConfig,
    percentile_name,
)
from .export import fresh_export
from .isolation import Isolation, ProcessIsolation
from .runner import RunRecord, run_once, run_session, run_setup
from .verdict import RunError

ARM_STAGE = {
    "bk": "baseline",
    "candidate": "candidate",
    "b0": "b0",
    "a": "calibration",
    "b": "calibration",
}


@dataclass(frozen=True)
class ProgressEvent:
    """What a progress callback receives."""

    phase: str  # "setup" | "warmup" | "measure" | "guards" | "done"
    run: int  # runs finished so far
    total: int  # runs planned so far (grows when pairs are added)
    arm: str = ""
    pairs: int = 0
    benchmark: str = ""
    message: str = ""


Progress = Callable[[ProgressEvent], None]


def hidden_env(config: VerifyConfig) -> tuple[dict[str, str], tuple[str, ...]]:
    """(env to add, env names to drop) for verifier runs. Raises ValueError when
    the hidden seed variable is missing on this runner."""
    env = dict(config.hidden.env)
    drop: tuple[str, ...] = ()
    if config.hidden.seed is not None:
        env["RSI_SEED"] = str(config.hidden.seed)
        return env, ((config.hidden.seed_env,) if config.hidden.seed_env else ())
    if config.hidden.seed_env:
        name = config.hidden.seed_env
        value = os.environ.get(name)
        if value is None:
            raise ValueError(
                f"hidden.seed_env names {name}, but {name} is not set on this runner; "
                f"set it in the verifier's environment (never in the agent's)"
            )
        env["RSI_SEED"] = value
        drop = (name,)
    return env, drop


class Session:
    """Runs of one benchmark over named arms (arm -> checkout directory)."""

    def __init__(
        self,
        bench: BenchmarkConfig,
        arms: dict[str, Path],
        *,
        seed: int | None,
        extra_env: dict[str, str] | None = None,
        drop_env: tuple[str, ...] = (),
        progress: Progress | None = None,
        on_run: Callable[[str, RunRecord, int], None] | None = None,
        run_offset: int = 0,
        isolation: Isolation | None = None,
        base_checkout: Path | None = None,
        cpus: str | None = None,
        threads: int | None = None,
    ):
        """``cpus``/``threads``: every run of every arm on the same pinned CPU set
        with the same thread settings (``[verifier] cpus``, ``threads``)."""
        self.bench = bench
        self.arms = dict(arms)
        self.names = list(arms)
        self.rng = np.random.default_rng(seed)
        self.extra_env = extra_env or {}
        self.drop_env = drop_env
        self.progress = progress
        self.on_run = on_run
        self.records: dict[str, list[RunRecord]] = {a: [] for a in self.names}
        self.confirm_records: dict[str, list[RunRecord]] = {a: [] for a in self.names}
        """Confirmation pairs (``confirm_pairs``), kept apart from ``records``."""
        self.every_run = False
        """Values, samples and directions over every measured run (the pairs'
        and the confirmation pairs'): ``every_run_scope``. Off, ``records``
        only (the objective's sequential test: ``design_values``)."""
        self.k = bench.per_start
        """Measured runs per server start (``runs_per_start``): with K > 1 a
        "pair" of ``add_pairs`` and ``confirm_pairs`` is a session pair (one
        server start of each arm, K client runs each; ``run_session``);
        ``records`` still holds every run, session by session."""
        self.runs = 0
        self.run_offset = run_offset
        self.planned = 0
        self.isolation = isolation or ProcessIsolation()
        pin = getattr(self.isolation, "pin", None)
        if pin is not None and (cpus or threads):
            pin(cpus, threads)
        self.base_checkout = Path(
            base_checkout or arms.get("b0") or arms.get("bk") or next(iter(arms.values()))
        )
        self._tmp = Path(tempfile.mkdtemp(prefix="rsi-verify-"))

    # ---- lifecycle ----------------------------------------------------
    def close(self) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def pairs(self) -> int:
        """Pairs measured (with ``runs_per_start`` K > 1: session pairs)."""
        return min(len(v) for v in self.records.values()) // self.k

    def by_session(self, x) -> np.ndarray:
        """Per-run values (session by session) -> one mean per session (K > 1;
        unchanged with K = 1). A partial session at the end is left out."""
        a = np.asarray(x, dtype=float)
        if self.k <= 1:
            return a
        n = a.size // self.k * self.k
        return a[:n].reshape(-1, self.k).mean(axis=1)

    def _emit(self, phase: str, arm: str = "", message: str = "") -> None:
        if self.progress is None:
            return
        try:
            self.progress(
                ProgressEvent(
                    phase,
                    self.run_offset + self.runs,
                    self.run_offset + self.planned,
                    arm,
                    self.pairs,
                    self.bench.name,
                    message,
                )
            )
        except Exception:  # noqa: BLE001 - a broken progress bar never breaks a verdict
            pass

    def _fail(self, arm: str, rec: RunRecord, what: str) -> RunError:
        stage = ARM_STAGE.get(arm, arm)
        tail = rec.stderr_tail
        if not tail.strip() and rec.stdout_tail.strip():
            tail = "(stdout)\n" + rec.stdout_tail
        from .infra import INFRA_PREFIX

        if INFRA_PREFIX in (rec.error or ""):  # the machine failed, not this arm's code
            why = rec.error[rec.error.index(INFRA_PREFIX) + len(INFRA_PREFIX):]
            return RunError(stage="infrastructure", message=why, stderr_tail=tail[-4000:])
        return RunError(
            stage=stage,
            message=f"{what} of benchmark '{self.bench.name}' failed: {rec.error}",
            stderr_tail=tail[-4000:],
        )

    def _run(
        self,
        arm: str,
        phase: str,
        index: int | None = None,
        into: dict[str, list[RunRecord]] | None = None,
    ) -> RunRecord:
        """One run of ``arm`` on a fresh export of its checkout (removed after
        the run and, for a measured run (``index``), after ``on_run`` read its
        outputs); a measured run that succeeded joins ``records`` (or
        ``into``)."""
        return self._runs(arm, phase, index, into)[-1]

    def _run_session(
        self, arm: str, index: int, into: dict[str, list[RunRecord]] | None = None
    ) -> RunRecord | None:
        """A measured session of ``arm`` (K > 1: ``run_session``): one fresh
        export for its server, K client runs, each joining ``records`` (or
        ``into``) and read by ``on_run`` at its index. The first failed run's
        record, or None."""
        last = self._runs(arm, "measure", index, into, k=self.k)[-1]
        return None if last.ok else last

    def _runs(
        self,
        arm: str,
        phase: str,
        index: int | None,
        into: dict[str, list[RunRecord]] | None,
        k: int = 0,
    ) -> list[RunRecord]:
        """``run_once`` (``k`` 0) or ``run_session`` of ``k`` runs on one fresh
        export of ``arm``'s checkout, removed after; each run counted and, when
        measured (``index``) and ok, kept and read by ``on_run`` at its index.
        The runs up to the first that failed."""
        try:
            export = fresh_export(Path(self.arms[arm]), self._tmp)
        except OSError as e:
            self.runs += 1
            return [RunRecord(ok=False, error=f"verifier could not export the checkout: {e!r}")]
        try:
            kw: dict[str, Any] = dict(
                extra_env=self.extra_env,
                drop_env=self.drop_env,
                workdir=self._tmp,
                isolation=self.isolation,
                base_checkout=self.base_checkout,
            )
            recs = run_session(self.bench, export, k, **kw) if k else [run_once(self.bench, export, **kw)]
            for i, rec in enumerate(recs):
                rec.checkout = str(export)
                self.runs += 1
                self._emit(phase, arm)
                if not rec.ok:
                    return recs[: i + 1]
                if index is not None:
                    (self.records if into is None else into)[arm].append(rec)
                    if self.on_run is not None:
                        self.on_run(arm, rec, index + i)
            return recs
        finally:
            shutil.rmtree(export, ignore_errors=True)

    def _measure(
        self, arm: str, index: int, into: dict[str, list[RunRecord]] | None, what: str
    ) -> RunError | None:
        """One measured run of ``arm`` (K = 1) or one session of it (K > 1)."""
        if self.k <= 1:
            rec = self._run(arm, "measure", index, into)
            return None if rec.ok else self._fail(arm, rec, f"{what} {index + 1}")
        failed = self._run_session(arm, index, into)
        if failed is None:
            return None
        n = int(failed.extra.get("session_run", 0))
        return self._fail(arm, failed, f"{what} {index + n + 1} (run {n + 1} of its session)")

    # ---- phases ---------------------------------------------------------
    def setup(self) -> RunError | None:
        done: set[Path] = set()
        for arm in self.names:
            path = Path(self.arms[arm]).resolve()
            if path in done:
                continue
            done.add(path)
            self._emit("setup", arm, f"setup in {path}")
            cr = run_setup(
                self.bench,
                path,
                extra_env=self.extra_env,
                drop_env=self.drop_env,
                isolation=self.isolation,
            )
            if cr is None:
                continue
            if cr.error or cr.timed_out or cr.returncode != 0:
                why = cr.error or (
                    "timed out" if cr.timed_out else f"exited with status {cr.returncode}"
                )
                return RunError(
                    stage=ARM_STAGE.get(arm, arm),
                    message=f"setup of benchmark '{self.bench.name}' failed: {why}",
                    stderr_tail=(cr.stderr_tail or cr.stdout_tail)[-4000:],
                )
        return None

    def warmup(self, n: int) -> RunError | None:
        self.planned += n * len(self.names)
        for _ in range(n):
            for i in self.rng.permutation(len(self.names)):
                arm = self.names[i]
                rec = self._run(arm, "warmup")
                if not rec.ok:
                    return self._fail(arm, rec, "warm-up run")
        return None

    def add_pairs(self, k: int) -> RunError | None:
        """Add ``k`` pairs (ABBA blocks of two pairs; an odd k ends with half a block)."""
        if k <= 0:
            return None
        self.planned += k * len(self.names) * self.k
        left = k
        while left > 0:
            order = [self.names[i] for i in self.rng.permutation(len(self.names))]
            halves = [order, order[::-1]] if left >= 2 else [order]
            for half in halves:
                for arm in half:
                    index = len(self.records[arm])
                    if self.k > 1:
                        err = self._measure(arm, index, None, "run")
                        if err is not None:
                            return err
                        continue
                    rec = self._run(arm, "measure", index)
                    if not rec.ok:
                        return self._fail(arm, rec, f"run {index + 1}")
                left -= 1
        return None

    def confirm_pairs(self, k: int, arms: tuple[str, ...] | None = None) -> RunError | None:
        """Add ``k`` confirmation pairs of ``arms`` (default: every arm, so
        that guards vs B0 stay paired too; ABBA blocks in the
        session's secret order, every run on a fresh export, measured and
        snapshotted like any other: a run cannot tell it is one), kept in
        ``confirm_records``, apart from ``records``: the design's pairs and
        the guards' intervals stay as they were; the objective's gain over
        every run and its count of slow runs take them in
        (``judge._looks``)."""
        names = [a for a in self.names if arms is None or a in arms]
        if k <= 0 or not names:
            return None
        self.planned += k * len(names) * self.k
        left = k
        while left > 0:
            order = [names[i] for i in self.rng.permutation(len(names))]
            halves = [order, order[::-1]] if left >= 2 else [order]
            for half in halves:
                for arm in half:
                    index = len(self.records[arm]) + len(self.confirm_records[arm])
                    if self.k > 1:
                        err = self._measure(arm, index, self.confirm_records, "confirmation run")
                        if err is not None:
                            return err
                        continue
                    rec = self._run(arm, "measure", index, into=self.confirm_records)
                    if not rec.ok:
                        n = len(self.confirm_records[arm]) + 1
                        return self._fail(arm, rec, f"confirmation run {n}")
                left -= 1
        return None

    def all_records(self, arm: str) -> list[RunRecord]:
        """Every measured run of ``arm``: the pairs' and the confirmation pairs'."""
        return [*self.records[arm], *self.confirm_records.get(arm, [])]

    def _recs(self, arm: str) -> list[RunRecord]:
        return self.all_records(arm) if self.every_run else self.records[arm]

    @contextmanager
    def every_run_scope(self) -> Iterator[Session]:
        """Within it, ``values``, ``per_run``, ``pooled`` and ``directions``
        read every measured run (the guards, the metrics table)."""
        old, self.every_run = self.every_run, True
        try:
            yield self
        finally:
            self.every_run = old

    # ---- values -----------------------------------------------------------
    def series_directions(self, config: BenchmarkConfig) -> dict[str, Direction]:
        seen: dict[str, Direction] = {}
        for arm in self.names:
            for r in self._recs(arm):
                if r.result is not None:
                    for s in r.result.samples:
                        seen[s] = config.samples.get(s, "lower")
        return seen

    def directions(self) -> dict[str, Direction]:
        """Every metric observed in every run of every arm, with its direction."""
        out: dict[str, Direction] = {}
        b = self.bench
        for name in b.measured():
            if name == "device_peak_memory_mib":
                continue
            out[name] = "lower"
        for series, d in self.series_directions(b).items():
            for q in PERCENTILES:
                out[percentile_name(series, q)] = d
        out.update(b.metrics)
        if self._everywhere(
            lambda r: r.result is not None and "device_peak_memory_mib" in r.result.metrics
        ):
            out["device_peak_memory_mib"] = "lower"
        return {
            m: d
            for m, d in out.items()
            if self._everywhere(lambda r, m=m: _value(r, m, self) is not None)
        }

    def _everywhere(self, pred) -> bool:
        recs = [r for arm in self.names for r in self._recs(arm)]
        return bool(recs) and all(pred(r) for r in recs)

    def values(self, arm: str, metric: str) -> np.ndarray:
        return np.array([_value(r, metric, self) for r in self._recs(arm)], dtype=float)

    def design_values(self, arm: str, metric: str) -> np.ndarray:
        """``values`` of the design's pairs only, whatever the scope."""
        return np.array([_value(r, metric, self) for r in self.records[arm]], dtype=float)

    def confirm_values(self, arm: str, metric: str) -> np.ndarray:
        """``values`` of the confirmation pairs (``confirm_pairs``)."""
        recs = self.confirm_records.get(arm, [])
        return np.array([_value(r, metric, self) for r in recs], dtype=float)

    def source(self, metric: str) -> Source:
        """Who produced ``metric`` in this session's runs (see ``RunRecord.sources``)."""
        b = self.bench
        if metric in b.measured() and metric not in b.metrics:
            return b.metric_source(metric)
        src = self.percentile_source(metric)
        if src is not None:
            return b.reporter
        seen = {r.sources.get(metric) for a in self.names for r in self._recs(a) if r.sources}
        if "evaluator" in seen:
            return "evaluator"
        return b.metric_source(metric)

    def percentile_source(self, metric: str) -> tuple[str, int] | None:
        """(series, q) when ``metric`` is a percentile of a sample series."""
        for series in self.series_directions(self.bench):
            for q in PERCENTILES:
                if percentile_name(series, q) == metric:
                    return series, q
        return None

    def per_run(self, arm: str, series: str) -> list[np.ndarray]:
        return [
            np.asarray(r.result.samples.get(series, ()), dtype=float)
            for r in self._recs(arm)
            if r.result is not None
        ]

    def pooled(self, arm: str, series: str) -> np.ndarray:
        out: list[float] = []
        for r in self._recs(arm):
            if r.result is not None:
                out.extend(r.result.samples.get(series, ()))
        return np.array(out, dtype=float)


def _value(rec: RunRecord, metric: str, session: Session) -> float | None:
    measured = rec.measured()
    if metric in measured:
        return measured[metric]
    res = rec.result
    if res is None:
        return None
    if metric in res.metrics:
        return res.metrics[metric]
    src = session.percentile_source(metric)
    if src is not None:
        series, q = src
        s = res.samples.get(series)
        if s:
            return float(np.percentile(np.asarray(s, dtype=float), q))
    return None
