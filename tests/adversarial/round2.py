"""Round-2 serving cheats (issue 17) against tiny-tts's protected client,
evaluator and shipped guards, and the target checkouts they run in.

A checkout is a copy of ``examples/tiny-tts`` (its ``bench/`` and
``.rsi/config.toml``, the real protected client and evaluator) whose
``tiny_tts/`` is either the real model (torch) or one of the stand-in servers
below: pure Python, so a case costs about a second a run.

* :data:`STREAM_SERVER`, by ``tiny_tts/mode.txt``: ``honest`` (one 160 ms
  chunk every ``CHUNK_S``, like tiny-tts), ``faster`` (the same, 0.6x the time
  per chunk: the control), ``trickle`` (two bytes at once, then the whole
  utterance when it is done, in 0.7x the honest time: the first-byte TTFA
  cheat) and ``burst`` (100 ms of audio at once, then the rest when it is
  done, in 0.7x the time: passes a first-N-ms TTFA, stalls a listener). Every
  mode sends the same audio: the tone pairs of the aligned tokens.
* :data:`TABLE_SERVER`: the tabulation cheat; it never runs the model, it
  replays ``tiny_tts/table.bin`` (token -> one frame of PCM, learnt from the
  real model for one speaker) and ignores each request's speaker, paced at
  ``CHUNK_S`` per chunk to stay under the 2x rule.
"""

from __future__ import annotations

import shutil
import sys
import textwrap
import tomllib
from pathlib import Path

from harness.spec import build_task
from harness.tomlout import dump_toml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tiny-tts"

_COMMON = textwrap.dedent(
    r"""
    import json, math, os, sys, time
    from array import array
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    sys.path.insert(0, os.path.join(os.getcwd(), "bench"))
    import vocab  # the checkout's own copy of the vocabulary (the layout is public)

    HOP, CHUNK = vocab.HOP, 8

    def tokens(text):
        ids = [vocab.WORDS.index(w) for w in text.lower().split()]
        return [w * vocab.FRAMES_PER_WORD + f for w in ids for f in range(vocab.FRAMES_PER_WORD)]

    class Base(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):
            data = b'{"status": "ok"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def send(self, data):
            if data:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            toks = tokens(body["text"])
            self.send_response(200)
            self.send_header("X-Sample-Rate", str(vocab.SAMPLE_RATE))
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.stream(toks, body.get("style", 0))
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    def serve(handler):
        httpd = ThreadingHTTPServer(("127.0.0.1", int(os.environ.get("RSI_PORT") or 8000)), handler)
        httpd.daemon_threads = True
        print("READY", flush=True)
        httpd.serve_forever(poll_interval=0.05)
    """
)

STREAM_SERVER = _COMMON + textwrap.dedent(
    r"""
    MODE = open(os.path.join(os.path.dirname(__file__), "mode.txt")).read().strip()
    CHUNK_S = 0.06 if MODE == "faster" else 0.1  # seconds to "synthesize" 160 ms of audio

    def frame(tok):
        lo = vocab.TONE_LOW_HZ + vocab.TONE_STEP_HZ * (tok // 16)
        hi = vocab.TONE_HIGH_HZ + vocab.TONE_STEP_HZ * (tok % 16)
        t = [i / vocab.SAMPLE_RATE for i in range(HOP)]
        return array("h", [round(0.27 * 32767 * (math.sin(2 * math.pi * lo * x) + math.sin(2 * math.pi * hi * x)))
                           for x in t]).tobytes()

    FRAMES = [frame(t) for t in range(vocab.CODEBOOK)]

    class Handler(Base):
        def stream(self, toks, style):
            chunks = [b"".join(FRAMES[t] for t in toks[i:i + CHUNK]) for i in range(0, len(toks), CHUNK)]
            pcm = b"".join(chunks)
            if MODE in ("honest", "faster"):
                for c in chunks:
                    time.sleep(CHUNK_S)
                    self.send(c)
                return
            head = 2 if MODE == "trickle" else 2 * vocab.SAMPLE_RATE // 10  # two bytes, or 100 ms
            self.send(pcm[:head])  # at once: what a first-byte (or first-100-ms) clock sees
            time.sleep(0.7 * CHUNK_S * len(chunks))  # the whole utterance, batched: 0.7x the time
            self.send(pcm[head:])

    serve(Handler)
    """
)

TABLE_SERVER = _COMMON + textwrap.dedent(
    r"""
    CHUNK_S = 0.03
    with open(os.path.join(os.path.dirname(__file__), "table.bin"), "rb") as fh:
        TABLE = fh.read()
    FRAME = 2 * HOP

    class Handler(Base):
        def stream(self, toks, style):  # the speaker is ignored: the table has one
            for i in range(0, len(toks), CHUNK):
                time.sleep(CHUNK_S)
                self.send(b"".join(TABLE[t * FRAME:(t + 1) * FRAME] for t in toks[i:i + CHUNK]))

    serve(Handler)
    """
)

#: The shipped config's guards and quality checks, with the pairs and the
#: request count cut for a test: a cheat found on the first look is found.
SMALL = {"initial_pairs": 3, "step": 2, "max_pairs": 7, "calibration_pairs": 2, "warmup": 0}


def checkout(root: Path, name: str, server: str | None = None, mode: str = "honest") -> Path:
    """A copy of tiny-tts; with ``server`` its ``tiny_tts/`` is only that
    stand-in server (and ``mode.txt``)."""
    dst = root / name
    shutil.copytree(EXAMPLE, dst, ignore=shutil.ignore_patterns("__pycache__"))
    if server is not None:
        shutil.rmtree(dst / "tiny_tts")
        (dst / "tiny_tts").mkdir()
        (dst / "tiny_tts" / "__init__.py").write_text("")
        (dst / "tiny_tts" / "server.py").write_text(server)
        (dst / "tiny_tts" / "mode.txt").write_text(mode + "\n")
    return dst


def shipped_config(requests: int = 6, stand_in: bool = True, python: str = sys.executable, **verifier):
    """tiny-tts's ``.rsi/config.toml`` as shipped (guards, quality, hidden seed),
    with ``python`` (this interpreter; ``python3`` in a container: the image's) for ``python``, ``requests`` per run and ``SMALL``
    pairs: the verifier's typed config. For a stand-in server, without the
    ``startup_s`` guard: a pure-Python server is ready in ~0.1 s, all of it
    noise (tiny-tts's own startup is its model build, several seconds)."""
    data = tomllib.loads((EXAMPLE / ".rsi" / "config.toml").read_text())
    if stand_in:
        data["guards"] = [g for g in data["guards"] if g["metric"] != "startup_s"]
    bench = data["benchmarks"]["tts"]
    for key in ("serve", "client", "evaluator"):
        bench[key] = bench[key].replace("python ", f"{python} ", 1)
    bench["settings"] = {**bench.get("settings", {}), "requests": requests}
    data["verifier"] = {**data["verifier"], **SMALL, **verifier}
    return build_task(dump_toml(data), None, "round2").verify


def table_from_the_model() -> bytes:
    """token -> one frame of 16-bit PCM, for speaker 0, from the real model
    (torch): what an agent that watched the model once would commit."""
    sys.path.insert(0, str(EXAMPLE))
    try:
        from tiny_tts import model, pipeline
        from tiny_tts.text import WORDS
    finally:
        sys.path.remove(str(EXAMPLE))
    frame = 2 * model.HOP
    table = bytearray(frame * len(WORDS) * model.FRAMES_PER_WORD)
    with pipeline.TTSServer(model.build(seed=0)) as engine:
        for w, word in enumerate(WORDS):
            pcm = b"".join(c.pcm for c in engine.synthesize(word, 0))
            start = w * model.FRAMES_PER_WORD * frame
            table[start:start + len(pcm)] = pcm
    return bytes(table)
