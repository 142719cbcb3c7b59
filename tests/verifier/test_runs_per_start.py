"""``runs_per_start`` (issue 33, item 1): K measured client runs per server
start of a serving benchmark. Real processes (and, marked ``docker``, real
containers); every count here is by mechanism: the server appends a line per
start to a log, and says in every answer which start and which request of it
served it; nothing rests on timings."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from verifier.config import ConfigError, VerifyConfig
from verifier.runner import run_once, run_seed, run_session

PY = "python3"

# The candidate's server: one line in $STARTS_LOG per start (when set); each
# answer carries its start's id and how many requests this start served.
# mode.txt "second" garbles the texts of the 2nd client run of a start only
# (requests N..2N-1 of the start, N = RSI_SETTING_REQUESTS).
SERVER = textwrap.dedent(
    r"""
    import json, os, uuid, threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    START = uuid.uuid4().hex
    log = os.environ.get("STARTS_LOG")
    if log:
        with open(log, "a") as fh:
            fh.write(START + "\n")
    mode = open("mode.txt").read().strip() if os.path.exists("mode.txt") else ""
    N = int(os.environ.get("RSI_SETTING_REQUESTS", "4"))
    lock = threading.Lock()
    served = [0]

    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/health":
                data = b"ok"
            else:
                prompt = self.path.rsplit("/", 1)[-1]
                with lock:
                    n = served[0]
                    served[0] += 1
                text = "echo " + prompt
                if mode == "second" and N <= n < 2 * N:
                    text = "garbled nonsense"
                data = json.dumps({"text": text, "start": START, "n": n}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    ThreadingHTTPServer(("0.0.0.0", int(os.environ["RSI_PORT"])), H).serve_forever()
    """
)

# The protected client: N requests whose texts come from RSI_SEED.
CLIENT = textwrap.dedent(
    r"""
    import json, os, random, time, urllib.request
    url = os.environ["RSI_SERVER_URL"]
    seed = os.environ["RSI_SEED"]
    n = int(os.environ.get("RSI_SETTING_REQUESTS", "4"))
    rng = random.Random(seed)
    get = urllib.request.build_opener(urllib.request.ProxyHandler({})).open
    t0 = time.perf_counter()
    answers = [json.loads(get(url + "/gen/w" + str(rng.randrange(10**9))).read()) for _ in range(n)]
    window = time.perf_counter() - t0
    json.dump({"metrics": {"throughput": n / window},
               "outputs": {"texts": [a["text"] for a in answers],
                           "starts": sorted({a["start"] for a in answers}),
                           "served": [a["n"] for a in answers],
                           "seed": seed},
               "counts": {"requests": n, "failed": 0}}, open(os.environ["RSI_RESULT"], "w"))
    """
)


def _checkout(path: Path, mode: str = "") -> Path:
    (path / "bench").mkdir(parents=True)
    (path / "server.py").write_text(SERVER)
    (path / "bench" / "client.py").write_text(CLIENT)
    if mode:
        (path / "mode.txt").write_text(mode)
    return path


def _config(k: int, *, log: Path | None = None, hidden: str = "[hidden]\nseed = 12345",
            pairs: int = 7) -> VerifyConfig:  # fmt: skip
    env = f'env = {{ STARTS_LOG = "{log}" }}' if log else ""
    return VerifyConfig.from_toml(
        textwrap.dedent(
            f"""
            [benchmarks.web]
            serve = "{PY} server.py"
            client = "{PY} bench/client.py"
            ready_path = "/health"
            timeout_s = 60
            runs_per_start = {k}
            settings = {{ requests = 4 }}
            {env}
            [benchmarks.web.metrics]
            throughput = "higher"
            [objective]
            benchmark = "web"
            metric = "throughput"
            min_gain = 0.5
            [[quality]]
            kind = "wer"
            output = "texts"
            max_delta = 0.0
            [verifier]
            require_external = true
            warmup = 1
            initial_pairs = {pairs}
            step = 2
            max_pairs = {pairs}
            default_guards = false
            """
        )
        + hidden
    )


def test_a_session_starts_the_server_once_and_gives_each_run_its_own_seed(tmp_path):
    c = _checkout(tmp_path / "c")
    bench = _config(3).benchmark()
    recs = run_session(bench, c, 3, extra_env={"RSI_SEED": "12345"}, workdir=tmp_path)
    assert [r.ok for r in recs] == [True, True, True], [r.error for r in recs]
    outs = [r.result.outputs for r in recs if r.result is not None]
    assert len({o["starts"][0] for o in outs}) == 1 and all(len(o["starts"]) == 1 for o in outs)
    # the server counted 12 requests in one start, run by run
    assert [o["served"] for o in outs] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert [o["seed"] for o in outs] == [run_seed("12345", i) for i in range(3)]
    assert len({tuple(o["texts"]) for o in outs}) == 3  # its own request texts per run
    # a run dir of its own each, startup measured once (the same sample on each)
    assert len({r.output_dir for r in recs}) == 3
    assert len({r.startup_s for r in recs}) == 1 and recs[0].startup_s is not None
    assert [r.extra["session_run"] for r in recs] == [0, 1, 2]
    # K = 1: one run, today's run_once (the seed as given, not derived)
    (one,) = run_session(bench, c, 1, extra_env={"RSI_SEED": "12345"}, workdir=tmp_path)
    assert one.ok and one.result is not None and one.result.outputs["seed"] == "12345"
    plain = run_once(bench, c, extra_env={"RSI_SEED": "12345"}, workdir=tmp_path)
    assert plain.ok and plain.result is not None
    assert plain.result.outputs["texts"] == one.result.outputs["texts"]


def test_a_verification_with_three_runs_per_start(tmp_path):
    from verifier.judge import verify

    log = tmp_path / "starts.log"
    base, cand = _checkout(tmp_path / "base"), _checkout(tmp_path / "cand")
    v = verify(base, cand, _config(3, log=log, pairs=7))
    assert v.decision in ("reject", "inconclusive"), v.reason  # the same code: no gain
    starts = log.read_text().split()
    # 1 warm-up run per arm (a start each) + 7 session pairs (a start per session)
    assert len(starts) == len(set(starts)) == 2 * 1 + 2 * 7
    # one look at 7 session pairs: every one of the 7 x 3 client runs of each arm measured
    assert v.runs == 2 * 1 + 2 * 7 * 3 and v.pairs == 7, v.reason
    failed = {g.kind: g for g in v.guards}["failed_requests"]
    assert "in 21 candidate runs" in failed.detail  # every client run counts
    note = [w for w in v.warnings if "runs_per_start = 3" in w]
    assert note and "session pair" in note[0], v.warnings
    wer = {(g.kind, g.against): g for g in v.guards}[("wer", "bk")]
    assert wer.status == "pass"


def test_wrong_outputs_in_the_second_run_of_each_session_are_caught(tmp_path):
    from verifier.judge import verify

    base, cand = _checkout(tmp_path / "base"), _checkout(tmp_path / "cand", mode="second")
    v = verify(base, cand, _config(3, pairs=7))
    wer = {(g.kind, g.against): g for g in v.guards}[("wer", "bk")]
    assert wer.status == "fail", (wer, v.reason)
    assert v.decision == "reject", v.reason


def test_runs_per_start_needs_hidden_inputs_and_a_serving_benchmark():
    with pytest.raises(ConfigError) as e:
        _config(3, hidden="")
    text = "\n".join(e.value.errors)
    assert "runs_per_start = 3 needs hidden inputs" in text
    assert "[hidden] seed_env" in text and "runs_per_start = 1" in text
    _config(3, hidden='[hidden]\nseed_env = "MY_SEED"')  # a seed from the runner: fine
    _config(1, hidden="")  # K = 1 needs nothing new
    with pytest.raises(ConfigError) as e:
        VerifyConfig.from_toml(textwrap.dedent("""
            [benchmarks.b]
            command = "python b.py"
            runs_per_start = 2
            [benchmarks.b.metrics]
            speed = "higher"
            [objective]
            benchmark = "b"
            metric = "speed"
            [hidden]
            seed = 1
        """))
    assert "is for serving benchmarks" in "\n".join(e.value.errors)
    with pytest.raises(ConfigError) as e:
        _config(4, pairs=50)  # 50 session pairs x 4 runs: over accept_max_runs (160)
    assert "x runs_per_start = 4" in "\n".join(e.value.errors)


def test_the_default_is_one_run_per_start():
    cfg = VerifyConfig.from_toml(
        textwrap.dedent("""
            [benchmarks.b]
            serve = "s"
            client = "c"
            ready_path = "/health"
            [benchmarks.b.metrics]
            throughput = "higher"
            [objective]
            benchmark = "b"
            metric = "throughput"
        """)
    )
    assert cfg.benchmark().runs_per_start == 1


# What a client run finds of the run before it in the same container (a
# marker file in /tmp, its own output file, a process it left running),
# reported in its outputs; then it leaves all three behind for the next run.
SNOOP = textwrap.dedent(
    r"""
    import os, subprocess, sys
    out = os.environ["RSI_OUTPUT_DIR"]
    found = []
    if os.path.exists("/tmp/marker"):
        found.append("file")
    if os.path.exists(os.path.join(out, "mine")):
        found.append("output")
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            if b"rsi-leftover" in open(f"/proc/{p}/cmdline", "rb").read():
                found.append("process")
        except OSError:
            pass
    if os.path.exists("/dev/shm/marker"):
        found.append("shm")
    open("/tmp/marker", "w").write("x")
    open("/dev/shm/marker", "w").write("x")
    open(os.path.join(out, "mine"), "w").write("x")
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "rsi-leftover"],
                     start_new_session=True)
    # a process that hops to a new pid all the time (forks, the parent exits):
    # a kill that walks a list of pids misses it
    subprocess.Popen([sys.executable, "-c", HOP, "rsi-leftover"], start_new_session=True)
    """
)
HOP = "import os, time\nwhile True:\n    if os.fork():\n        os._exit(0)\n    time.sleep(0.0005)"

# The evaluator: which files its input dir holds, and which container it ran in.
EVALUATOR = textwrap.dedent(
    r"""
    import json, os, socket
    inp = os.environ["RSI_INPUT_DIR"]
    json.dump({"outputs": {"evaluated": sorted(os.listdir(inp)), "host": socket.gethostname()}},
              open(os.environ["RSI_RESULT"], "w"))
    """
)


@pytest.mark.docker
def test_a_session_in_containers(tmp_path):
    """K = 3 in real containers: one server container; the client runs in one
    container too (exec'd in turn) and so do the evaluators, yet no run finds
    anything of the run before it (its files in /tmp and /dev/shm, its
    output, its processes, one of them hopping to a new pid all the time),
    and each evaluator reads exactly its own run's outputs."""
    from tests.conftest import docker_unavailable_reason

    why = docker_unavailable_reason()
    if why is not None:
        pytest.skip(why)
    from tests.images import runtime_image
    from verifier.isolation import ContainerIsolation, IsolationSpec

    c = _checkout(tmp_path / "c", mode="second")
    (c / "bench" / "client.py").write_text(CLIENT.replace(
        "window = time.perf_counter() - t0",
        "window = time.perf_counter() - t0\nexec(open('bench/snoop.py').read())",
    ).replace('"seed": seed}', '"seed": seed, "found": found}'))  # fmt: skip
    (c / "bench" / "snoop.py").write_text(f"HOP = {HOP!r}\n" + SNOOP)
    (c / "bench" / "evaluate.py").write_text(EVALUATOR)
    bench = _config(3).benchmark().model_copy(update={"evaluator": f"{PY} bench/evaluate.py"})
    iso = ContainerIsolation(IsolationSpec.simple(runtime_image(), cpus=1, memory="1g"))
    try:
        recs = run_session(bench, c, 3, extra_env={"RSI_SEED": "9"}, workdir=tmp_path,
                           isolation=iso)  # fmt: skip
        again = run_session(bench, c, 1, extra_env={"RSI_SEED": "9"}, workdir=tmp_path,
                            isolation=iso)  # fmt: skip
    finally:
        iso.close()
    assert [r.ok for r in recs] == [True] * 3, [(r.error, r.stderr_tail) for r in recs]
    outs = [r.result.outputs for r in recs if r.result is not None]
    assert outs[0]["starts"] == outs[1]["starts"] == outs[2]["starts"]  # one server start
    assert outs[1]["served"] == [4, 5, 6, 7]
    assert outs[1]["texts"] == ["garbled nonsense"] * 4 and outs[0]["texts"][0].startswith("echo")
    names = [r.extra["containers"] for r in recs]
    assert len({n[0] for n in names}) == 1 and len({n[1] for n in names}) == 1  # server, client box
    assert [o["found"] for o in outs] == [[], [], []]  # nothing of the run before
    assert [o["evaluated"] for o in outs] == [["mine"]] * 3  # its own run's outputs only
    assert len({o["host"] for o in outs}) == 1  # the evaluators' box
    assert again[0].ok and again[0].result is not None
    assert again[0].result.outputs["host"] != outs[0]["host"]  # a box per session
    assert again[0].extra["containers"][1] != names[0][1]


def test_confirmation_pairs_are_sessions_and_every_run_is_read_at_its_index(tmp_path):
    from verifier.measure import Session

    seen: list[tuple[str, int, str]] = []

    def on_run(arm, rec, index):
        seen.append((arm, index, rec.result.outputs["starts"][0]))

    bench = _config(3).benchmark()
    c = _checkout(tmp_path / "c")
    with Session(bench, {"bk": c, "candidate": c}, seed=1, extra_env={"RSI_SEED": "5"},
                 on_run=on_run) as s:  # fmt: skip
        assert s.add_pairs(2) is None and s.confirm_pairs(1) is None
        assert s.pairs == 2 and s.runs == 2 * 3 * 3
        for arm in ("bk", "candidate"):
            assert len(s.records[arm]) == 6 and len(s.confirm_records[arm]) == 3
            idx = [i for a, i, _ in seen if a == arm]
            assert sorted(idx) == list(range(9))
            starts = [st for a, _, st in seen if a == arm]
            assert len(set(starts)) == 3  # a start per session, 3 runs each
            assert s.by_session(s.values(arm, "throughput")).size == 2


def test_the_wild_run_rule_counts_runs_not_session_pairs():
    """A look over 7 session pairs of 3 runs each: the wild-run count reads
    the 21 runs (``run_gains``); the interval reads the 7 session means."""
    from verifier.stats import Design, judge_objective

    rng = np.random.default_rng(0)
    runs = 0.2 + rng.normal(0, 0.01, 21)  # +22% every run
    lv = rng.normal(0, 0.01, 21)
    g = runs.reshape(-1, 3).mean(axis=1)
    design = Design.from_schedule(7, 2, 7, alpha=0.01)
    kw = dict(min_gain=0.01, design=design, levels=lv.reshape(-1, 3).mean(axis=1),
              wild_rate=0.1, confidence=0.99, max_runs=160)  # fmt: skip
    plain = judge_objective(g, **kw)
    assert plain.wild is not None and plain.wild.runs == 7 and plain.more == 51 - 7
    look = judge_objective(g, run_gains=runs, run_levels=lv, **kw)
    assert look.wild is not None and look.wild.runs == 21
    assert look.finding == "runs" and look.more == 51 - 21  # in runs: the judge makes sessions
    assert look.gain == plain.gain and look.n == 7


def test_calibration_measures_a_a_session_pairs(tmp_path):
    from verifier.calibrate import calibrate

    log = tmp_path / "starts.log"
    c = _checkout(tmp_path / "c")
    cal = calibrate(c, _config(3, log=log), pairs=4)
    assert cal.error is None, cal.error
    assert cal.pairs == 4  # session pairs: one value per A/A session pair
    assert len(log.read_text().split()) == 2 * 1 + 2 * 4  # warm-ups + a start per session


def test_a_calibration_that_mostly_starts_servers_says_which_runs_per_start_would_measure(tmp_path):
    """A server that loads for 1.5 s (a sleep: the mechanism, not a timing)
    before a client window of a few milliseconds: the calibration says how
    little of its wall time was measured and which ``runs_per_start`` would
    measure about 70% of it; the same benchmark with a quick start and a 2 s client window (a sleep)
    says nothing."""
    from verifier.calibrate import calibrate
    from verifier.cli import render_calibration

    def config(k: int) -> VerifyConfig:  # _config's benchmark, 2 A/A pairs, no warm-up
        cfg = _config(k)
        quick = cfg.verifier.model_copy(update={"warmup": 0, "calibration_pairs": 2})
        return cfg.model_copy(update={"verifier": quick})

    slow = _checkout(tmp_path / "slow")
    (slow / "server.py").write_text("import time\ntime.sleep(1.5)\n" + SERVER)
    cal = calibrate(slow, config(1))
    assert cal.error is None, cal.error
    note = cal.cost_note
    assert note.startswith("measured share ") and "runs_per_start = 1)" in note, note
    k = int(note.split("runs_per_start = ")[2].split()[0])
    assert 2 <= k <= 64, note
    assert "would measure about" in note and "needs hidden inputs" in note, note
    rendered = [str(x) for x in render_calibration(cal, 0.5) if isinstance(x, str)]
    assert any(line.startswith("[cyan]cost:[/] measured share") for line in rendered), rendered
    quick = _checkout(tmp_path / "quick")
    client = (quick / "bench" / "client.py").read_text()
    (quick / "bench" / "client.py").write_text(client.replace(
        "window = time.perf_counter() - t0", "time.sleep(2.0)\nwindow = time.perf_counter() - t0"))
    quick = calibrate(quick, config(1))
    assert quick.error is None and quick.cost_note == "", quick.cost_note


def _with_matrix(cfg: VerifyConfig, matrix: dict) -> VerifyConfig:
    """``cfg`` with ``[benchmarks.web.matrix]`` = ``matrix``, validated again."""
    from verifier.matrix import Matrix

    web = cfg.benchmark().model_copy(update={"matrix": Matrix.model_validate(matrix)})
    return VerifyConfig.model_validate({**cfg.model_dump(), "benchmarks": {"web": web.model_dump()}})


def test_a_matrix_cell_is_measured_in_sessions(tmp_path):
    """``runs_per_start`` with a deployment matrix: a cell's pairs are session
    pairs too (a start per session, K client runs at the cell's setting, each
    with its own request texts), warm-ups and guards as in the primary; a
    candidate that garbles every second run of a start fails in the cell."""
    from verifier.cells import measure_matrix

    log = tmp_path / "starts.log"
    cfg = _with_matrix(_config(2, log=log), {"requests": [4, 6], "pairs": 2, "max_pairs": 2})
    base = _checkout(tmp_path / "base")
    run = measure_matrix(base, _checkout(tmp_path / "cand"), cfg, include_primary=False)
    assert run.error is None, run.error
    (cell,) = run.cells
    assert cell.setting == {"requests": 6} and cell.pairs == 2
    # per arm: 1 warm-up start + 2 sessions (a start each) of 2 client runs
    assert len(log.read_text().split()) == 2 * (1 + 2)
    assert run.runs == 2 * (1 + 2 * 2)
    wer = {(g.kind, g.against): g for g in cell.guards}[("wer", "bk")]
    assert wer.status == "pass", wer
    # the 2nd run of each start (requests 6..11 of a start at 6 requests) garbled: caught
    bad = measure_matrix(base, _checkout(tmp_path / "bad", mode="second"), cfg,
                         include_primary=False)  # fmt: skip
    assert bad.error is None, bad.error
    wer = {(g.kind, g.against): g for g in bad.cells[0].guards}[("wer", "bk")]
    assert wer.status == "fail", wer


def test_runs_per_start_with_a_matrix_is_counted_in_the_estimates():
    """tiny-tts (a matrix: one other cell, 2 pairs measured up to 6) with
    ``runs_per_start = 2``, refused before: the run estimate counts 2 runs per
    session in the calibration, the primary and the other cell."""
    from harness.cli import estimate
    from harness.spec import build_task
    from tests.adversarial import round2

    text = (round2.EXAMPLE / ".rsi" / "config.toml").read_text()
    assert "timeout_s = 120\n" in text
    spec = build_task(text.replace("timeout_s = 120\n", "timeout_s = 120\nruns_per_start = 2\n"),
                      None, "t")  # fmt: skip
    bench, v = spec.verify.benchmark(), spec.verify.verifier
    assert bench.per_start == 2 and bench.matrix is not None and v.calibration_pairs == 8
    said = estimate(spec, 1)
    assert "B0's calibration 32" in said, said  # 8 A/A session pairs of 2 runs, 2 arms
    assert "a reject often stops at 16" in said, said  # 4 session pairs of 2 runs, 2 arms
    # 3 arms x 1 other cell x 6 session pairs of 2 runs
    assert "plus 36 for the deployment matrix's other cells after an accept" in said, said
    assert v.most_candidate_runs(2) == max(20 * 2, v.accept_max_runs)
