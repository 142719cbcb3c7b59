"""The example target (examples/tiny-tts) and the demo patches: the config
parses, the knobs exist, the benchmark follows the protocol, every patch applies
(alone and after any subset of the others), the good ones keep the outputs and
the "too good to be true" ones change them."""

from __future__ import annotations

import importlib
import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tiny-tts"
PATCHES = ROOT / "examples" / "demo-patches"
GOOD = sorted(PATCHES.glob("0*.patch"))
BAD = sorted(PATCHES.glob("9*.patch"))


def _copy(tmp_path: Path, name: str = "tts") -> Path:
    dst = tmp_path / name
    shutil.copytree(EXAMPLE, dst, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def _apply(repo: Path, patch: Path, check: bool = False) -> subprocess.CompletedProcess:
    args = ["git", "apply", "--whitespace=nowarn"] + (["--check"] if check else []) + [str(patch)]
    return subprocess.run(args, cwd=repo, check=False, capture_output=True, text=True)


# ------------------------------------------------------------ no torch needed


def test_config_is_a_valid_task():
    from harness.agents.tuner import read_knob
    from harness.spec import build_task

    spec = build_task((EXAMPLE / ".rsi" / "config.toml").read_text(), None, "t")
    assert spec.verify.objective.metric == "throughput"
    assert {k.name for k in spec.knobs} == {"threads", "rope_variant"}
    for k in spec.knobs:  # the tuner can find and read every knob
        assert read_knob(EXAMPLE, k) in [str(v) for v in k.values]
    assert spec.policy.editable == ["tiny_tts/**"] and "bench/**" in spec.policy.protected
    kinds = {q.kind for q in spec.verify.quality}
    assert kinds == {"wer", "output_length"}


def test_patches_pass_the_edit_policy_and_name_a_hypothesis():
    from harness.agents.replay import patch_hypothesis
    from harness.policy import check_diff
    from harness.spec import build_task

    spec = build_task((EXAMPLE / ".rsi" / "config.toml").read_text(), None, "t")
    assert len(GOOD) >= 4 and len(BAD) >= 1
    for p in GOOD + BAD:
        text = p.read_text()
        res = check_diff(text, spec.policy, extra_protected=spec.protected_paths())
        assert res.ok, (p.name, res.reason())
        assert res.files == ["tiny_tts/pipeline.py"]
        hyp = patch_hypothesis(text, p.name)
        assert hyp and not hyp.startswith("["), hyp


def test_patches_are_outside_the_target():
    assert not list(EXAMPLE.rglob("*.patch"))


@pytest.mark.parametrize("subset", [s for n in range(len(GOOD) + 1) for s in itertools.combinations(range(len(GOOD)), n)])
def test_every_subset_of_good_patches_applies_then_each_bad_one(tmp_path, subset):
    """With keep=advance a rejected patch is not in Bk: the later ones must
    still apply, in order, on whatever was kept."""
    repo = _copy(tmp_path)
    for i in subset:
        r = _apply(repo, GOOD[i])
        assert r.returncode == 0, (GOOD[i].name, r.stderr)
    for bad in BAD:
        r = _apply(repo, bad, check=True)
        assert r.returncode == 0, (bad.name, r.stderr)


def test_text_roundtrip():
    sys.path.insert(0, str(EXAMPLE))
    try:
        text = importlib.import_module("tiny_tts.text")
    finally:
        sys.path.remove(str(EXAMPLE))
    assert text.prompts(3, seed=1) == text.prompts(3, seed=1) != text.prompts(3, seed=2)
    ids = text.encode("The cat sat on the mat")
    codes = [w * text.FRAMES_PER_WORD + f for w in ids for f in range(text.FRAMES_PER_WORD)]
    assert text.transcribe(codes) == "the cat sat on the mat"
    assert text.transcribe(codes[:8]) == "the cat"
    with pytest.raises(ValueError, match="not in the tiny-tts vocabulary"):
        text.encode("the zebra")


# ---------------------------------------------------------------- with torch


def _bench(repo: Path, tmp_path: Path, *args: str) -> tuple[dict, str]:
    out = tmp_path / f"result-{repo.name}.json"
    env = {**os.environ, "RSI_RESULT": str(out)}
    proc = subprocess.run([sys.executable, "bench/tts.py", *args], cwd=repo, env=env, check=False, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text()), proc.stdout


@pytest.mark.torch
def test_pipeline_streams_deterministic_audio(monkeypatch):
    monkeypatch.delenv("RSI_KERNEL_ROPE", raising=False)  # the server sets it: undone after the test
    sys.path.insert(0, str(EXAMPLE))
    try:
        for mod in [m for m in sys.modules if m == "tiny_tts" or m.startswith("tiny_tts.")]:
            del sys.modules[mod]
        model = importlib.import_module("tiny_tts.model")
        pipeline = importlib.import_module("tiny_tts.pipeline")
        text = importlib.import_module("tiny_tts.text")
    finally:
        sys.path.remove(str(EXAMPLE))
    m = model.build(seed=0)
    ref = model.reference_audio(seed=0)
    with pipeline.TTSServer(m, ref) as server:
        chunks = list(server.synthesize("the small red boat sings"))
        again = list(server.synthesize("the small red boat sings"))
    codes = [c for ch in chunks for c in ch.codes]
    assert len(codes) == 5 * text.FRAMES_PER_WORD
    assert [len(ch.codes) for ch in chunks] == [8, 8, 4]  # streamed in chunks
    assert sum(len(ch.audio) for ch in chunks) == len(codes) * model.HOP
    assert text.transcribe(codes) == "the small red boat sings"
    assert codes == [c for ch in again for c in ch.codes]
    assert all(-1.0 <= x <= 1.0 for x in chunks[0].audio)
    assert not server._worker.is_alive()  # closing stops the stats worker
    assert os.environ.get("RSI_KERNEL_ROPE") == "eager"  # the rope_variant knob, applied at server start


@pytest.mark.torch
def test_benchmark_follows_the_protocol(tmp_path):
    from verifier.protocol import load_result

    repo = _copy(tmp_path)
    data, stdout = _bench(repo, tmp_path, "--requests", "3")
    assert stdout.splitlines()[0] == "READY"
    res = load_result(tmp_path / "result-tts.json", expected_metrics=["throughput", "ttfa_p50_s", "rtf"])
    assert res.counts == {"requests": 3, "failed": 0}
    assert res.metrics["throughput"] > 0 and len(res.samples["latency_s"]) == 3
    assert res.outputs["transcripts"] == res.outputs["references"]
    assert res.outputs["audio_samples"] == [len(t.split()) * 4 * 320 for t in res.outputs["references"]]
    assert data["meta"]["settings"] == {"threads": 1, "rope_variant": "eager"}


@pytest.mark.torch
@pytest.mark.slow
def test_good_patches_keep_outputs_and_bad_ones_change_them(tmp_path):
    base, _ = _bench(_copy(tmp_path, "base"), tmp_path, "--requests", "3")
    repo = _copy(tmp_path, "good")
    for p in GOOD:
        assert _apply(repo, p).returncode == 0
    good, _ = _bench(repo, tmp_path, "--requests", "3")
    assert good["outputs"] == base["outputs"]  # same words, same amount of audio
    for p in BAD:
        bad_repo = tmp_path / f"bad-{p.stem}"
        shutil.copytree(repo, bad_repo)
        assert _apply(bad_repo, p).returncode == 0
        bad, _ = _bench(bad_repo, tmp_path, "--requests", "3")
        assert sum(bad["outputs"]["audio_samples"]) < 0.9 * sum(base["outputs"]["audio_samples"]), p.name
