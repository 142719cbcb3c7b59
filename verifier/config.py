"""The verifier's part of the repo config (``.rsi/config.toml``).

Sections read here: ``benchmarks``, ``objective``, ``guards``, ``quality``,
``verifier``, ``hidden``. Every other section (knobs, policy, agent, runner...)
belongs to the harness and is ignored. Errors are collected, not raised one at
a time: ``ConfigError.errors`` lists every problem with a message saying what
to change.

Metrics a guard or the objective may name, per benchmark:

* declared: ``[benchmarks.<name>.metrics]`` (the benchmark reports them);
* measured by the verifier from outside: ``wall_s``, ``peak_rss_mib``,
  ``cpu_s`` (user + system CPU time), ``startup_s`` (only with
  ``ready_pattern`` or ``ready_path``), and ``device_peak_memory_mib`` (only
  when the benchmark reports it through ``verifier.probe``: source benchmark);
* percentiles of sample series: for a series ``latency_s`` declared in
  ``[benchmarks.<name>.samples]``, ``latency_p50_s``, ``latency_p95_s``,
  ``latency_p99_s`` (pooled over runs, with bootstrap intervals).

A benchmark is either in-process (``command``) or serving (``serve``, the
candidate's server, plus ``client``, the protected load generator run from
B0's checkout); either may name an ``evaluator`` (a protected command run
from B0's checkout on each run's output files). Every metric has a
source (``metric_source``): ``verifier``, ``client``, ``evaluator`` or
``benchmark`` (the candidate's own process); ``[verifier] require_external``
refuses an objective or required guard whose source is ``benchmark``.

Default guards (added for metrics that exist and have no guard of their own):
p95 latencies at most +10%, peak memory at most +2%, startup time at most +10%.
The tail guard is on p95, not p99: a p99 over 16 requests a run is the single
slowest request, and even pooled over 30 runs its interval is too wide for
any bound near 1.05 to be judged 95/95 (see benchmarks/verifier_quality.py);
a config may still declare a p99 guard.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .matrix import Matrix
from .qualitykinds import (
    KIND_NAMES,
    MAX_SAMPLES_CAP,
    QUALITY_KINDS,
    SPECTRAL_MAX_DB,
    kind_param_problems,
    unknown_kind_message,
)

Direction = Literal["higher", "lower"]
Source = Literal["verifier", "client", "evaluator", "harness", "benchmark"]

OWN_SECTIONS = ("benchmarks", "objective", "guards", "quality", "verifier", "hidden")

#: Metrics the verifier measures itself, with their better direction.
MEASURED: dict[str, Direction] = {
    "wall_s": "lower",
    "peak_rss_mib": "lower",
    "startup_s": "lower",
    "cpu_s": "lower",
    "device_peak_memory_mib": "lower",
}
#: Measured metrics that the benchmark process reports (through verifier.probe).
SELF_REPORTED_MEASURED = ("device_peak_memory_mib",)
PERCENTILES = (50, 95, 99)
_UNIT_SUFFIXES = ("_s", "_ms", "_us", "_ns", "_mib", "_mb", "_tokens")

#: Default guards: (predicate on metric name, max_ratio, label).
DEFAULT_MAX_RATIO = {"p95": 1.10, "memory": 1.02, "startup": 1.10}


def percentile_name(series: str, q: int) -> str:
    """``latency_s`` -> ``latency_p95_s``; ``tokens`` -> ``tokens_p95``."""
    for suffix in _UNIT_SUFFIXES:
        if series.endswith(suffix) and len(series) > len(suffix):
            return f"{series[: -len(suffix)]}_p{q}{suffix}"
    return f"{series}_p{q}"


def default_bound(metric: str, direction: str) -> float | None:
    """The default max_ratio for a metric, or None when no default applies."""
    if direction != "lower":
        return None
    if re.search(r"(^|_)p95(_|$)", metric):
        return DEFAULT_MAX_RATIO["p95"]
    if metric in ("peak_rss_mib", "device_peak_memory_mib"):
        return DEFAULT_MAX_RATIO["memory"]
    if metric == "startup_s":
        return DEFAULT_MAX_RATIO["startup"]
    return None


class ConfigError(ValueError):
    """The config is unusable. ``errors`` holds one actionable message each."""

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        super().__init__("invalid .rsi/config.toml:\n" + "\n".join(f"  - {e}" for e in self.errors))


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class BenchmarkConfig(_Model):
    """One benchmark: a shell command run in a checkout of the target repo
    (``command``), or a server of the candidate (``serve``) driven by a
    protected load generator (``client``)."""

    name: str
    command: str | None = None
    """In-process benchmark: shell command, run with cwd = the checkout and ``RSI_RESULT`` set."""
    serve: str | None = None
    """Serving benchmark: the candidate's server, run from the arm's checkout,
    listening on ``$RSI_PORT``. Never sees hidden inputs."""
    client: str | None = None
    """Serving benchmark: the load generator, run from B0's checkout (the base
    the maintainer approved; Bk's when there is no B0) for every arm, with
    ``RSI_SERVER_URL``; writes ``$RSI_RESULT``."""
    ready_path: str | None = None
    """Serving: HTTP path the verifier polls until it answers 200 (e.g. ``/health``)."""
    evaluator: str | None = None
    """Protected command run from B0's checkout after each run, with the
    run's output files read-only at ``$RSI_INPUT_DIR``; its ``outputs`` and
    ``metrics`` replace the run's own entries of the same name."""
    evaluator_metrics: tuple[str, ...] = ()
    """Declared metrics the evaluator reports (source ``evaluator``)."""
    entry: str | None = None
    """In-process benchmark timed by the verifier's own harness
    (``verifier/harness.py``): ``package.module:function`` of the repo (a prompt
    in; its output, or an iterable of chunks, out). The verifier calls it
    ``requests`` times on inputs drawn from ``inputs`` and times every call from
    outside its process: ``throughput``, ``output_bytes_per_s`` and samples
    ``latency_s``, ``ttfa_s`` have source ``harness``, not ``benchmark``. With
    ``entry``, ``command`` (optional) is only what people and agents run by
    hand; the verifier never runs it."""
    inputs: str | None = None
    """``entry``: a file of inputs, one per line, read from B0's checkout (the
    base the maintainer approved), never the candidate's."""
    requests: int = Field(16, ge=1, le=10_000)
    """``entry``: calls per run (inputs drawn from ``inputs`` with ``RSI_SEED``,
    the same for every arm)."""
    setup: str | None = None
    """Optional shell command run once per checkout before any run."""
    timeout_s: float = Field(600.0, gt=0)
    """Per-run timeout; the whole process group is killed when it passes."""
    ready_pattern: str | None = None
    """Regex; the time until it first appears on stdout (the server's, when
    serving) is ``startup_s``."""
    env: dict[str, str] = Field(default_factory=dict)
    settings: dict[str, str | int | float | bool] = Field(default_factory=dict)
    """Fixed settings, recorded in the verdict, exported as ``RSI_SETTING_<KEY>``."""
    metrics: dict[str, Direction] = Field(default_factory=dict)
    """Declared metrics and their better direction."""
    samples: dict[str, Direction] = Field(default_factory=dict)
    """Declared sample series (per-request values) and their better direction."""
    units: dict[str, str] = Field(default_factory=dict)
    """Unit of each declared metric or sample series (parsed with pint: "s", "ms",
    "1/s", "token/s", "MiB"); a series' percentiles take its unit. Reports show a
    metric without one as a plain number: units are never guessed from names."""
    runs_per_start: int = Field(1, ge=1, le=1000)
    """Serving only (issue 33): measured client runs per server start. 1 (the
    default): every run starts its own server, as always. K > 1: a *session*
    is one server start of one arm, then K client runs, each measured and
    judged like any run (its own run dir, outputs, quality guards against the
    reference arm's run of the same index), each with its own request texts
    (``RSI_SEED`` derived per run index, so a hidden seed is required: a
    response cache cannot make a later run of a session faster);
    ``startup_s`` is measured once per session. The sequential test's unit is
    the session pair (the mean of its K index-matched log ratios), in ABBA
    order over sessions; every client run counts in the wild-run rule. The
    verdict says ``runs_per_start = K``. A session's K client runs share one
    container (exec'd in turn, every process of the run killed and its run
    dir and ``/tmp`` emptied before the next), and so do its K evaluators. A
    deployment matrix's cells are measured in sessions too (a cell's
    ``pairs`` are session pairs). Which K: a session of K runs measures
    K w / (S + K (w + c)) of its time (a start S, a client window w, the rest
    of a run c); a calibration whose runs mostly started servers says its
    measured share and the K that would measure about 70%."""
    matrix: Matrix | None = None
    """Deployment matrix: settings a deployment varies (``concurrency = [1, 4]``,
    ``cpus = ["0", "0-1"]``); the primary cell decides the objective, every other
    cell is measured with ``pairs`` pairs and judged by the same guards (see
    ``verifier.matrix``)."""

    @field_validator("ready_pattern")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as e:
                raise ValueError(f"ready_pattern is not a valid regex: {e}") from None
        return v

    @property
    def serving(self) -> bool:
        return self.serve is not None

    @property
    def per_start(self) -> int:
        """Measured runs per server start: ``runs_per_start`` for a serving
        benchmark, else 1 (a pair of any other benchmark is a run per arm)."""
        return self.runs_per_start if self.serving else 1

    @property
    def reporter(self) -> Source:
        """Who reports this benchmark's own metrics: the protected ``client``
        (serving), the verifier's ``harness`` (``entry``), or the ``benchmark``
        process, where the candidate's code runs (a self-report)."""
        if self.serving:
            return "client"
        return "harness" if self.entry else "benchmark"

    def measured(self) -> dict[str, Direction]:
        ready = self.ready_pattern or self.ready_path or self.entry
        return {k: v for k, v in MEASURED.items() if k != "startup_s" or ready}

    def metric_source(self, metric: str) -> Source:
        """Who produces ``metric``: the verifier, the protected client or
        evaluator, or the benchmark process itself (the candidate's code)."""
        if metric in self.measured() and metric not in self.metrics:
            return "benchmark" if metric in SELF_REPORTED_MEASURED else "verifier"
        if metric in self.evaluator_metrics:
            return "evaluator"
        return self.reporter

    def unit_of(self, metric: str) -> str:
        """``metric``'s unit: declared in ``units`` (a percentile takes its
        series'), or the verifier's own for what it measures; else ``""``."""
        from .units import MEASURED_UNITS, canonical

        if metric in self.units:
            return canonical(self.units[metric])
        if metric in self.measured() and metric not in self.metrics:
            return MEASURED_UNITS.get(metric, "")
        for series in self.samples:
            if series in self.units and metric in {percentile_name(series, q) for q in PERCENTILES}:
                return canonical(self.units[series])
        return ""

    def problems(self) -> list[str]:
        """What is wrong with the shape of this benchmark (empty: nothing)."""
        where = f"benchmarks.{self.name}"
        out = []
        from .units import canonical

        for m, unit in self.units.items():
            try:
                canonical(unit)
            except ValueError as exc:
                out.append(f"{where}.units.{m}: {exc}")
            if m not in self.metrics and m not in self.samples:
                out.append(f"{where}.units: '{m}' is not a declared metric or sample series "
                           f"of this benchmark (declared: {', '.join([*self.metrics, *self.samples]) or 'none'})")
        if self.entry is not None:
            out += self._entry_problems(where)
        elif self.command is not None and (self.serve or self.client):
            out.append(f"{where}: give either command (in-process) or serve + client, not both")
        elif self.command is None and not (self.serve and self.client):
            out.append(
                f"{where}: give command (an in-process benchmark) or serve and client (a "
                "serving benchmark), or entry (a function the verifier's harness times)"
            )
        if self.serve and not (self.ready_pattern or self.ready_path):
            out.append(
                f'{where}: a serving benchmark needs ready_path (e.g. "/health") or '
                "ready_pattern, so the client starts when the server is ready"
            )
        if self.ready_path is not None and not self.serve:
            out.append(f"{where}: ready_path is for serving benchmarks (serve + client)")
        if self.ready_path is not None and not self.ready_path.startswith("/"):
            out.append(f"{where}: ready_path must start with '/', got {self.ready_path!r}")
        if self.matrix is not None:
            out += self.matrix.problems(f"{where}.matrix")
        if self.runs_per_start > 1 and not self.serving:
            out.append(
                f"{where}: runs_per_start = {self.runs_per_start} is for serving benchmarks "
                "(serve + client: several client runs per server start); remove it or set "
                "runs_per_start = 1"
            )
        for m in self.evaluator_metrics:
            if not self.evaluator:
                out.append(f"{where}: evaluator_metrics needs an evaluator command")
                break
            if m not in self.metrics:
                out.append(f"{where}: evaluator metric '{m}' is not declared in [{where}.metrics]")
        return out

    def _entry_problems(self, where: str) -> list[str]:
        from .harness import ENTRY_RE, METRICS, SAMPLES

        out = []
        entry = self.entry or ""
        if not re.fullmatch(ENTRY_RE, entry):
            out.append(f"{where}.entry {entry!r}: write it as package.module:function")
        if self.serve or self.client:
            out.append(f"{where}: give entry (in-process, timed by the verifier) or serve + "
                       "client, not both")
        if self.ready_pattern is not None:
            out.append(f"{where}: ready_pattern is the harness's own with entry (startup_s is "
                       "the time until it has loaded the entry point): remove it")
        if not self.inputs:
            out.append(f'{where}: entry needs inputs = "path/in/the/repo.txt" (one input per line)')
        elif self.inputs.startswith("/") or ".." in self.inputs.split("/"):
            out.append(f"{where}.inputs {self.inputs!r}: a path inside the repository")
        for kind, declared, known in (("metrics", self.metrics, METRICS),
                                      ("samples", self.samples, SAMPLES)):
            for m, d in declared.items():
                if m in self.evaluator_metrics:
                    continue
                if m not in known:
                    out.append(f"{where}.{kind}.{m}: the harness reports only "
                               f"{', '.join(known)} (an entry benchmark reports nothing else, "
                               "but an evaluator may: evaluator_metrics)")
                elif d != known[m]:
                    out.append(f"{where}.{kind}.{m}: {known[m]} is better, not {d}")
        return out

    def known_metrics(self) -> dict[str, Direction]:
        """Every metric name a guard may use on this benchmark (before running)."""
        out: dict[str, Direction] = dict(self.measured())
        for series, d in self.samples.items():
            for q in PERCENTILES:
                out[percentile_name(series, q)] = d
        out.update(self.metrics)
        return out

    def setting_env(self) -> dict[str, str]:
        env = {}
        for k, v in self.settings.items():
            key = re.sub(r"[^A-Za-z0-9]", "_", k).upper()
            env[f"RSI_SETTING_{key}"] = str(v).lower() if isinstance(v, bool) else str(v)
        return env


class Objective(_Model):
    benchmark: str
    metric: str
    min_gain: float = Field(0.0, ge=0)
    """Smallest improvement worth keeping (0.02 = 2% better)."""
    self_reported: bool | None = None
    """``true``: the maintainer accepts an objective that the benchmark's own
    process reports (source ``benchmark``: the candidate's code runs in it and
    can report any number); the verifier's clock only cross-checks it, and
    every verdict says it was self-reported. ``false``: the objective must be
    measured outside the candidate (a config error otherwise). Unset (the
    minimal form): whatever the metric is; a metric the benchmark reports is
    then a self-report written by the maintainer, judged and labelled as with
    ``true``. ``rsi init`` never writes a self-reported objective unless asked
    (``--self-reported``)."""


class Guard(_Model):
    """A bound on how much worse a metric may get, candidate vs reference.

    Exactly one of: ``max_ratio`` (candidate/reference <= x, for lower-is-better
    metrics), ``min_ratio`` (>= x, for higher-is-better), ``max_delta``
    (candidate - reference <= x) or ``min_delta`` (>= x).
    """

    metric: str
    benchmark: str | None = None
    max_ratio: float | None = Field(None, gt=0)
    min_ratio: float | None = Field(None, gt=0)
    max_delta: float | None = None
    min_delta: float | None = None
    required: bool = False
    """Harness: a proposal may not drop or loosen this guard."""
    default: bool = False
    """Added by the verifier (not written in the config)."""

    @property
    def kind(self) -> Literal["ratio", "delta"]:
        return "ratio" if self.max_ratio is not None or self.min_ratio is not None else "delta"

    @property
    def bound_text(self) -> str:
        if self.max_ratio is not None:
            return f"<= {self.max_ratio:g}x"
        if self.min_ratio is not None:
            return f">= {self.min_ratio:g}x"
        if self.max_delta is not None:
            return f"<= {self.max_delta:+g}"
        return f">= {self.min_delta:+g}"

    @property
    def label(self) -> str:
        return f"{self.metric} {self.bound_text}"


class QualityGuard(_Model):
    """A check on what the benchmark outputs (``outputs`` in its result)."""

    kind: str = Field(json_schema_extra={"enum": list(KIND_NAMES)})
    """wer, output_length, allclose, waveform, tensor or spectral (the registry:
    verifier/qualitykinds.py); any other kind is refused, with a "did you mean"."""
    output: str = ""
    """Key in the result's ``outputs`` (wer, output_length, allclose)."""
    files: str | None = None
    """waveform/tensor: glob of files in the run's output dir (``*.wav``, ``*.npy``),
    matched by name between the candidate and the reference arm."""
    min_snr_db: float | None = None
    """waveform: every matched file's SNR (candidate vs reference) must reach
    this; default: Bk's own repeatability (its worst run-vs-run SNR less 6 dB,
    or 80 dB when Bk's audio is bit-exact across its runs)."""
    benchmark: str | None = None
    reference: str | None = None
    """wer: outputs key holding ground-truth texts; default: the reference arm's outputs."""
    max: float | None = Field(None, ge=0)
    """wer: bound on the candidate's corpus WER."""
    max_delta: float | None = None
    """wer: bound on WER(candidate) - WER(reference arm)."""
    max_change: float = Field(0.02, ge=0)
    """output_length: bound on |length ratio - 1| (0.02 = 2%)."""
    dtype: str | None = None
    """allclose: tolerance row to use (fp32, fp16, bf16); default: the arrays' dtype."""
    rtol: float | None = Field(None, ge=0)
    atol: float | None = Field(None, ge=0)
    max_db: float | None = Field(None, gt=0)
    """spectral: bound on the worst file's log-mel spectral distance to the
    reference arm's, in dB (default 0.1: honest numeric changes measure <= 0.015,
    audible ones >= 0.27)."""
    max_samples: int | None = Field(None, ge=1, le=MAX_SAMPLES_CAP)
    """waveform/spectral: the most samples (frames x channels) one output file
    may hold (default 33,554,432: ~35 min of 16 kHz mono); a longer file is an
    error naming it. It bounds the CPU of a comparison (a spectral one of a file
    at the default costs ~4-6 s here); memory stays bounded whatever it is."""

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, v: str) -> str:
        if v not in QUALITY_KINDS:
            raise ValueError(unknown_kind_message(v))
        return v

    @property
    def label(self) -> str:
        if self.kind == "spectral":
            bound = SPECTRAL_MAX_DB if self.max_db is None else self.max_db
            return f"spectral({self.files}) log-mel distance <= {bound:g} dB"
        if self.kind == "waveform":
            if self.min_snr_db is None:
                return f"waveform({self.files}) SNR >= Bk's repeatability"
            return f"waveform({self.files}) SNR >= {self.min_snr_db:g} dB"
        if self.kind == "tensor":
            return f"tensor({self.files})"
        if self.kind == "wer":
            return f"WER({self.output})"
        if self.kind == "output_length":
            return f"length({self.output}) within ±{self.max_change:.0%}"
        return f"allclose({self.output})"


class VerifierSettings(_Model):
    warmup: int = Field(1, ge=0)
    """Runs per arm at the start, discarded."""
    initial_pairs: int = Field(4, ge=2)
    """First look of the sequential design (pairs)."""
    step: int = Field(2, ge=2)
    """Pairs added between looks (2 = one ABBA block)."""
    max_pairs: int = Field(30, ge=2)
    seed: int | None = Field(None, ge=0, lt=2**63)
    """Seed of the run order and the bootstrap. Default: a fresh secret per
    verification (no run can predict the order), recorded in the verdict
    (``Verdict.seed``); set it to replay one."""
    calibration_pairs: int = Field(20, ge=2)
    """A/A pairs; their spread is pooled into every verification's early looks."""
    bootstrap: int = Field(10_000, ge=10_000)
    """Bootstrap resamples (at least 10,000)."""
    alpha: float = Field(0.01, gt=0, lt=0.5)
    """Overall one-sided false-accept rate of the objective's sequential test."""
    spending_gamma: float = Field(-2.5, ge=-8, le=4)
    """Hwang-Shih-DeCani alpha spending: 1 ~ Pocock (stops early), -4 ~ O'Brien-Fleming."""
    level: float = Field(0.95, gt=0.5, lt=1)
    """Confidence level of the descriptive intervals (metrics table)."""
    guard_level: float = Field(0.90, gt=0.5, lt=1)
    """Guards at the last look: a 90% interval; pass when it lies within the
    bound, fail when wholly beyond; still straddling it (at the cap): the
    guard is unclear and an accept goes to ``review``, never decided by the
    point estimate."""
    guard_interim_level: float = Field(0.98, gt=0.5, lt=1)
    """Guards at earlier looks: pass or fail early only when this wider
    interval lies within or wholly beyond the bound (else: more pairs)."""
    min_noise_margin: float = Field(0.0, ge=0)
    """Floor of the bias margin an accepted gain's interval must clear."""
    default_guards: bool = True
    require_external: bool = False
    """Refuse an objective or required guard that only the candidate's own
    process reports (source ``benchmark``)."""
    cross_check: bool = True
    """Compare a self-reported objective with the verifier's own clock."""
    feasibility_power: float = Field(0.90, ge=0.5, lt=1)
    """Calibration refuses a task unless a gain of ``min_gain`` would be
    accepted with this probability within ``max_pairs``; 0.5: ``min_gain`` is
    the gain accepted half the time (larger gains far more often)."""
    cpus: str | None = Field(None, pattern=r"^(auto(:\d+)?|\d+(-\d+)?(,\d+(-\d+)?)*)$")
    """Pin every run of both arms to this CPU set (``"0-1"``, ``"2,3"``):
    affinity for process isolation, ``cpuset_cpus`` for containers.
    ``"auto"`` (half the CPUs) or ``"auto:N"``: the least busy ones when the
    verification starts (``isolation.resolve_cpus``); the verdict's
    fingerprint records the set used (``extra["cpuset"]``)."""
    threads: int | None = Field(None, ge=1)
    """OMP/MKL/OpenBLAS/NumExpr thread counts (and ``RSI_THREADS``) for both
    arms; default with ``cpus``: one per pinned CPU. A benchmark's env wins."""
    accept_wild_rate: float = Field(0.1, ge=0, lt=1)
    """Every run counts in an accept, and no rule sees a run not measured: a
    candidate fast in most runs and very slow in a few (5x in one run of 10)
    is accepted only once enough of its runs were measured that slow runs at
    this rate would have shown with ``accept_confidence``: 51 runs at 0.1 and
    0.99. A run counts as slow when runs like it at this rate would make the
    candidate slower than Bk over every run (net of Bk's runs as slow against
    its own typical run), and each one seen raises the count: 79 with one,
    106 with two. When the pairs accept on fewer, the verifier measures that
    many confirmation pairs first (ABBA, every arm, each run on a fresh
    export: a run cannot tell it is one), which count in the gain over every
    run and in the guards; so does an accept whose guard is still unclear at
    ``max_pairs`` (then half as many pairs again as measured, until
    ``accept_max_runs``). Only accepts pay for it (an accept is a pull
    request); rejects never do. 0 turns the rule off (a verdict may then
    accept on runs that never showed a slow one); an accept on fewer runs
    than the default rule needs says so in its verdict's warnings."""
    accept_confidence: float = Field(0.99, gt=0, lt=1)
    """See ``accept_wild_rate``: 1 - the chance that slow runs at that rate
    stay hidden in an accept."""
    accept_max_runs: int = Field(160, ge=1)
    """The most candidate runs (the pairs' and the confirmation pairs'
    together) the verifier measures to confirm an accept; a candidate whose
    slow runs would need more is ``review``, and a guard still unclear there
    is ``review``. Must reach the runs an accept needs with none slow
    (``accept_wild_rate``, ``accept_confidence``) and ``max_pairs``."""

    def most_candidate_runs(self, per_start: int = 1) -> int:
        """The most runs a verification measures of each arm (warm-ups
        aside): ``max_pairs`` (pairs of sessions of ``per_start`` runs), or
        with the wild-run rule on the confirmation pairs an accept may take up
        to ``accept_max_runs``."""
        if self.accept_wild_rate <= 0:
            return self.max_pairs * per_start
        return max(self.max_pairs * per_start, self.accept_max_runs)

    def fewest_accept_runs(self, per_start: int = 1) -> int:
        """The fewest runs of each arm an accept measures (warm-ups aside):
        the first look's pairs (of sessions of ``per_start`` runs), or the
        candidate runs the wild-run rule needs when that is more."""
        return max(self.initial_pairs * per_start, self.accept_runs_needed())

    def accept_runs_needed(self) -> int:
        """Candidate runs an accept needs when none of them is slow: the
        smallest n with (1 - rate)^n <= (1 - confidence) / 2 (the same as
        ``stats.runs_needed(rate, confidence, 0)``; pure math here, so that
        reading a config imports no scipy); 0 with the rule off."""
        rate = self.accept_wild_rate
        if rate <= 0:
            return 0
        return max(1, math.ceil(math.log((1 - self.accept_confidence) / 2) / math.log1p(-rate) - 1e-9))


class Hidden(_Model):
    env: dict[str, str] = Field(default_factory=dict)
    """Set for verifier runs only."""
    seed_env: str | None = None
    """Runner env var whose value becomes ``RSI_SEED`` in verifier runs."""
    seed: Annotated[int | None, Field(ge=0, lt=2**63)] = None
    """A hidden seed drawn for one measurement, given as ``RSI_SEED`` in place of
    ``seed_env``'s value (the watch after merge draws a fresh one and records
    it); ``seed_env`` is still kept out of the runs' environment."""


class VerifyConfig(_Model):
    """What the verifier needs from the repo config. Embeddable in other models."""

    benchmarks: dict[str, BenchmarkConfig]
    objective: Objective
    guards: tuple[Guard, ...] = ()
    quality: tuple[QualityGuard, ...] = ()
    verifier: VerifierSettings = Field(default_factory=VerifierSettings)
    hidden: Hidden = Field(default_factory=Hidden)

    # ---- constructors ------------------------------------------------
    @classmethod
    def from_toml(cls, text: str) -> VerifyConfig:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError([f"not valid TOML: {e}"]) from None
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VerifyConfig:
        if not isinstance(data, dict):
            raise ConfigError(["the config must be a table of sections"])
        raw = {k: data[k] for k in OWN_SECTIONS if k in data}
        errors: list[str] = []
        if "benchmarks" not in raw:
            errors.append(
                "missing [benchmarks.<name>] section: declare at least one benchmark command"
            )
        if "objective" not in raw:
            errors.append(
                'missing [objective] section: set benchmark = "<name>", metric = "<metric>", '
                "min_gain = 0.02"
            )
        benchmarks = raw.get("benchmarks")
        if isinstance(benchmarks, dict):
            fixed = {}
            for name, b in benchmarks.items():
                if isinstance(b, dict):
                    b = {**b, "name": name}
                fixed[name] = b
            raw["benchmarks"] = fixed
        for key in ("guards", "quality"):
            if key in raw and isinstance(raw[key], dict):
                errors.append(f"'{key}' must be an array of tables: write [[{key}]], not [{key}]")
        if errors:
            raise ConfigError(errors)
        try:
            cfg = cls.model_validate(raw)
        except ValidationError as e:
            raise ConfigError([_pydantic_message(err) for err in e.errors()]) from None
        cfg._check()
        return cfg

    # ---- semantic checks ---------------------------------------------
    def _accept_runs_problems(self) -> list[str]:
        """``accept_max_runs`` must reach the candidate runs an accept needs
        (``stats.runs_needed``) and ``max_pairs``."""
        v = self.verifier
        if v.accept_wild_rate <= 0:
            return []
        need = v.accept_runs_needed()
        errors = []
        if v.accept_max_runs < need:
            errors.append(
                f"[verifier] accept_max_runs = {v.accept_max_runs} is below the {need} "
                f"candidate runs an accept needs (accept_wild_rate = {v.accept_wild_rate:g}, "
                f"accept_confidence = {v.accept_confidence:g}): nothing could ever be "
                f"accepted; raise accept_max_runs to at least {need} (the default 160 also "
                "leaves room for a few slow runs), or raise accept_wild_rate / lower "
                "accept_confidence"
            )
        ob = self.benchmarks.get(self.objective.benchmark)
        per = ob.per_start if ob is not None else 1
        most = v.max_pairs * per
        if v.accept_max_runs < most:
            also = f" x runs_per_start = {per}" if per > 1 else ""
            errors.append(
                f"[verifier] accept_max_runs = {v.accept_max_runs} is below max_pairs = "
                f"{v.max_pairs}{also}: the pairs alone would measure more candidate runs than an "
                f"accept may count; raise accept_max_runs to at least {max(need, most)}"
            )
        return errors

    def _check(self) -> None:
        errors: list[str] = []
        names = ", ".join(sorted(self.benchmarks)) or "(none)"
        if not self.benchmarks:
            errors.append("[benchmarks] is empty: declare at least one benchmark command")
        ob = self.objective
        if ob.benchmark not in self.benchmarks:
            errors.append(
                f"objective: unknown benchmark '{ob.benchmark}'; declared benchmarks: {names}"
                + _near(ob.benchmark, self.benchmarks)
            )
            every = {m for b in self.benchmarks.values() for m in b.known_metrics()}
            if self.benchmarks and ob.metric not in every:  # in the same pass, not the next
                errors.append(f"objective: unknown metric '{ob.metric}' in every benchmark"
                              + _near(ob.metric, every))
        else:
            known = self.benchmarks[ob.benchmark].known_metrics()
            if ob.metric not in known:
                errors.append(
                    f"objective: unknown metric '{ob.metric}'; benchmark '{ob.benchmark}' "
                    "declares: "
                    f"{_list(self.benchmarks[ob.benchmark])}" + _near(ob.metric, known)
                )
        for i, g in enumerate(self.guards):
            where = f"guards[{i}]"
            bounds = [
                b for b in (g.max_ratio, g.min_ratio, g.max_delta, g.min_delta) if b is not None
            ]
            if len(bounds) != 1:
                errors.append(
                    f"{where} ({g.metric}): give exactly one bound: max_ratio, min_ratio, "
                    "max_delta or min_delta"
                )
            bench = g.benchmark or ob.benchmark
            if bench not in self.benchmarks:
                errors.append(f"{where}: unknown benchmark '{bench}'; declared benchmarks: {names}")
                continue
            known = self.benchmarks[bench].known_metrics()
            if g.metric not in known:
                errors.append(
                    f"{where}: unknown metric '{g.metric}'; benchmark '{bench}' declares: "
                    f"{_list(self.benchmarks[bench])}" + _near(g.metric, known)
                )
                continue
            d = known[g.metric]
            if d == "higher" and g.max_ratio is not None:
                errors.append(
                    f"{where}: max_ratio on '{g.metric}' (higher is better) would cap a gain; "
                    f"bound a loss with min_ratio = {1 / g.max_ratio:.3g}"
                )
            if d == "lower" and g.min_ratio is not None:
                errors.append(
                    f"{where}: min_ratio on '{g.metric}' (lower is better) would cap a gain; "
                    f"bound a loss with max_ratio = {1 / g.min_ratio:.3g}"
                )
            if g.max_ratio is not None and g.max_ratio < 1:
                errors.append(
                    f"{where}: max_ratio = {g.max_ratio} < 1 would demand an improvement; use >= 1"
                )
            if g.min_ratio is not None and g.min_ratio > 1:
                errors.append(
                    f"{where}: min_ratio = {g.min_ratio} > 1 would demand an improvement; use <= 1"
                )
        for b in self.benchmarks.values():
            errors += b.problems()
        errors += self._external_problems()
        errors += self._accept_runs_problems()
        errors += self._self_report_problems()
        for i, q in enumerate(self.quality):
            where = f"quality[{i}] ({q.kind})"
            bench = q.benchmark or ob.benchmark
            if bench not in self.benchmarks:
                errors.append(f"{where}: unknown benchmark '{bench}'; declared benchmarks: {names}")
            errors += _quality_problems(q, where)
            if q.kind == "wer" and q.max is None and q.max_delta is None:
                errors.append(
                    f"{where}: give max (corpus WER bound) and/or max_delta (bound on the WER "
                    "increase)"
                )
            if q.kind == "allclose" and q.dtype is not None and q.dtype not in TOLERANCES:
                errors.append(f"{where}: unknown dtype '{q.dtype}'; known: {', '.join(TOLERANCES)}")
        v = self.verifier
        if v.max_pairs < v.initial_pairs:
            errors.append(
                f"verifier: max_pairs ({v.max_pairs}) is below initial_pairs "
                f"({v.initial_pairs}); raise max_pairs"
            )
        need = math.ceil(math.log2(1 / v.alpha) + 1e-9)
        if v.max_pairs < need:
            errors.append(
                f"verifier: max_pairs ({v.max_pairs}) is too few to ever accept: the "
                "signed-rank test needs "
                f"at least {need} pairs to reach p < {v.alpha:g}"
            )
        errors += self._runs_per_start_problems()
        for k in self.hidden.env:
            if k.startswith("RSI_"):
                errors.append(
                    f"hidden.env: '{k}' is reserved (RSI_* variables are set by the verifier)"
                )
        if errors:
            raise ConfigError(errors)

    def _runs_per_start_problems(self) -> list[str]:
        """``runs_per_start`` > 1 needs a hidden seed: each client run of a
        session gets its own request texts from it (``RSI_SEED`` per run
        index); with fixed inputs a response cache could make the later runs
        of a session faster than a fresh server would be."""
        if self.hidden.seed is not None or self.hidden.seed_env:
            return []
        return [
            f"benchmarks.{b.name}: runs_per_start = {b.runs_per_start} needs hidden inputs: "
            "every client run of a session must send its own request texts (the verifier "
            "gives each run its own RSI_SEED), else a response cache could make the later "
            "runs of a session faster; set [hidden] seed_env = \"NAME\" (a variable set on "
            "the runner only) and let the client draw its requests from RSI_SEED, or set "
            "runs_per_start = 1"
            for b in self.benchmarks.values()
            if b.runs_per_start > 1 and b.serving
        ]

    def _external_problems(self) -> list[str]:
        if not self.verifier.require_external:
            return []
        out = []
        named = [("objective", self.objective.benchmark, self.objective.metric)]
        named += [
            (f"required guard on '{g.metric}'", g.benchmark or self.objective.benchmark, g.metric)
            for g in self.guards
            if g.required
        ]
        for what, bench, metric in named:
            b = self.benchmarks.get(bench)
            if b is None or metric not in b.known_metrics():
                continue
            if b.metric_source(metric) == "benchmark":
                out.append(
                    f"{what}: '{metric}' of benchmark '{bench}' is reported only by the "
                    "candidate's own process, and [verifier] require_external = true; measure "
                    "it outside the candidate (serve + client, an evaluator with "
                    "evaluator_metrics, or a verifier metric: wall_s, cpu_s, peak_rss_mib, "
                    "startup_s)"
                )
        return out

    def _self_report_problems(self) -> list[str]:
        ob = self.objective
        b = self.benchmarks.get(ob.benchmark)
        if ob.self_reported is None or b is None or ob.metric not in b.known_metrics():
            return []
        source = b.metric_source(ob.metric)
        if ob.self_reported and source != "benchmark":
            return [f"objective: self_reported = true, but '{ob.metric}' is measured by the "
                    f"{source}, not reported by the candidate's process: remove the key"]
        if not ob.self_reported and source == "benchmark":
            return [f"objective: '{ob.metric}' of benchmark '{ob.benchmark}' is reported by the "
                    "benchmark's own process, where the candidate's code runs, and "
                    "self_reported = false: time a function with the verifier's harness "
                    '(entry = "package.module:function", inputs = ...), measure it with a '
                    "protected client (serve + client), or use a verifier metric (wall_s, "
                    "cpu_s); or accept the self-report with self_reported = true"]
        return []

    def self_report_note(self) -> str | None:
        """The verdict's line when the objective is self-reported, else None."""
        ob = self.objective
        b = self.benchmarks.get(ob.benchmark)
        if b is None or b.metric_source(ob.metric) != "benchmark":
            return None
        how = ("declared self_reported = true" if ob.self_reported
               else "the config names a metric the benchmark reports")
        return (f"the objective {ob.metric} is self-reported ({how}): the benchmark's own "
                "process, where the candidate's code runs, reports it; the verifier's clock "
                "only cross-checks the claim (time a function with the verifier's harness, "
                "entry = ..., or a protected client to measure it instead)")

    # ---- queries -----------------------------------------------------
    def benchmark(self, name: str | None = None) -> BenchmarkConfig:
        name = name or self.objective.benchmark
        try:
            return self.benchmarks[name]
        except KeyError:
            raise ConfigError(
                [
                    f"unknown benchmark '{name}'; declared benchmarks: "
                    f"{', '.join(sorted(self.benchmarks))}"
                ]
            ) from None

    def guards_for(self, benchmark: str, available: dict[str, Direction]) -> list[Guard]:
        """User guards on ``benchmark`` plus defaults for metrics in ``available``
        (metric -> direction, as actually observed) that have no guard of their own."""
        own = [g for g in self.guards if (g.benchmark or self.objective.benchmark) == benchmark]
        if not self.verifier.default_guards:
            return own
        guarded = {g.metric for g in own}
        out = list(own)
        for metric, d in sorted(available.items()):
            if metric in guarded:
                continue
            if benchmark == self.objective.benchmark and metric == self.objective.metric:
                continue
            bound = default_bound(metric, d)
            if bound is not None:
                out.append(Guard(metric=metric, benchmark=benchmark, max_ratio=bound, default=True))
        return out

    def quality_for(self, benchmark: str) -> list[QualityGuard]:
        return [q for q in self.quality if (q.benchmark or self.objective.benchmark) == benchmark]


#: Tolerances for allclose, per dtype (the torch.testing defaults).
TOLERANCES: dict[str, tuple[float, float]] = {
    # dtype: (rtol, atol)
    "fp64": (1e-7, 1e-7),
    "fp32": (1.3e-6, 1e-5),
    "fp16": (1e-3, 1e-5),
    "bf16": (1.6e-2, 1e-5),
}


def _quality_problems(q: QualityGuard, where: str) -> list[str]:
    """The keys ``q`` sets against its kind's parameter model (``qualitykinds``)."""
    given = {k: getattr(q, k) for k in q.model_fields_set if k != "kind"}
    out = kind_param_problems(q.kind, given, where)
    if q.kind == "tensor" and q.dtype is not None and q.dtype not in TOLERANCES:
        out.append(f"{where}: unknown dtype '{q.dtype}'; known: {', '.join(TOLERANCES)}")
    return out


def _near(name: str, options: Any) -> str:
    """ "; did you mean 'x'?" for the nearest of ``options`` (difflib), or ""."""
    import difflib

    near = difflib.get_close_matches(name, sorted(options), n=1, cutoff=0.6)
    return f"; did you mean '{near[0]}'?" if near else ""


def _list(b: BenchmarkConfig) -> str:
    declared = list(b.metrics)
    derived = [percentile_name(s, q) for s in b.samples for q in PERCENTILES]
    measured = list(b.measured())
    parts = declared + [m for m in derived if m not in declared]
    return ", ".join(parts) + (" (measured: " + ", ".join(measured) + ")" if measured else "")


def _pydantic_message(err: Mapping[str, Any]) -> str:
    loc = err.get("loc", ())
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += ("." if path else "") + str(part)
    msg = err.get("msg", "invalid")
    typ = err.get("type", "")
    if typ == "missing":
        return f"{path}: required field missing"
    if typ == "extra_forbidden":
        return (
            f"{path}: unknown key (check its spelling; see docs/contracts.md for the config layout)"
        )
    if typ == "value_error":  # a validator's own sentence (e.g. an unknown quality kind)
        return f"{path}: {msg.removeprefix('Value error, ')}"
    if typ == "literal_error" and loc and loc[-2:-1] and loc[-2] in ("metrics", "samples"):
        return f'{path}: direction must be "higher" or "lower", got {err.get("input")!r}'
    return f"{path}: {msg} (got {err.get('input')!r})"
