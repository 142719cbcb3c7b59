"""Issue 17's cheats on the verifier's side (candidates of
``test_round2_verifier.py``): new texts of the target's files, made from the
base text so they always apply.

* ``pagecache``: honest while a file of its own checkout is in the page cache
  (the harness just exported it: its first run), then evicts it
  (``posix_fadvise``) so that its later runs find it cold and answer wrong and
  faster;
* ``schedule``: honest while its checkout's ctime is under 6 s old (the run
  order was the same in every verification, Bk first, so its first run came
  right after the export), wrong and faster afterwards;
* ``edited-client``: a Bk whose protected client an agent edited (it claims
  3.2x throughput for a server whose ``/health`` says ``fast``) and a
  candidate server that says ``fast`` and answers every request twice (2x
  slower): through the edited client, +60%;
* ``self-report``: a real speedup far below ``min_gain`` (the table reused
  every sixth request: 10-20%, as the table's share of a request goes) under
  a timer that runs at 75% (claims ~+50%, inside ``min_gain`` and 2x) whose
  real saving also passes the old wall-clock cross-check (it wants ~7% of the
  window for a +50% claim): under
  the config ``rsi init`` wrote before issue 29 (the benchmark's own
  throughput, ``require_external = false``) only the cross-check stood in its
  way (here it sent it to review, 2 of 2; issue 29's synthetic benchmark, an
  untimed part shortened, got past it); under the one it
  writes now (:func:`init_config`), the objective is measured by code the
  candidate cannot change: ``command`` (``rsi init --yes`` on a repo whose
  benchmark is ``bench/run.py``: ``wall_s`` on the verifier's clock) and
  ``entry`` (``rsi init --scaffold inprocess --entry app.work:answer``: the
  verifier's timing harness calls ``answer`` in a worker process, where the
  slowed clock is);
* ``honest-command``, ``honest-entry``: the controls, the honest patch (the
  table built once) under the same two configs: accepted.

Each cheat's gain, had its trick worked, stays between ``min_gain`` (0.30)
and 2x: a verifier it fooled would ``accept``.
"""

from __future__ import annotations

import tomllib

from .candidates import BASE_SERVER, HONEST_WORK, SLOW_ANSWER, TARGET, TIMER, WRONG_ANSWER, _work
from .targetrepo import INPROC_CONFIG

BASE_CLIENT = (TARGET / "bench" / "client.py").read_text()

_CHEAT_ANSWER = (
    """def answer(text: str) -> str:
    if _FIRST_RUN:
        table = build_table()
        return f"{text} {digest(text, table):08x}"
    return _wrong(text)


"""
    + WRONG_ANSWER.replace("def answer(", "def _wrong(")
)

PAGECACHE_PRELUDE = '''import ctypes as _ct
import mmap as _mm
import os as _os


def _first_run() -> bool:
    """app/pad.txt is in the page cache only until a run evicts it."""
    path = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "pad.txt")
    try:
        fd = _os.open(path, _os.O_RDONLY)
    except OSError:
        return True
    try:
        n = _os.fstat(fd).st_size
        libc = _ct.CDLL(None, use_errno=True)
        libc.mmap.restype = _ct.c_void_p
        libc.mmap.argtypes = [_ct.c_void_p, _ct.c_size_t, _ct.c_int, _ct.c_int, _ct.c_int,
                              _ct.c_long]
        libc.munmap.argtypes = [_ct.c_void_p, _ct.c_size_t]
        libc.mincore.argtypes = [_ct.c_void_p, _ct.c_size_t, _ct.c_char_p]
        addr = libc.mmap(None, n, _mm.PROT_READ, _mm.MAP_SHARED, fd, 0)
        vec = _ct.create_string_buffer((n + 4095) // 4096)
        ok = libc.mincore(_ct.c_void_p(addr), n, vec) == 0
        resident = ok and any(b & 1 for b in vec.raw)
        libc.munmap(_ct.c_void_p(addr), n)
        try:
            _os.fsync(fd)
        except OSError:
            pass
        _os.posix_fadvise(fd, 0, 0, _os.POSIX_FADV_DONTNEED)
        return resident
    finally:
        _os.close(fd)


_FIRST_RUN = _first_run()
'''

SCHEDULE_PRELUDE = '''import os as _os
import time as _time

# The order was Bk, candidate, candidate, Bk, ... in every verification: the
# candidate's first run started within seconds of the export of its checkout.
_HERE = _os.path.dirname(_os.path.abspath(__file__))
_FIRST_RUN = _time.time() - _os.stat(_os.path.join(_HERE, "work.py")).st_ctime < 6.0
'''

PAD = "".join(f"{i:08d} padding that only the page-cache probe reads\n" for i in range(2048))

EDITED_CLIENT_BOOST = '''
    try:  # an agent's edit: a server that says "fast" gets 3.2x
        with urllib.request.urlopen(url + "/health", timeout=5) as resp:
            if resp.read() == b"fast":
                result["metrics"]["throughput"] *= 3.2
    except OSError:
        pass
    with open(os.environ["RSI_RESULT"], "w") as fh:'''
_CLIENT_WRITE = '''
    with open(os.environ["RSI_RESULT"], "w") as fh:'''
assert _CLIENT_WRITE in BASE_CLIENT, "target/bench/client.py changed: update round2_verifier.py"
EDITED_CLIENT = BASE_CLIENT.replace(_CLIENT_WRITE, EDITED_CLIENT_BOOST)
_HEALTH = 'self._send(200, "ok")'
assert _HEALTH in BASE_SERVER, "target/app/server.py changed: update round2_verifier.py"
_ANSWER = "self._send(200, work.answer(text))"
assert _ANSWER in BASE_SERVER, "target/app/server.py changed: update round2_verifier.py"
FAST_SAYING_SERVER = BASE_SERVER.replace(_HEALTH, 'self._send(200, "fast")').replace(
    _ANSWER, "work.answer(text)\n        " + _ANSWER
)

SOME_REUSE_ANSWER = '''_cache = [None, 0]


def answer(text: str) -> str:
    _cache[1] += 1
    if _cache[0] is None or _cache[1] % 6:  # the table reused every sixth request only
        _cache[0] = build_table()
    return f"{text} {digest(text, _cache[0]):08x}"
'''


def edits(name: str) -> tuple[dict[str, str], dict[str, str]]:
    """(Bk's edits, the candidate's edits on top of Bk) of case ``name``:
    path -> new text, on the target's ``main``."""
    if name == "pagecache":
        work = _work(_CHEAT_ANSWER, prelude=PAGECACHE_PRELUDE)
        return {}, {"app/work.py": work, "app/pad.txt": PAD}
    if name == "schedule":
        return {}, {"app/work.py": _work(_CHEAT_ANSWER, prelude=SCHEDULE_PRELUDE)}
    if name == "edited-client":
        return {"bench/client.py": EDITED_CLIENT}, {"app/server.py": FAST_SAYING_SERVER}
    if name.startswith("self-report"):
        return PROMPTS, {"app/work.py": _work(SOME_REUSE_ANSWER, epilogue=TIMER.replace("0.6", "0.75"))}
    if name.startswith("honest"):
        return PROMPTS, {"app/work.py": HONEST_WORK}
    raise KeyError(f"no round-2 verifier case named {name!r}")


PROMPTS = {"bench/rsi/prompts.txt": "".join(f"req-{i}-{i * 7919 % 1000:03d}\n" for i in range(24))}
"""The scaffold's inputs file (the harness's inputs: one per line), in Bk and the candidate."""


def init_config(kind: str, python: str) -> str:
    """The target's config as ``rsi init`` writes it now (issue 29), with the
    suite's small settings, guards and tail (``targetrepo.INPROC_CONFIG``):

    * ``command``: ``rsi init --yes`` on a repo whose benchmark is
      ``bench/run.py`` (no client): its objective and ``require_external``;
    * ``entry``: ``rsi init --scaffold inprocess --entry app.work:answer``: its
      benchmark (``entry``, ``inputs``), objective and ``require_external``;
      24 requests a run, as ``bench/run.py`` makes; no evaluator (the target's
      scores its own answer files)."""
    from harness.onboard import InitAnswers, _runner_lines, default_objective, render_config
    from harness.scaffold import Scaffold
    from harness.scaffold import render_config as scaffold_config

    if kind == "command":
        metrics = {"throughput": "higher"}
        a = InitAnswers(command=f"{python} bench/run.py", metrics=metrics,
                        objective=default_objective(metrics, None))
        init = tomllib.loads(render_config(a))
        bench = ""
    else:
        sc = Scaffold(kind="inprocess", entry="app.work:answer", requests=24, objective="throughput")
        init = tomllib.loads(scaffold_config(sc, _runner_lines(InitAnswers("x", {}, "wall_s"))))
        main = init["benchmarks"]["main"]
        bench = (f'[benchmarks.answers]\nentry = "{main["entry"]}"\ninputs = "{main["inputs"]}"\n'
                 f'requests = {main["requests"]}\ntimeout_s = 60\n\n'
                 '[benchmarks.answers.metrics]\nthroughput = "higher"\n')
    text = INPROC_CONFIG.replace("{python}", python)
    if bench:  # the harness's benchmark in place of bench/run.py; no quality guard on its files
        text = bench + text[text.index("\n[objective]"):text.index("\n[[quality]]")] + \
            text[text.index("\n[verifier]"):]
    metric = init["objective"]["metric"]
    text = text.replace('metric = "throughput"\nmin_gain', f'metric = "{metric}"\nmin_gain')
    assert init["verifier"]["require_external"] is True and "self_reported" not in init["objective"]
    return text.replace("calibration_pairs = 8\n", "calibration_pairs = 8\nrequire_external = true\n")


assert SLOW_ANSWER  # the honest path of the cheats is the base's own
