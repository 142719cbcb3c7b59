"""tiny-tts benchmark, following the rsi benchmark protocol.

Builds the model (seeded random weights), warms up, prints READY, then
synthesizes a fixed set of requests one after another and writes a result JSON
to $RSI_RESULT (or stdout):

    metrics   throughput (requests/s), latency_p95_s, ttfa_p50_s, audio_seconds, rtf
    samples   latency_s (per request)
    outputs   transcripts (what the codec tokens say), references (the input texts),
              audio_samples (samples per request)
    counts    requests, failed
    meta      settings in effect (recorded only)

Request texts come from --texts FILE (one per line; default $TTS_EVAL_SET) or
are drawn from the vocabulary with --seed (default $RSI_SEED, then
$RSI_SETTING_SEED, then 0). The model's weights always use seed 0.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _env_int(*names: str, default: int) -> int:
    for name in names:
        if os.environ.get(name, "").strip():
            return int(os.environ[name])
    return default


def percentile(values: list[float], q: float, empty: float = 0.0) -> float:
    """Linearly interpolated percentile (q in [0, 100]); ``empty`` when there are no values."""
    xs = sorted(values)
    if not xs:
        return empty
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=_env_int("RSI_SETTING_REQUESTS", default=8))
    p.add_argument("--seed", type=int, default=_env_int("RSI_SEED", "RSI_SETTING_SEED", default=0))
    p.add_argument("--texts", default=os.environ.get("TTS_EVAL_SET", ""))
    p.add_argument("--warmup", type=int, default=1, help="warm-up requests before READY")
    p.add_argument("--result", default=os.environ.get("RSI_RESULT", ""))
    args = p.parse_args(argv)

    import torch
    from tiny_tts import model as tts_model
    from tiny_tts import ops
    from tiny_tts.pipeline import TTSServer
    from tiny_tts.settings import SETTINGS
    from tiny_tts.text import prompts, transcribe

    if args.texts:
        texts = [t.strip() for t in Path(args.texts).read_text().splitlines() if t.strip()]
    else:
        texts = prompts(args.requests, args.seed)

    model = tts_model.build(seed=0)
    reference = tts_model.reference_audio(seed=0)
    latencies, ttfas, transcripts, audio_samples = [], [], [], []
    failed = 0
    with TTSServer(model, reference) as server:
        for text in prompts(args.warmup, seed=10_000 + args.seed, min_words=3, max_words=3):
            for _ in server.synthesize(text):
                pass
        print("READY", flush=True)

        t_start = time.perf_counter()
        for text in texts:
            t0 = time.perf_counter()
            ttfa, codes, n_samples = None, [], 0
            try:
                for chunk in server.synthesize(text):
                    if ttfa is None:
                        ttfa = time.perf_counter() - t0
                    codes.extend(chunk.codes)
                    n_samples += len(chunk.audio)
            except Exception:  # noqa: BLE001 - a failed request is counted, never hidden
                traceback.print_exc()
                failed += 1
                transcripts.append("")
                audio_samples.append(0)
                continue
            latencies.append(time.perf_counter() - t0)
            ttfas.append(ttfa if ttfa is not None else latencies[-1])
            transcripts.append(transcribe(codes))
            audio_samples.append(n_samples)
        elapsed = time.perf_counter() - t_start

    done = len(texts) - failed
    audio_s = sum(audio_samples) / tts_model.SAMPLE_RATE
    result = {
        "metrics": {
            "throughput": done / elapsed if elapsed > 0 else 0.0,
            "latency_p95_s": percentile(latencies, 95, empty=elapsed),
            "ttfa_p50_s": percentile(ttfas, 50, empty=elapsed),
            "audio_seconds": audio_s,
            "rtf": elapsed / audio_s if audio_s else 0.0,
        },
        "samples": {"latency_s": latencies or [elapsed]},
        "outputs": {"transcripts": transcripts, "references": texts, "audio_samples": audio_samples},
        "counts": {"requests": len(texts), "failed": failed},
        "meta": {
            "threads": torch.get_num_threads(),
            "settings": {"threads": SETTINGS.threads, "rope_variant": SETTINGS.rope_variant},
            "rope_backend": ops.BACKEND,
            "elapsed_s": elapsed,
            "ttfa_s": ttfas,
        },
    }
    text = json.dumps(result, indent=1)
    if args.result:
        Path(args.result).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
