"""Guards: metric bounds vs Bk and B0, failed requests, WER, output length, allclose."""

from __future__ import annotations

import numpy as np
import pytest

from verifier.config import QualityGuard, VerifyConfig
from verifier.guards import Evaluator
from verifier.judge import decide
from verifier.measure import Session
from verifier.protocol import BenchResult
from verifier.quality import (
    allclose,
    corpus_wer,
    evaluate,
    load_tensor,
    normalize_text,
    output_length,
    snapshot,
)
from verifier.runner import RunRecord
from verifier.stats import ObjectiveLook, bootstrap_ci

CFG = """
[benchmarks.tts]
command = "true"
[benchmarks.tts.metrics]
throughput = "higher"
latency_s_mean = "lower"
[benchmarks.tts.samples]
latency_s = "lower"
[objective]
benchmark = "tts"
metric = "throughput"
min_gain = 0.02
[[guards]]
metric = "latency_s_mean"
max_ratio = 1.02
"""


def _session(
    arms: dict[str, dict], n: int = 12, seed: int = 0, cfg: str = CFG
) -> tuple[Session, VerifyConfig]:
    """A session filled with fabricated runs: arm -> "
    "{"lat": factor, "rss": MiB, "failed": k, "outputs": {}}."""
    config = VerifyConfig.from_toml(cfg)
    bench = config.benchmark()
    s = Session(bench, {a: f"/nonexistent/{a}" for a in arms}, seed=seed)
    rng = np.random.default_rng(seed)
    for arm, spec in arms.items():
        for i in range(n):
            noise = float(np.exp(rng.normal(0, 0.002)))
            lat = 0.1 * spec.get("lat", 1.0) * noise
            s.records[arm].append(
                RunRecord(
                    ok=True,
                    wall_s=1.0 * noise,
                    peak_rss_mib=spec.get("rss", 100.0) * noise,
                    result=BenchResult(
                        metrics={"throughput": 10 / lat, "latency_s_mean": lat},
                        samples={
                            "latency_s": tuple(
                                lat * x for x in (0.8, 0.9, 1.0, 1.1, 1.2 * spec.get("tail", 1.0))
                            )
                        },
                        outputs=spec.get("outputs", {}),
                        counts={"requests": 5, "failed": spec.get("failed", 0) if i == 3 else 0},
                    ),
                )
            )
    return s, config


def _by(results, metric, against="bk"):
    return next(g for g in results if g.metric == metric and g.against == against)


def test_b0_vs_bk_compounding_is_caught():
    # B0 was 2% faster than Bk (Bk already lost 2%); the candidate loses 1% more.
    s, cfg = _session({"b0": {"lat": 0.98}, "bk": {"lat": 1.0}, "candidate": {"lat": 1.01}})
    with s:
        ev = Evaluator(cfg, "tts", dict(s.arms))
        res = ev.guards(s)
    vs_bk, vs_b0 = _by(res, "latency_s_mean", "bk"), _by(res, "latency_s_mean", "b0")
    assert vs_bk.status == "pass" and vs_bk.value == pytest.approx(1.01, abs=0.003)
    assert vs_b0.status == "fail" and vs_b0.value == pytest.approx(1.01 / 0.98, abs=0.003)
    decision, reason, _ = decide(_accepting_look(), res, 30)
    assert decision == "reject" and "vs B0" in reason


def _accepting_look(gain: float = 0.05) -> ObjectiveLook:
    est = bootstrap_ci(np.full(10, np.log1p(gain)) + np.linspace(-1e-3, 1e-3, 10))
    return ObjectiveLook(10, gain, gain - 0.01, gain + 0.01, est, 0.001, "accept", "gain ok")


def test_default_guards_tail_latency_and_memory():
    s, cfg = _session({"bk": {}, "candidate": {"rss": 110.0, "tail": 1.5}})
    with s:
        res = Evaluator(cfg, "tts", dict(s.arms)).guards(s)
    rss = _by(res, "peak_rss_mib")
    assert rss.status == "fail" and "[default]" in rss.name and rss.bound == "<= 1.02x"
    p95 = _by(res, "latency_p95_s")
    assert p95.status == "fail" and p95.bound == "<= 1.1x" and "[default]" in p95.name
    assert not any(g.metric == "latency_p99_s" for g in res)  # p99 of few requests: no default
    assert not any(g.metric == "latency_p50_s" for g in res)  # no default guard on medians


def test_guard_straddling_its_bound_gives_review():
    s, cfg = _session({"bk": {}, "candidate": {"lat": 1.02}}, n=6)
    with s:
        res = Evaluator(cfg, "tts", dict(s.arms)).guards(s)
    g = _by(res, "latency_s_mean")
    assert g.status == "unclear" and g.ci.low < 1.02 < g.ci.high
    decision, reason, _ = decide(_accepting_look(), res, 6)
    assert decision == "review" and "guard is undecided" in reason


def test_guard_straddling_its_bound_at_the_last_look_is_undecided_and_the_accept_a_review():
    """Issue 29: at the cap a straddle is never decided by its point: the guard
    stays unclear, saying so and what would decide it, and the accept becomes
    review naming the guard."""
    s, cfg = _session({"bk": {}, "candidate": {"lat": 1.02}}, n=6)
    with s:
        res = Evaluator(cfg, "tts", dict(s.arms)).guards(s, final=True)
    g = _by(res, "latency_s_mean")
    assert g.ci.low < 1.02 < g.ci.high and g.ci.level == pytest.approx(0.90)
    assert g.status == "unclear" and "never decided by its point" in g.detail
    assert "more pairs" in g.detail
    decision, reason, _ = decide(_accepting_look(), res, 6)
    assert decision == "review" and "undecided at the cap" in reason
    assert "latency_s_mean" in reason and "max_pairs (now 6)" in reason


def test_any_failed_request_rejects():
    s, cfg = _session({"bk": {}, "candidate": {"failed": 1}})
    with s:
        res = Evaluator(cfg, "tts", dict(s.arms)).guards(s)
    f = next(g for g in res if g.kind == "failed_requests")
    assert f.status == "fail" and f.value == 1
    assert decide(_accepting_look(), res, 30)[0] == "reject"


def test_delta_guard():
    cfg = CFG + '\n[[guards]]\nmetric = "wall_s"\nmax_delta = 0.5\n'
    s, config = _session({"bk": {}, "candidate": {}}, cfg=cfg)
    with s:
        res = Evaluator(config, "tts", dict(s.arms)).guards(s)
    g = _by(res, "wall_s")
    assert g.kind == "delta" and g.status == "pass" and abs(g.value) < 0.01


def test_suspicious_and_quarantined_gains():
    assert decide(_accepting_look(1.5), [], 30)[0] == "review"
    d, reason, q = decide(_accepting_look(15.0), [], 30)
    assert d == "review" and q and "QUARANTINED" in reason
    assert decide(_accepting_look(0.05), [], 30)[0] == "accept"


# ---- WER ----------------------------------------------------------------------


def test_wer_one_normalization_both_sides():
    assert normalize_text("  The CAT, sat!  ") == "the cat sat"
    assert corpus_wer(["The cat sat."], ["the cat sat"]) == 0.0
    # corpus WER: total errors over total reference words
    assert corpus_wer(["a b c d", "e f"], ["a b c x", "e f"]) == pytest.approx(1 / 6)
    assert corpus_wer(["", "a b"], ["x", "a b"]) == pytest.approx(1 / 2)


def _quality_eval(cfg_extra: str, cand_out: dict, ref_out: dict, tmp_path=None):
    s, config = _session({"bk": {}, "candidate": {}}, n=3, cfg=CFG + cfg_extra)
    with s:
        ev = Evaluator(config, "tts", dict(s.arms))
        guards = config.quality_for("tts")
        bases = [tmp_path] if tmp_path else []
        ev.snaps = {
            "candidate": [snapshot(cand_out, guards, bases)],
            "bk": [snapshot(ref_out, guards, bases)],
        }
        return [g for g in ev.guards(s) if g.kind in ("wer", "output_length", "allclose")]


def test_wer_guard_against_reference_arm_and_ground_truth():
    extra = '\n[[quality]]\nkind = "wer"\noutput = "texts"\nmax = 0.1\n'
    same = _quality_eval(extra, {"texts": ["Hello, world!"]}, {"texts": ["hello world"]})
    assert same[0].status == "pass" and same[0].value == 0
    bad = _quality_eval(extra, {"texts": ["hello word"]}, {"texts": ["hello world"]})
    assert bad[0].status == "fail" and bad[0].value == pytest.approx(0.5)
    extra_gt = (
        '\n[[quality]]\nkind = "wer"\noutput = "texts"\nreference = "truth"\nmax_delta = 0.01\n'
    )
    truth = ["the cat sat on the mat", "a b c d e f g h i j"]
    ref = {"texts": ["the cat sat on a mat", "a b c d e f g h i j"], "truth": truth}
    worse = _quality_eval(extra_gt, {"texts": ["the cat sat on a hat", "a b c d e f g h i j"]}, ref)
    assert worse[0].status == "fail" and "WER rose by" in worse[0].detail
    equal = _quality_eval(
        extra_gt, {"texts": ["The cat sat on a mat.", "a b c d e f g h i j"]}, ref
    )
    assert equal[0].status == "pass"
    missing = _quality_eval(extra, {}, {"texts": ["x"]})
    assert missing[0].status == "fail" and "no outputs.texts" in missing[0].detail


def test_output_length_guard():
    extra = '\n[[quality]]\nkind = "output_length"\noutput = "audio_s"\nmax_change = 0.02\n'
    ok = _quality_eval(extra, {"audio_s": [1.0, 2.0, 3.01]}, {"audio_s": [1.0, 2.0, 3.0]})
    assert ok[0].status == "pass"
    short = _quality_eval(extra, {"audio_s": [1.0, 2.0, 2.0]}, {"audio_s": [1.0, 2.0, 3.0]})
    assert short[0].status == "fail" and "-16.67%" in short[0].detail
    assert output_length(["a b c", "d"]) == 4
    assert output_length(3.5) == 3.5


# ---- allclose -----------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype, rel_err, ok",
    [
        ("float32", 1e-7, True),
        ("float32", 1e-4, False),
        ("float16", 5e-4, True),
        ("float16", 5e-3, False),
    ],
)
def test_allclose_per_dtype(tmp_path, dtype, rel_err, ok):
    rng = np.random.default_rng(0)
    ref = (rng.normal(0, 1, 64) + 3).astype(dtype)
    cand = (ref.astype(np.float64) * (1 + rel_err)).astype(dtype)
    np.save(tmp_path / "ref.npy", ref)
    np.save(tmp_path / "cand.npy", cand)
    g = QualityGuard(kind="allclose", output="t")
    res = allclose([load_tensor("cand.npy", tmp_path)], [load_tensor("ref.npy", tmp_path)], g)
    assert res[0] is ok, res[2]


def test_allclose_bf16_row_and_overrides():
    ref = np.linspace(1, 2, 50)
    cand = ref * (1 + 5e-3)
    g = QualityGuard(kind="allclose", output="t", dtype="bf16")
    assert allclose([(cand, "fp64")], [(ref, "fp64")], g)[0]  # bf16 tolerance: rtol 1.6e-2
    assert not allclose(
        [(cand, "fp64")], [(ref, "fp64")], QualityGuard(kind="allclose", output="t", dtype="fp32")
    )[0]
    assert allclose(
        [(cand, "fp64")], [(ref, "fp64")], QualityGuard(kind="allclose", output="t", rtol=1e-2)
    )[0]


def test_allclose_refuses_shape_dtype_and_nan_changes():
    g = QualityGuard(kind="allclose", output="t")
    a = np.ones(4, dtype=np.float32)
    assert not allclose([(np.ones(5, dtype=np.float32), "fp32")], [(a, "fp32")], g)[0]
    assert "dtype" in allclose([(a.astype(np.float16), "fp16")], [(a, "fp32")], g)[2]
    nan = a.copy()
    nan[0] = np.nan
    assert not allclose([(nan, "fp32")], [(a, "fp32")], g)[0]


def test_allclose_guard_reads_files_at_snapshot_time(tmp_path):
    np.save(tmp_path / "out.npy", np.ones(8, dtype=np.float32))
    extra = '\n[[quality]]\nkind = "allclose"\noutput = "logits"\n'
    ok = _quality_eval(extra, {"logits": "out.npy"}, {"logits": "out.npy"}, tmp_path)
    assert ok[0].status == "pass"
    gone = _quality_eval(extra, {"logits": "missing.npy"}, {"logits": "out.npy"}, tmp_path)
    assert gone[0].status == "fail" and "not found" in gone[0].detail


@pytest.mark.torch
def test_allclose_reads_torch_files(tmp_path):
    import torch

    t = torch.linspace(0, 1, 16, dtype=torch.bfloat16)
    torch.save(t, tmp_path / "a.pt")
    arr, name = load_tensor("a.pt", tmp_path)
    assert name == "bf16" and arr.shape == (16,)
    g = QualityGuard(kind="allclose", output="t")
    assert allclose([(arr * (1 + 1e-3), name)], [(arr, name)], g)[0]


def _guard_rate(ratio: float, trials: int, seed: int) -> dict[str, float]:
    """The default tail guard (p95 <= 1.10x, 16 requests a run, request spread
    sigma 0.3, run noise 3%) judged like the judge does at every look."""
    from verifier.config import VerifierSettings
    from verifier.guards import PERCENTILE_BOOT
    from verifier.stats import Design, bound_status, clustered_percentile_ci

    v = VerifierSettings()
    looks = Design.from_schedule(v.initial_pairs, v.step, v.max_pairs).looks
    out = {"pass": 0, "fail": 0, "unclear": 0}
    for t in range(trials):
        rng = np.random.default_rng(seed + t)
        runs = {"c": [], "b": []}
        for n in looks:
            while len(runs["b"]) < n:
                for arm, f in (("b", 1.0), ("c", ratio)):
                    runs[arm].append(f * np.exp(rng.normal(0, 0.03)) * rng.lognormal(0, 0.3, 16))
            final = n == looks[-1]
            level = v.guard_level if final else v.guard_interim_level
            est = clustered_percentile_ci(
                runs["c"], runs["b"], 95, seed=t, n_boot=PERCENTILE_BOOT, level=level
            )
            lo, hi = np.exp([est.low, est.high])
            st = bound_status(lo, hi, upper=1.10)
            if st != "unclear":
                break
        out[st] += 1
    return {k: c / trials for k, c in out.items()}


def test_default_tail_guard_error_rates_on_fixed_seeds():
    """Issue 29: a straddle at the cap is review, never decided by its point:
    no regression never fails and the bound squared passes only where an
    interim look clears it (as before); what the
    interval leaves open is unclear (the quality table counts it as review:
    at guard_level 0.90 about 17-19% of honest candidates on this statistic,
    p95 of 16 requests a run)."""
    ok = _guard_rate(1.0, 20, seed=1_000)
    assert ok["fail"] == 0 and ok["pass"] >= 0.5, ok
    bad = _guard_rate(1.21, 20, seed=2_000)
    assert bad["pass"] <= 0.05 and bad["fail"] >= 0.5, bad  # 1 of 20 passed at an interim look


# ---- quality.evaluate: one guard on two snapshots -------------------------------------


def test_evaluate_judges_one_quality_guard_on_two_snapshots():
    config = VerifyConfig.from_toml(
        CFG + '\n[[quality]]\nkind = "wer"\noutput = "texts"\nmax = 0.1\n'
    )
    (q,) = config.quality_for("tts")
    ref = snapshot({"texts": ["hello world"]}, [q], [])
    warned: list[str] = []
    ok = evaluate(q, snapshot({"texts": ["Hello, world!"]}, [q], []), ref, "b0", warned.append)
    assert (ok.name, ok.kind, ok.against, ok.status) == ("WER(texts)", "wer", "b0", "pass")
    assert ok.metric == "outputs.texts" and ok.bound == "<= 10.00%" and ok.value == 0
    assert ok.detail == "WER 0.00% against B0's outputs" and warned == []
    bad = evaluate(q, snapshot({"texts": ["hello word"]}, [q], []), ref, "bk", warned.append)
    assert bad.status == "fail" and bad.detail.endswith("WER 50.00% > 10.00%") and warned == []
    # the reference arm lacks the output: not checked, said in a warning; never a pass
    gone = evaluate(q, ref, snapshot({}, [q], []), "bk", warned.append)
    assert gone.status == "skipped" and gone.detail == "Bk: the result has no outputs.texts"
    assert warned == [
        "quality guard WER(texts): Bk lacks outputs.texts (the result has no outputs.texts); "
        "not checked"
    ]
    # the candidate's output is not texts: a failure, not an exception
    odd = evaluate(q, {"texts": 3}, ref, "bk")
    assert odd.status == "fail" and "must be a string or a list of strings" in odd.detail


def test_evaluate_file_guards_skip_without_reference_files(tmp_path):
    config = VerifyConfig.from_toml(CFG + '\n[[quality]]\nkind = "tensor"\nfiles = "*.npy"\n')
    (q,) = config.quality_for("tts")
    cand_dir, ref_dir = tmp_path / "c", tmp_path / "r"
    cand_dir.mkdir()
    ref_dir.mkdir()
    np.save(cand_dir / "a.npy", np.arange(4, dtype=np.float32))
    np.save(ref_dir / "a.npy", np.arange(4, dtype=np.float32))
    cand = snapshot({}, [q], [cand_dir])
    ok = evaluate(q, cand, snapshot({}, [q], [ref_dir]), "bk")
    assert ok.status == "pass" and ok.metric == "files *.npy" and ok.bound == "per-dtype tolerance"
    warned: list[str] = []
    empty = evaluate(q, cand, snapshot({}, [q], [tmp_path / "none"]), "b0", warned.append)
    assert empty.status == "skipped" and empty.detail.startswith("B0: cannot list the output dir")
    assert warned == [f"quality guard {q.label}: {empty.detail}; not checked"]
    assert (
        evaluate(q, {}, snapshot({}, [q], [ref_dir]), "bk").detail == "candidate: no candidate run"
    )


UNITS_CFG = CFG.replace(
    "[benchmarks.tts.samples]",
    '[benchmarks.tts.units]\nthroughput = "requests/s"\nlatency_s = "s"\n[benchmarks.tts.samples]',
)


def test_metric_rows_carry_the_declared_unit_never_one_guessed_from_the_name():
    """A name says nothing about a unit (``tokens_per_s`` ends in ``_s`` and is a
    rate): the config's units table and the verifier's own say it all."""
    s, cfg = _session({"bk": {}, "candidate": {}}, cfg=UNITS_CFG)
    with s:
        rows = {m.name: m.unit for m in Evaluator(cfg, "tts", dict(s.arms)).metrics(s)}
    assert rows["throughput"] == "request/s"  # declared (old code: from the name's ending, "")
    assert rows["latency_p95_s"] == "s"  # the series' declared unit
    assert rows["latency_s_mean"] == ""  # not declared: no unit rather than a guess
    assert rows["wall_s"] == "s" and rows["peak_rss_mib"] == "MiB"  # the verifier's own
