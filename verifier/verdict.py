"""The verdict record: what the verifier concludes about one candidate.

This is the contract between the verifier and everything above it (the
harness's ledger, the bot's reports). It is an immutable, versioned pydantic
record (schema ``rsi.verdict/1``); readers refuse other schema versions.

Conventions
-----------
* ``ratio`` is always candidate / reference in the metric's own units
  (1.10 means the metric is 10% larger), whatever its direction.
* ``gain`` is the improvement in the metric's better direction:
  ``ratio - 1`` for "higher" metrics and ``1/ratio - 1`` for "lower" ones
  (0.25 means 25% better). Intervals are given for both.
* An infrastructure failure is ``decision == "error"`` with ``error`` set; it is
  never a regression and never a zero.
"""

from __future__ import annotations

from datetime import datetime, timezone
from enum import StrEnum
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA: Final = "rsi.verdict/1"


class Decision(StrEnum):
    """What the verifier concludes about one candidate.

    The values are the strings written in verdict JSON, so a member compares
    equal to its string (``Decision.ACCEPT == "accept"``) and older verdicts
    read back unchanged. Precedence when several apply (``judge``):
    reject > inconclusive > review > accept; ``error`` is an infrastructure
    failure, never a regression.
    """

    ACCEPT = "accept"
    REVIEW = "review"  # accepted only after a human looks (a large gain, an unclear guard)
    REJECT = "reject"
    INCONCLUSIVE = "inconclusive"  # the objective still unclear at the cap of pairs
    ERROR = "error"


Direction = Literal["higher", "lower"]
GuardStatus = Literal["pass", "fail", "unclear", "skipped"]
Against = Literal["bk", "b0"]
MetricSource = Literal[
    "verifier", "client", "evaluator", "harness", "benchmark", "declared", "measured", "samples"
]
ARM_LABEL = {"bk": "Bk", "b0": "B0", "candidate": "candidate"}
"""How reasons, details and warnings name an arm (``against`` is ``bk`` or ``b0``)."""


def arm_label(arm: str) -> str:
    """``ARM_LABEL``'s word for ``arm``, or ``arm`` itself."""
    return ARM_LABEL.get(arm, arm)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Fingerprint(_Frozen):
    """Where a measurement was taken. Results from different fingerprints are
    never compared (see ``Fingerprint.comparable_key``)."""

    cpu_model: str = ""
    cpu_count: int = 0
    machine: str = ""
    os: str = ""
    python: str = ""
    accelerator: str = "cpu"  # e.g. "cpu", "NVIDIA H200", "Ascend910B3"
    accelerator_count: int = 0
    driver: str = ""
    firmware: str = ""
    cuda: str = ""
    cann: str = ""
    torch: str = ""
    torch_npu: str = ""
    container_image: str = ""
    extra: dict[str, str] = Field(default_factory=dict)

    def comparable_key(self) -> tuple[str | int, ...]:
        """Fields that must match for two results to be comparable."""
        return (
            self.cpu_model,
            self.cpu_count,
            self.machine,
            self.accelerator,
            self.accelerator_count,
            self.driver,
            self.firmware,
            self.cuda,
            self.cann,
            self.torch,
            self.torch_npu,
            self.container_image,
        )


class Interval(_Frozen):
    low: float
    high: float
    level: float = 0.95


class MetricComparison(_Frozen):
    """One metric across the arms. Values are medians over the runs (for
    percentile metrics built from samples: the pooled percentile)."""

    name: str
    direction: Direction
    source: MetricSource = "benchmark"
    """Who measured it: ``verifier`` (from outside), ``client`` (the protected
    load generator), ``evaluator`` (the protected evaluator), ``benchmark``
    (the candidate's own process). Older verdicts may say declared/measured/samples."""
    unit: str = ""
    b0: float | None = None
    bk: float | None = None
    candidate: float | None = None
    ratio_vs_bk: float | None = None
    ratio_vs_bk_ci: Interval | None = None
    ratio_vs_b0: float | None = None
    ratio_vs_b0_ci: Interval | None = None


class ObjectiveResult(_Frozen):
    benchmark: str
    metric: str
    direction: Direction
    ratio: float | None = None  # candidate / Bk
    ratio_ci: Interval | None = None
    gain: float | None = None  # improvement vs Bk in the better direction
    gain_ci: Interval | None = None
    gain_vs_b0: float | None = None
    p_value: float | None = None
    min_gain: float = 0.0
    noise_margin: float = 0.01
    candidate_runs: int | None = None
    """The candidate's measured runs the objective judged (its pairs and its
    confirmation pairs; no warm-up): an accept needs enough of them that
    slow runs at ``[verifier] accept_wild_rate`` would have shown (issue 29)."""
    confirmation_pairs: int = Field(0, ge=0)
    """Pairs measured after the design's to confirm an accept (the pairs
    accepted on fewer candidate runs than an accept needs, or the gain over
    every run fell short by a little); the verdict's warnings say why."""


class GuardResult(_Frozen):
    name: str  # human label, e.g. "latency_p99_s <= 1.05x" or "WER"
    kind: Literal[
        "ratio",
        "delta",
        "failed_requests",
        "output_length",
        "wer",
        "allclose",
        "waveform",
        "tensor",
        "spectral",
    ]
    metric: str = ""
    against: Against = "bk"
    bound: str = ""  # the bound as text, e.g. "<= 1.05x", "<= +0.01"
    value: float | None = None  # observed ratio/delta/WER...
    ci: Interval | None = None
    status: GuardStatus = "pass"
    detail: str = ""
    source: MetricSource | None = None  # for metric guards: who measured the metric


class CellResult(_Frozen):
    """One cell of a deployment matrix (``verifier.matrix``): its settings, the
    objective's gain vs Bk there with its interval, its guards and metrics."""

    setting: dict[str, int | float | str]
    """The cell's value of each setting, e.g. ``{"concurrency": 4}``."""
    primary: bool = False
    """The cell that decided the objective (its guards are the verdict's own)."""
    measured: bool = True
    """False: not measured (the primary cell did not accept the candidate)."""
    pairs: int = 0
    metric: str = ""
    gain: float | None = None
    """The objective's metric, improvement vs Bk (0.25 = 25% better)."""
    gain_ci: Interval | None = None
    guards: tuple[GuardResult, ...] = ()
    metrics: tuple[MetricComparison, ...] = ()
    note: str = ""
    duration_s: float = 0.0
    """Wall time the cell's measurement took (what the matrix costs; 0 for the primary)."""

    @property
    def label(self) -> str:
        """``concurrency=4, cpus=0-1``."""
        return ", ".join(f"{k}={v}" for k, v in self.setting.items())

    @property
    def failed(self) -> tuple[GuardResult, ...]:
        return tuple(g for g in self.guards if g.status == "fail")


class RunError(_Frozen):
    stage: str  # "baseline", "candidate", "b0", "config", "fingerprint", ...
    message: str
    stderr_tail: str = ""


class Verdict(_Frozen):
    schema_: Literal["rsi.verdict/1"] = Field(SCHEMA, alias="schema")
    decision: Decision
    reason: str
    benchmark: str = ""
    objective: ObjectiveResult | None = None
    metrics: tuple[MetricComparison, ...] = ()
    guards: tuple[GuardResult, ...] = ()
    tradeoffs: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    pairs: int = 0
    runs: int = 0
    shas: dict[str, str] = Field(default_factory=dict)  # keys: "b0", "bk", "candidate"
    fingerprint: Fingerprint | None = None
    error: RunError | None = None
    started_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    duration_s: float = 0.0
    # optional additions (readers of older verdicts get the defaults):
    # the benchmark's fixed settings, and whether a gain above 10x quarantined the candidate
    settings: dict[str, str | int | float | bool] = Field(default_factory=dict)
    quarantined: bool = False
    # the seed of the run order and the bootstrap: a secret drawn per verification
    # (or ``[verifier] seed``), told only afterwards; ``[verifier] seed = <it>`` replays
    seed: int | None = None
    # the deployment matrix's cells (the primary first); empty without a matrix
    cells: tuple[CellResult, ...] = ()

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    def to_json(self, **kw: Any) -> str:
        return self.model_dump_json(by_alias=True, **kw)

    @classmethod
    def from_json(cls, text: str | bytes) -> "Verdict":
        return cls.model_validate_json(text)

    @property
    def accepted(self) -> bool:
        return self.decision == Decision.ACCEPT
