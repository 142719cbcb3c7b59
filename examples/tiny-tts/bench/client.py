"""tiny-tts load generator (protected): concurrent streaming requests to the
candidate's server, timed from outside the candidate's process.

::

    python bench/client.py [--url $RSI_SERVER_URL] [--requests 24] [--concurrency 2]
                           [--seed $RSI_SEED] [--ttfa-ms 100]
                           [--out-dir $RSI_OUTPUT_DIR] [--result $RSI_RESULT]

Request texts, and a speaker (``style``) per request, are drawn from
``bench/vocab.py`` with the seed (``$RSI_SEED``: the verifier's hidden seed;
the server never sees it, only each request's own text and style). The
speaker is a hidden per-request input only the model turns into audio: a
server that replays a table of token audio instead of running the model
sounds like the wrong speaker. ``--concurrency``
requests are in flight at a time; each streams its audio back (chunked
16-bit PCM, see ``tiny_tts/server.py``) and is saved as
``$RSI_OUTPUT_DIR/req-NNN.wav`` (an empty WAV for a failed request, so the
files stay in request order). The result (rsi benchmark protocol) goes to
``$RSI_RESULT`` (stdout when unset):

    metrics   throughput (completed requests per second over the timed window:
              from the first request sent to the last response finished),
              audio_seconds, rtf (window seconds per audio second)
    samples   per request (the verifier derives latency_p50_s ... stall_p99_s):
              latency_s (sent -> last byte); ttfa_s (time to first audio: sent ->
              the first ``--ttfa-ms`` of audio received, not the first byte: a
              server that sends two bytes at once and buffers the rest gains
              nothing); stall_s (how long a player that starts at ttfa_s would
              have waited for audio afterwards: 0 for a stream that keeps up
              with real time; a server that sends its first chunk at once and
              then buffers the utterance stalls for the rest of its work)
    outputs   references (the texts sent), styles (the speakers asked for),
              audio_samples (samples received per request), audio_files (the
              WAV names, in request order)
    counts    requests, failed, stalled (requests with stall_s above ``STALL_SLACK_S``)

A request fails on a connection error, a status other than 200, a sample rate
other than the vocabulary's, an odd number of bytes, a response cut short, or
no audio; failures are counted and never hidden.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import time
import wave
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

import vocab  # noqa: E402 - bench/vocab.py, next to this file

READ_SIZE = 64 * 1024
MAX_AUDIO_BYTES = 32 * 1024 * 1024  # per response: ~17 minutes of audio
TTFA_MS = 100
"""Time to first audio counts from the request to this much audio received."""
STALL_SLACK_S = 0.02
"""A stall this short (one scheduling hiccup) does not count a request as stalled."""


@dataclass
class Response:
    text: str
    style: int = 0
    ok: bool = False
    error: str = ""
    ttfa_s: float = 0.0
    latency_s: float = 0.0
    stall_s: float = 0.0
    pcm: bytearray = field(default_factory=bytearray)
    arrivals: list[tuple[float, int]] = field(default_factory=list)
    """(seconds since the request was sent, total bytes received by then), per read."""


def audio_s(nbytes: int) -> float:
    """Seconds of 16-bit mono audio in ``nbytes``."""
    return nbytes / 2 / vocab.SAMPLE_RATE


def first_audio(arrivals: list[tuple[float, int]], ttfa_ms: float) -> int | None:
    """The index of the read at which ``ttfa_ms`` of audio had arrived (the
    last read, for an utterance shorter than that), or None (no audio)."""
    need = ttfa_ms / 1000.0
    for i, (_, total) in enumerate(arrivals):
        if audio_s(total) >= need:
            return i
    return len(arrivals) - 1 if arrivals else None


def stall(arrivals: list[tuple[float, int]], start: int) -> float:
    """Seconds a player starting at read ``start`` (with what had arrived by
    then) waits for audio before the end: it plays in real time, and whenever
    its buffer runs dry it waits for the next read."""
    clock, total = arrivals[start]
    buffered, waited = audio_s(total), 0.0
    for t, now_total in arrivals[start + 1:]:
        gap = t - clock
        if gap > buffered:
            waited += gap - buffered
            buffered = 0.0
        else:
            buffered -= gap
        buffered += audio_s(now_total - total)
        clock, total = t, now_total
    return waited


def _env_int(*names: str, default: int) -> int:
    for name in names:
        if os.environ.get(name, "").strip():
            return int(os.environ[name])
    return default


def request(url: str, text: str, timeout_s: float, ttfa_ms: float = TTFA_MS, style: int = 0) -> Response:
    """One streaming synthesis request, timed from the send to the last byte;
    every read's arrival is noted (for ttfa_s and stall_s)."""
    parts = urlsplit(url)
    res = Response(text=text, style=style)
    body = json.dumps({"text": text, "style": style}).encode()
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=timeout_s)
    t0 = time.perf_counter()
    try:
        conn.request("POST", (parts.path.rstrip("/") or "") + "/synthesize", body=body,
                     headers={"Content-Type": "application/json", "Connection": "close"})
        resp = conn.getresponse()
        if resp.status != 200:
            res.error = f"HTTP {resp.status}: {resp.read(500).decode(errors='replace')}"
            return res
        rate = resp.getheader("X-Sample-Rate", "")
        if rate != str(vocab.SAMPLE_RATE):
            res.error = f"sample rate {rate!r}, expected {vocab.SAMPLE_RATE}"
            return res
        while True:
            data = resp.read1(READ_SIZE)
            if not data:
                break
            res.pcm += data
            res.arrivals.append((time.perf_counter() - t0, len(res.pcm)))
            if len(res.pcm) > MAX_AUDIO_BYTES:
                res.error = f"more than {MAX_AUDIO_BYTES} bytes of audio"
                return res
        res.latency_s = time.perf_counter() - t0
    except (OSError, http.client.HTTPException) as e:  # IncompleteRead: the stream was cut short
        res.error = f"{type(e).__name__}: {e}"
        return res
    finally:
        conn.close()
    if not res.pcm or len(res.pcm) % 2:
        res.error = f"{len(res.pcm)} bytes of audio (expected a positive, even number)"
        return res
    first = first_audio(res.arrivals, ttfa_ms)
    if first is None:  # audio with no read noted: cannot happen, never a silent zero
        res.error = "no audio arrived"
        return res
    res.ttfa_s, res.stall_s = res.arrivals[first][0], stall(res.arrivals, first)
    res.ok = True
    return res


def write_wav(path: Path, pcm: bytes) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(vocab.SAMPLE_RATE)
        w.writeframes(pcm)


def run(url: str, texts: list[str], concurrency: int, out_dir: Path | None, timeout_s: float,
        ttfa_ms: float = TTFA_MS, styles: list[int] | None = None) -> dict:
    styles = list(styles) if styles is not None else [0] * len(texts)
    t_start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        responses = list(pool.map(lambda ts: request(url, ts[0], timeout_s, ttfa_ms, ts[1]),
                                  zip(texts, styles, strict=True)))
    window = time.perf_counter() - t_start
    ok = [r for r in responses if r.ok]
    for r in responses:
        if not r.ok:
            print(f"client: request failed ({r.text!r}): {r.error}", file=sys.stderr)
    names = [f"req-{i:03d}.wav" for i in range(len(texts))]
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, r in zip(names, responses, strict=True):
            write_wav(out_dir / name, bytes(r.pcm) if r.ok else b"")
    samples = [len(r.pcm) // 2 if r.ok else 0 for r in responses]
    audio_s = sum(samples) / vocab.SAMPLE_RATE
    latencies = [r.latency_s for r in ok] or [window]
    ttfas = [r.ttfa_s for r in ok] or [window]
    stalls = [r.stall_s for r in ok] or [window]
    return {
        "metrics": {
            "throughput": len(ok) / window if window > 0 else 0.0,
            "audio_seconds": audio_s,
            "rtf": window / audio_s if audio_s else 0.0,
        },
        "samples": {"latency_s": latencies, "ttfa_s": ttfas, "stall_s": stalls},
        "outputs": {"references": texts, "styles": styles, "audio_samples": samples, "audio_files": names},
        "counts": {"requests": len(texts), "failed": len(texts) - len(ok),
                   "stalled": sum(r.stall_s > STALL_SLACK_S for r in ok)},
        "meta": {"window_s": window, "concurrency": concurrency, "ttfa_ms": ttfa_ms,
                 "errors": [r.error for r in responses if not r.ok][:10]},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default=os.environ.get("RSI_SERVER_URL", "http://127.0.0.1:8000"))
    p.add_argument("--requests", type=int, default=_env_int("RSI_SETTING_REQUESTS", default=24))
    p.add_argument("--concurrency", type=int,  # a deployment matrix's cell wins over the fixed setting
                   default=_env_int("RSI_MATRIX_CONCURRENCY", "RSI_SETTING_CONCURRENCY", default=2))
    p.add_argument("--seed", type=int, default=_env_int("RSI_SEED", "RSI_SETTING_SEED", default=0))
    p.add_argument("--timeout", type=float, default=60.0, help="per request, seconds")
    p.add_argument("--ttfa-ms", type=float, default=_env_int("RSI_SETTING_TTFA_MS", default=TTFA_MS),
                   help="time to first audio: until this much audio has arrived")
    p.add_argument("--out-dir", default=os.environ.get("RSI_OUTPUT_DIR", ""))
    p.add_argument("--result", default=os.environ.get("RSI_RESULT", ""))
    args = p.parse_args(argv)
    if args.requests < 1:
        p.error("--requests must be at least 1")
    if not 1 <= args.concurrency <= 256:
        p.error("--concurrency must be 1 .. 256")
    if args.ttfa_ms <= 0:
        p.error("--ttfa-ms must be positive")
    texts = vocab.prompts(args.requests, args.seed)
    result = run(args.url, texts, args.concurrency, Path(args.out_dir) if args.out_dir else None, args.timeout,
                 args.ttfa_ms, vocab.styles(args.requests, args.seed))
    text = json.dumps(result, indent=1)
    if args.result:
        Path(args.result).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
