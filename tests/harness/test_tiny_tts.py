"""The example target (examples/tiny-tts) and the demo patches: the config is
a serving benchmark, every patch applies (alone and after any subset of the
others), the server streams audio, the protected client saves it, the
protected evaluator hears the words in it (and none in silence or noise), the
good patches keep the audio and the "too good to be true" ones change it."""

from __future__ import annotations

import importlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import urllib.request
import wave
from pathlib import Path

import numpy as np
import pytest

from verifier.quality import corpus_wer

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


def _bench_module(name: str):
    sys.path.insert(0, str(EXAMPLE / "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(EXAMPLE / "bench"))


def _tiny_tts_module(name: str):
    sys.path.insert(0, str(EXAMPLE))
    try:
        for mod in [m for m in sys.modules if m == "tiny_tts" or m.startswith("tiny_tts.")]:
            del sys.modules[mod]
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(EXAMPLE))


vocab = _bench_module("vocab")
evaluate = _bench_module("evaluate")


def _write_wav(path: Path, samples: np.ndarray) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(vocab.SAMPLE_RATE)
        w.writeframes(np.round(np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())


def _tones(tokens: list[int]) -> np.ndarray:
    """What an honest vocoder's tone part sounds like (built from bench/vocab.py)."""
    t = np.arange(vocab.HOP) / vocab.SAMPLE_RATE
    frames = []
    for c in tokens:
        lo = vocab.TONE_LOW_HZ + vocab.TONE_STEP_HZ * (c // 16)
        hi = vocab.TONE_HIGH_HZ + vocab.TONE_STEP_HZ * (c % 16)
        frames.append(0.27 * (np.sin(2 * np.pi * lo * t) + np.sin(2 * np.pi * hi * t)))
    return np.concatenate(frames) if frames else np.zeros(0)


def _tokens(text: str, frames: int = vocab.FRAMES_PER_WORD) -> list[int]:
    ids = [vocab.WORDS.index(w) for w in text.split()]
    return [w * vocab.FRAMES_PER_WORD + f for w in ids for f in range(frames)]


# ------------------------------------------------------------ no torch needed


def test_config_is_a_serving_task_with_hidden_texts():
    from harness.agents.tuner import read_knob
    from harness.spec import build_task

    spec = build_task((EXAMPLE / ".rsi" / "config.toml").read_text(), None, "t")
    bench = spec.verify.benchmark("tts")
    assert bench.serve == "python -m tiny_tts.server" and bench.command is None
    assert bench.client == "python bench/client.py" and bench.evaluator == "python bench/evaluate.py"
    assert bench.ready_path == "/health" and bench.ready_pattern == "READY"
    assert bench.metric_source("throughput") == "client" and spec.verify.verifier.require_external
    assert spec.verify.hidden.seed_env == "TTS_EVAL_SEED"
    assert spec.verify.objective.metric == "throughput" and spec.verify.objective.min_gain <= 0.10
    assert {g.metric for g in spec.verify.guards} >= {"latency_p95_s", "ttfa_p50_s"}
    kinds = {q.kind: q for q in spec.verify.quality}
    assert set(kinds) == {"wer", "output_length", "waveform", "spectral"}
    assert kinds["wer"].output == "transcripts" and kinds["waveform"].files == "*.wav"
    assert kinds["spectral"].files == "*.wav"
    assert {k.name for k in spec.knobs} == {"threads", "rope_variant"}
    for k in spec.knobs:  # the tuner can find and read every knob
        assert read_knob(EXAMPLE, k) in [str(v) for v in k.values]
    assert spec.policy.editable == ["tiny_tts/**"] and "bench/**" in spec.protected_paths()


def test_patches_pass_the_edit_policy_and_name_a_hypothesis():
    from harness.agents.replay import patch_hypothesis
    from harness.policy import check_diff
    from harness.spec import build_task

    spec = build_task((EXAMPLE / ".rsi" / "config.toml").read_text(), None, "t")
    assert len(GOOD) >= 4 and len(BAD) >= 2
    for p in GOOD + BAD:
        text = p.read_text()
        assert text.startswith("From: ") and "\nSubject: [PATCH] " in text
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


def test_protected_vocabulary_matches_the_candidates():
    text = _tiny_tts_module("tiny_tts.text")
    assert text.WORDS == vocab.WORDS and text.FRAMES_PER_WORD == vocab.FRAMES_PER_WORD
    assert text.CODEBOOK == vocab.CODEBOOK == vocab.TONES_PER_GROUP ** 2
    assert vocab.prompts(3, seed=1) == text.prompts(3, seed=1) != vocab.prompts(3, seed=2)
    ids = text.encode("The cat sat on the mat")
    assert text.transcribe(_tokens("the cat sat on the mat")) == "the cat sat on the mat"
    assert vocab.words_from_tokens(_tokens("the cat sat on the mat")) == "the cat sat on the mat".split()
    assert len(ids) == 6
    with pytest.raises(ValueError, match="not in the tiny-tts vocabulary"):
        text.encode("the zebra")


def test_evaluator_hears_the_words_and_nothing_in_silence_or_noise(tmp_path):
    texts = vocab.prompts(4, seed=7)
    rng = np.random.default_rng(0)
    honest, silent, noise, shifted, short = (tmp_path / n for n in ("honest", "silent", "noise", "shifted", "short"))
    for d in (honest, silent, noise, shifted, short):
        d.mkdir()
    for i, text in enumerate(texts):
        audio = _tones(_tokens(text)) + 0.06 * rng.standard_normal(len(_tokens(text)) * vocab.HOP)
        _write_wav(honest / f"req-{i:03d}.wav", audio)
        _write_wav(silent / f"req-{i:03d}.wav", np.zeros_like(audio))
        _write_wav(noise / f"req-{i:03d}.wav", 0.3 * rng.standard_normal(len(audio)))
        _write_wav(shifted / f"req-{i:03d}.wav", _tones([(c + 1) % vocab.CODEBOOK for c in _tokens(text)]))
        _write_wav(short / f"req-{i:03d}.wav", audio[: len(audio) // 2])

    def run(d: Path) -> dict:
        out = tmp_path / f"{d.name}.json"
        proc = subprocess.run([sys.executable, str(EXAMPLE / "bench" / "evaluate.py")], check=False,
                              capture_output=True, text=True, env={**os.environ, "RSI_INPUT_DIR": str(d),
                                                                   "RSI_RESULT": str(out)})
        assert proc.returncode == 0, proc.stderr
        return json.loads(out.read_text())

    res = run(honest)
    assert res["outputs"]["transcripts"] == texts and res["metrics"]["tone_frames"] == 1.0
    assert res["outputs"]["audio_samples"] == [len(_tokens(t)) * vocab.HOP for t in texts]
    assert corpus_wer(texts, res["outputs"]["transcripts"]) == 0.0
    for d in (silent, noise):  # the right length, no words
        res = run(d)
        assert res["outputs"]["transcripts"] == [""] * 4 and res["metrics"]["tone_frames"] < 0.05
        assert corpus_wer(texts, res["outputs"]["transcripts"]) == 1.0
    assert corpus_wer(texts, run(shifted)["outputs"]["transcripts"]) == 1.0  # tones of the wrong tokens
    assert corpus_wer(texts, run(short)["outputs"]["transcripts"]) >= 0.3


def test_evaluator_refuses_other_formats(tmp_path):
    with wave.open(str(tmp_path / "req-000.wav"), "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(b"\0" * 4000)
    (tmp_path / "req-001.wav").symlink_to(tmp_path / "req-000.wav")
    res = evaluate.evaluate(tmp_path)
    assert res["outputs"] == {"transcripts": ["", ""], "audio_samples": [0, 0]}


def test_client_counts_every_request_as_failed_without_a_server(tmp_path):
    client = _bench_module("client")
    res = client.run("http://127.0.0.1:9", ["the cat", "a dog"], 2, tmp_path / "out", timeout_s=5)
    assert res["counts"] == {"requests": 2, "failed": 2, "stalled": 0} and res["metrics"]["throughput"] == 0.0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["req-000.wav", "req-001.wav"]


# ---------------------------------------------------------------- with torch


class Server:
    """``python -m tiny_tts.server --port 0`` in ``repo``, until close()."""

    def __init__(self, repo: Path):
        self.proc = subprocess.Popen([sys.executable, "-m", "tiny_tts.server", "--host", "127.0.0.1", "--port", "0"],
                                     cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()  # blocks until READY (or the server died)
        if not line.startswith("READY "):
            self.close()
            raise AssertionError(f"no READY line: {line!r} {self.proc.stderr.read()[-2000:]}")
        self.url = line.split()[1]

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()


def _serve_and_measure(repo: Path, tmp_path: Path, seed: int = 3, requests: int = 4) -> dict:
    """Server from ``repo``; the protected client and evaluator from the
    example itself (the base), as the verifier runs them."""
    server = Server(repo)
    out = tmp_path / f"wav-{repo.name}"
    try:
        env = {**os.environ, "RSI_SERVER_URL": server.url, "RSI_SEED": str(seed), "RSI_OUTPUT_DIR": str(out),
               "RSI_RESULT": str(tmp_path / f"client-{repo.name}.json"), "RSI_SETTING_REQUESTS": str(requests)}
        proc = subprocess.run([sys.executable, str(EXAMPLE / "bench" / "client.py")], env=env, check=False,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
    finally:
        server.close()
    result = json.loads((tmp_path / f"client-{repo.name}.json").read_text())
    result["evaluated"] = evaluate.evaluate(out)
    result["wav_dir"] = out
    return result


def _snr_db(a: Path, b: Path) -> float:
    x, y = evaluate.read_wav(a), evaluate.read_wav(b)
    assert len(x) == len(y)
    return float(10 * np.log10((x ** 2).sum() / max(((x - y) ** 2).sum(), 1e-30)))


def _log_mel_db(a: Path, b: Path) -> float:
    """The spectral guard's distance of ``b`` to ``a`` (dB)."""
    from verifier.quality import log_mel_distance

    return log_mel_distance(evaluate.read_wav(b), evaluate.read_wav(a), vocab.SAMPLE_RATE)


@pytest.mark.torch
def test_engine_streams_deterministic_tone_pair_audio(monkeypatch):
    monkeypatch.delenv("RSI_KERNEL_ROPE", raising=False)  # the engine sets it: undone after the test
    model = _tiny_tts_module("tiny_tts.model")
    pipeline = _tiny_tts_module("tiny_tts.pipeline")
    m = model.build(seed=0)
    with pipeline.TTSServer(m) as engine:
        chunks = list(engine.synthesize("the small red boat sings"))
        again = list(engine.synthesize("the small red boat sings"))
    codes = [c for ch in chunks for c in ch.codes]
    assert codes == _tokens("the small red boat sings")
    assert [len(ch.codes) for ch in chunks] == [8, 8, 4]  # streamed in chunks
    assert [ch.samples for ch in chunks] == [len(ch.codes) * model.HOP for ch in chunks]
    pcm = b"".join(ch.pcm for ch in chunks)
    assert pcm == b"".join(ch.pcm for ch in again)
    heard, frames, toned = evaluate.transcribe(np.frombuffer(pcm, dtype="<i2") / 32767.0)
    assert heard == "the small red boat sings" and frames == toned == 20
    assert all(model.tone_pair(c) == (vocab.TONE_LOW_HZ + 100 * (c // 16), vocab.TONE_HIGH_HZ + 100 * (c % 16))
               for c in range(vocab.CODEBOOK))
    # wrong audio that still says the words: the tones without the vocoder's texture
    full = np.frombuffer(pcm, dtype="<i2") / 32767.0
    tones_only = np.concatenate([m.vocoder.tones[c].numpy() * pipeline.OUTPUT_GAIN for c in codes])
    assert evaluate.transcribe(tones_only)[0] == heard
    snr = 10 * np.log10((full ** 2).sum() / ((full - tones_only) ** 2).sum())
    assert 5 < snr < 25  # far below the waveform guard's 40 dB
    assert not engine._worker.is_alive()  # closing stops the stats worker
    assert os.environ.get("RSI_KERNEL_ROPE") == "eager"  # the rope_variant knob, applied at start


@pytest.mark.torch
def test_the_audio_is_the_models_work_for_each_requests_speaker(monkeypatch):
    """Issue 17.3, the tabulation attack: the decoder emits the aligned token,
    so without speakers a table token -> PCM frame reproduced the audio with no
    model at all. Every request now names its speaker (the client's, drawn from
    the hidden seed): the same text and speaker give the same audio, another
    speaker other audio (the words still heard), and a table of token audio
    built from other speakers' requests is far below the waveform guard."""
    import tomllib

    monkeypatch.delenv("RSI_KERNEL_ROPE", raising=False)
    model = _tiny_tts_module("tiny_tts.model")
    pipeline = _tiny_tts_module("tiny_tts.pipeline")
    text = "the small red boat sings"
    styles = vocab.styles(3, seed=5)
    assert len(set(styles)) == 3 and styles == vocab.styles(3, seed=5)
    with pipeline.TTSServer(model.build(seed=0)) as engine:
        def pcm(txt: str, style: int) -> np.ndarray:
            chunks = list(engine.synthesize(txt, style))
            return np.frombuffer(b"".join(c.pcm for c in chunks), dtype="<i2") / 32767.0

        a, again, b = pcm(text, styles[0]), pcm(text, styles[0]), pcm(text, styles[1])
        # the attacker's table: token -> frame, learnt from every frame of other requests
        table = {}
        for style in (0, styles[2]):
            for word in text.split():
                frames = pcm(word, style).reshape(-1, model.HOP)
                for f, tok in zip(frames, _tokens(word), strict=True):
                    table[tok] = f
    assert np.array_equal(a, again)  # deterministic per (text, speaker): Bk is repeatable
    assert evaluate.transcribe(a)[0] == evaluate.transcribe(b)[0] == text
    replay = np.concatenate([table[t] for t in _tokens(text)])
    assert evaluate.transcribe(replay)[0] == text  # the words survive: only the waveform guard can tell

    def snr(x, y):
        return float(10 * np.log10((x ** 2).sum() / ((x - y) ** 2).sum()))

    cfg = tomllib.loads((EXAMPLE / ".rsi" / "config.toml").read_text())
    (wave_guard,) = [q for q in cfg["quality"] if q["kind"] == "waveform"]
    assert snr(a, b) < wave_guard["min_snr_db"]
    assert snr(a, replay) < wave_guard["min_snr_db"]


@pytest.mark.torch
def test_server_client_and_evaluator_follow_the_protocol(tmp_path):
    from verifier.protocol import load_result

    repo = _copy(tmp_path)
    server = Server(repo)
    try:
        with urllib.request.urlopen(server.url + "/health", timeout=10) as r:
            assert r.status == 200 and json.loads(r.read())["status"] == "ok"
        req = urllib.request.Request(server.url + "/synthesize", data=b'{"text": "the zebra"}',
                                     headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
        assert e.value.code == 400
        client = _bench_module("client")
        texts = vocab.prompts(5, seed=11)
        res = client.run(server.url, texts, 3, tmp_path / "wav", timeout_s=60)
    finally:
        server.close()
    (tmp_path / "r.json").write_text(json.dumps(res))
    loaded = load_result(tmp_path / "r.json", expected_metrics=["throughput", "rtf"])
    assert loaded.counts["requests"] == 5 and loaded.counts["failed"] == 0 and loaded.metrics["throughput"] > 0
    assert len(loaded.samples["latency_s"]) == len(loaded.samples["ttfa_s"]) == len(loaded.samples["stall_s"]) == 5
    assert all(s >= 0 for s in loaded.samples["stall_s"])
    assert all(t < lat for t, lat in zip(loaded.samples["ttfa_s"], loaded.samples["latency_s"], strict=True))
    assert loaded.outputs["audio_samples"] == [len(_tokens(t)) * vocab.HOP for t in texts]
    heard = evaluate.evaluate(tmp_path / "wav")["outputs"]
    assert heard["transcripts"] == texts and heard["audio_samples"] == loaded.outputs["audio_samples"]


@pytest.mark.torch
@pytest.mark.slow
def test_good_patches_keep_the_audio_and_bad_ones_change_it(tmp_path):
    base = _serve_and_measure(_copy(tmp_path, "base"), tmp_path)
    refs = base["outputs"]["references"]
    assert base["evaluated"]["outputs"]["transcripts"] == refs
    repo = _copy(tmp_path, "good")
    for p in GOOD:
        assert _apply(repo, p).returncode == 0
    good = _serve_and_measure(repo, tmp_path)
    assert good["outputs"] == base["outputs"] and good["evaluated"]["outputs"] == base["evaluated"]["outputs"]
    from verifier.config import VerifyConfig

    config = VerifyConfig.from_toml((EXAMPLE / ".rsi" / "config.toml").read_text())
    bound = next(q.min_snr_db for q in config.quality if q.kind == "waveform")
    max_db = next(q.max_db for q in config.quality if q.kind == "spectral")
    for f in sorted(base["wav_dir"].glob("*.wav")):  # float rounding at most: above the guard's bound
        snr = _snr_db(f, good["wav_dir"] / f.name)
        assert snr > bound, (f.name, snr, bound)  # measured 107-110 dB against 90
        assert _log_mel_db(f, good["wav_dir"] / f.name) < max_db / 10  # measured <= 0.0001 dB vs 0.1
    for p in BAD:
        bad_repo = tmp_path / f"bad-{p.stem[:2]}"
        shutil.copytree(repo, bad_repo)
        assert _apply(bad_repo, p).returncode == 0
        bad = _serve_and_measure(bad_repo, tmp_path)
        assert sum(bad["outputs"]["audio_samples"]) < 0.9 * sum(base["outputs"]["audio_samples"]), p.name
        worst = max(_log_mel_db(f, bad["wav_dir"] / f.name) for f in sorted(base["wav_dir"].glob("*.wav")))
        assert worst > 10 * max_db, (p.name, worst)  # measured 12-20 dB: it sounds different
        if p.name.startswith("91"):
            assert corpus_wer(refs, bad["evaluated"]["outputs"]["transcripts"]) > 0.02
