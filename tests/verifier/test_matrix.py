"""The deployment matrix (issue 22 item 1): ``[benchmarks.X.matrix]`` checked
at config time, its cells, and the real verifier on tiny-tts judging every
cell: a candidate that serializes requests behind a lock (fast alone, a queue
under load) gains at concurrency 1 and is rejected at concurrency 4 for its
tail latency, the cell named; an honest faster candidate passes every cell.

The tiny-tts cases run the real protected client and evaluator and the
shipped guards against pure-Python stand-in servers (``tests/adversarial/
round2.py``): their time per chunk is a sleep, so what decides each cell is
the mechanism (a lock makes four requests wait for each other), not this
machine's noise.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from harness.spec import build_task
from harness.tomlout import dump_toml
from tests.adversarial import round2
from verifier.cells import (
    cell_bench,
    cell_isolation,
    cell_row,
    cells_decision,
    failed_cells_reason,
    matrix_sentence,
)
from verifier.config import ConfigError, VerifyConfig
from verifier.isolation import ProcessIsolation
from verifier.judge import verify
from verifier.verdict import CellResult, Decision, GuardResult, GuardStatus, Interval, Verdict

ROOT = Path(__file__).resolve().parents[2]
SEED_ENV = "TTS_EVAL_SEED"

BASE = """
[benchmarks.tts]
command = "python bench.py"
settings = { concurrency = 2 }

[benchmarks.tts.metrics]
throughput = "higher"

[benchmarks.tts.samples]
latency_s = "lower"

[objective]
benchmark = "tts"
metric = "throughput"
min_gain = 0.05
"""


def _config(matrix: str) -> VerifyConfig:
    return VerifyConfig.from_toml(BASE + "\n[benchmarks.tts.matrix]\n" + textwrap.dedent(matrix))


def _errors(matrix: str) -> list[str]:
    with pytest.raises(ConfigError) as e:
        _config(matrix)
    return e.value.errors


# ------------------------------------------------------------- config time


def test_a_matrix_gives_its_cells_primary_first_and_their_environment():
    cfg = _config('concurrency = [1, 4]\ncpus = ["0", "0-1"]\npairs = 2\n'
                  'primary = { concurrency = 4 }')
    m = cfg.benchmark().matrix
    assert m is not None and m.pairs == 2
    cells = m.cells()
    assert [c.label for c in cells] == ["concurrency=4, cpus=0", "concurrency=1, cpus=0",
                                        "concurrency=1, cpus=0-1", "concurrency=4, cpus=0-1"]
    assert cells[0].primary and not any(c.primary for c in cells[1:])
    bench = cell_bench(cfg.benchmark(), cells[2])
    assert bench.env == {"RSI_MATRIX_CONCURRENCY": "1", "RSI_MATRIX_CPUS": "0-1"}
    # a fixed setting of the same name follows the cell: RSI_SETTING_CONCURRENCY too
    assert bench.settings == {"concurrency": 1}
    assert bench.setting_env() == {"RSI_SETTING_CONCURRENCY": "1"}
    assert cells[2].cpus == "0-1" and cfg.benchmark().env == {}  # the config is untouched


def test_no_matrix_keeps_a_config_as_it_was():
    cfg = VerifyConfig.from_toml(BASE)
    assert cfg.benchmark().matrix is None
    assert cell_bench(cfg.benchmark(), None) is cfg.benchmark()


@pytest.mark.parametrize(
    ("matrix", "message"),
    [
        ("", "declare at least one setting"),
        ('concurrency = ["1; rm -rf /"]', "is not a plain value"),
        ('concurrency = ["$(id)"]', "is not a plain value"),
        ('concurrency = ["--privileged"]', "is not a plain value"),
        ('concurrency = ["a b"]', "is not a plain value"),
        ('concurrency = ["' + "9" * 65 + '"]', "is not a plain value"),
        ('cpus = ["0-1 --cap-add=ALL"]', "is not a CPU set"),
        ('cpus = ["3-1"]', "runs backwards"),
        ('cpus = ["0", "all"]', "is not a CPU set"),
        ("concurrency = [1, 1]", "listed twice"),
        ("concurrency = [1, 2, 3, 4, 5, 6, 7, 8, 9]", "at most 8"),
        ("concurrency = [1, 2, 3, 4, 5]\nthreads = [1, 2, 3, 4]", "20 cells"),
        ("concurrency = [4294967296]", "out of range"),
        ('"Concurrency" = [1]', "lower-case identifier"),
        ('"rsi x" = [1]', "lower-case identifier"),
        ("concurrency = [1, 4]\nprimary = { concurrency = 8 }", "8 is not one of its values"),
        ("concurrency = [1, 4]\nprimary = { threads = 1 }", "'threads' is not a setting"),
        ("concurrency = [1, 4]\npairs = 1", "pairs"),
    ],
)
def test_bad_matrices_are_refused_at_config_time_with_what_to_change(matrix, message):
    errors = _errors(matrix)
    assert any(message in e and "benchmarks.tts.matrix" in e for e in errors), errors


def test_matrix_values_are_typed_booleans_and_tables_refused():
    assert _errors("concurrency = [true]")
    assert _errors('concurrency = 4')
    assert _errors("concurrency = [[1]]")


def test_the_json_schema_knows_the_matrix():
    import jsonschema

    from harness.schema import config_schema

    data = tomllib.loads((ROOT / "examples" / "tiny-tts" / ".rsi" / "config.toml").read_text())
    assert "matrix" in data["benchmarks"]["tts"]
    jsonschema.validate(data, config_schema())
    data["benchmarks"]["tts"]["matrix"]["concurrency"] = "4"  # not a list
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, config_schema())


def test_a_cell_with_cpus_pins_a_copy_of_the_isolation_never_the_callers():
    cfg = _config('cpus = ["0", "0-1"]')
    iso = ProcessIsolation()
    cells = cfg.benchmark().matrix.cells()
    pinned = cell_isolation(iso, cells[0])
    assert pinned is not iso
    pinned.pin(cells[0].cpus)
    assert pinned.cpus == (0,) and iso.cpus == () and iso.pinned_env == {}
    assert cell_isolation(iso, None) is iso


def test_each_cells_cpuset_reaches_its_containers_and_no_other(tmp_path):
    """Container isolation: a cell's CPU set is its containers' cpuset_cpus,
    with thread variables for that many CPUs; cells never share a pinning."""
    from verifier.isolation import ContainerIsolation, IsolationSpec, Job

    iso = ContainerIsolation(IsolationSpec.simple("rsi-bot/base:bookworm", cpus=2), client=object())
    one, both = _config('cpus = ["0", "0-1"]').benchmark().matrix.cells()
    kw = {}
    for cell in (one, both):
        pinned = cell_isolation(iso, cell)
        pinned.pin(cell.cpus)
        kw[cell.label] = (pinned.create_kwargs(Job("x", tmp_path))["cpuset_cpus"],
                          pinned.env.get("OMP_NUM_THREADS"))
    assert kw == {"cpus=0": ("0", "1"), "cpus=0-1": ("0,1", "2")}
    assert "cpuset_cpus" not in iso.create_kwargs(Job("x", tmp_path)) and "OMP_NUM_THREADS" not in iso.env


# ------------------------------------------------------ judging cells


def _guard(status: GuardStatus, name: str = "latency_p95_s <= 1.05x") -> GuardResult:
    return GuardResult(name=name, kind="ratio", metric="latency_p95_s", bound="<= 1.05x",
                       value=2.4 if status == "fail" else 0.7, status=status,
                       detail=f"ratio {'2.4' if status == 'fail' else '0.7'}x")


def _cell(setting: dict, gain: float, low: float, high: float, *guards: GuardResult,
          primary: bool = False) -> CellResult:
    return CellResult(setting=setting, primary=primary, pairs=4, metric="throughput",
                      gain=gain, gain_ci=Interval(low=low, high=high), guards=guards)


def test_a_failed_guard_names_its_cell_and_the_sentence_says_where_the_gain_holds():
    cells = [
        _cell({"concurrency": 1}, 0.66, 0.5, 0.8, _guard("pass"), primary=True),
        _cell({"concurrency": 4}, -0.8, -0.85, -0.75, _guard("fail")),
        _cell({"concurrency": 8}, 0.02, -0.05, 0.1, _guard("pass")),
    ]
    reason = failed_cells_reason(cells[1:])
    assert reason == "guard failed: latency_p95_s <= 1.05x at concurrency=4 vs Bk: ratio 2.4x"
    assert failed_cells_reason(cells[::2]) == ""
    assert matrix_sentence(cells) == (
        "The gain holds at concurrency=1 (+66%); it does not hold at concurrency=4 "
        "(latency_p95_s <= 1.05x failed); it is not clear at concurrency=8 (+2%, interval spans 0)."
    )
    row = cell_row(cells[1])
    assert row[0] == "concurrency=4" and "guard failed: latency_p95_s <= 1.05x" in row[1]
    assert cell_row(cells[0])[0] == "concurrency=1 (primary)"


def test_verdict_cells_round_trip_and_old_verdicts_load():
    v = Verdict(decision=Decision.REJECT, reason="guard failed",
                cells=(_cell({"concurrency": 4, "cpus": "0-1"}, -0.5, -0.6, -0.4, _guard("fail")),))
    back = Verdict.from_json(v.to_json())
    assert back == v and back.cells[0].label == "concurrency=4, cpus=0-1"
    assert back.cells[0].failed[0].status == "fail"
    old = v.model_dump(by_alias=True, mode="json")
    del old["cells"]  # a verdict written before the matrix existed
    import json

    assert Verdict.from_json(json.dumps(old)).cells == ()


# ------------------------------------------- the real verifier on tiny-tts

LOCK_SERVER = round2._COMMON + textwrap.dedent(
    r"""
    import threading

    MODE = open(os.path.join(os.path.dirname(__file__), "mode.txt")).read().strip()
    CHUNK_S = 0.1 if MODE == "honest" else 0.06  # seconds to "synthesize" 160 ms of audio
    LOCK = threading.Lock()  # "serialized": one request at a time, the others queue

    def frame(tok):
        lo = vocab.TONE_LOW_HZ + vocab.TONE_STEP_HZ * (tok // 16)
        hi = vocab.TONE_HIGH_HZ + vocab.TONE_STEP_HZ * (tok % 16)
        t = [i / vocab.SAMPLE_RATE for i in range(HOP)]
        return array("h", [round(0.27 * 32767 * (math.sin(2 * math.pi * lo * x)
                                                  + math.sin(2 * math.pi * hi * x))) for x in t]).tobytes()

    FRAMES = [frame(t) for t in range(vocab.CODEBOOK)]

    class Handler(Base):
        def stream(self, toks, style):
            chunks = [b"".join(FRAMES[t] for t in toks[i:i + CHUNK]) for i in range(0, len(toks), CHUNK)]
            if MODE == "serialized":
                with LOCK:
                    self.chunks(chunks)
            else:
                self.chunks(chunks)

        def chunks(self, chunks):
            for c in chunks:
                time.sleep(CHUNK_S)
                self.send(c)

    serve(Handler)
    """
)


def _tts_config(concurrency: list[int], pairs: int = 2) -> VerifyConfig:
    """tiny-tts's shipped config (guards, quality, hidden seed) with this
    interpreter, 6 requests a run, round 2's small pairs and the matrix given."""
    data = tomllib.loads((round2.EXAMPLE / ".rsi" / "config.toml").read_text())
    data["guards"] = [g for g in data["guards"] if g["metric"] != "startup_s"]
    bench = data["benchmarks"]["tts"]
    for key in ("serve", "client", "evaluator"):
        bench[key] = bench[key].replace("python ", f"{sys.executable} ", 1)
    bench["settings"] = {**bench.get("settings", {}), "requests": 6}
    bench["matrix"] = {"concurrency": concurrency, "pairs": pairs}
    data["verifier"] = {**data["verifier"], **round2.SMALL}
    return build_task(dump_toml(data), None, "r22mat").verify


@pytest.fixture
def hidden_seed(monkeypatch):
    monkeypatch.setenv(SEED_ENV, "2222")


@pytest.mark.slow
def test_the_client_honours_the_cells_concurrency(tmp_path, hidden_seed):
    """Mechanism check of the stand-in and the client: at concurrency 4 the
    serialized server's requests wait for each other, at 1 they do not."""
    repo = round2.checkout(tmp_path, "cand", LOCK_SERVER, "serialized")
    import json
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "tiny_tts/server.py"], cwd=repo,
                              env={**os.environ, "RSI_PORT": str(port)}, stdout=subprocess.PIPE)
    try:
        assert server.stdout is not None and b"READY" in server.stdout.readline()
        time.sleep(0.1)
        spans = {}
        for c in (1, 4):
            out = tmp_path / f"c{c}.json"
            env = {**os.environ, "RSI_MATRIX_CONCURRENCY": str(c), "RSI_SETTING_CONCURRENCY": "2",
                   "RSI_SERVER_URL": f"http://127.0.0.1:{port}", "RSI_RESULT": str(out),
                   "RSI_SEED": "5", "RSI_SETTING_REQUESTS": "4"}
            subprocess.run([sys.executable, "bench/client.py"], cwd=repo, env=env, check=True)
            res = json.loads(out.read_text())
            assert res["meta"]["concurrency"] == c and res["counts"]["failed"] == 0
            # requests in flight on average: the latencies' sum over the client's window
            spans[c] = sum(res["samples"]["latency_s"]) / res["meta"]["window_s"]
    finally:
        server.terminate()
        server.wait(10)
    # one at a time: the latencies are disjoint parts of the window (sum <= window); four at
    # once behind the lock: the k-th waits for the k-1 before it (sum >= 2.5 windows for
    # utterances of 2 to 4 chunks: 4 L1 + 3 L2 + 2 L3 + L4 over L1 + .. + L4)
    assert spans[1] <= 1.0 and spans[4] > 2.0, spans


@pytest.mark.slow
def test_a_candidate_that_queues_under_load_is_rejected_at_the_high_concurrency_cell(
    tmp_path, hidden_seed
):
    bk = round2.checkout(tmp_path, "bk", LOCK_SERVER, "honest")
    cand = round2.checkout(tmp_path, "cand", LOCK_SERVER, "serialized")
    v = verify(bk, cand, _tts_config([1, 4]))
    assert v.decision == "reject", v.reason
    # the primary cell (concurrency 1) accepted the gain: a lock costs nothing alone
    assert v.objective is not None and v.objective.gain > 0.3, v.objective
    assert all(g.status == "pass" for g in v.guards), [(g.name, g.status) for g in v.guards]
    primary, high = v.cells
    assert primary.primary and primary.setting == {"concurrency": 1} and primary.gain > 0.3
    assert high.setting == {"concurrency": 4} and high.measured and high.pairs == 2
    assert "latency_p95_s <= 1.05x at concurrency=4 vs Bk" in v.reason, v.reason
    assert high.gain is not None and high.gain < 0 and high.gain_ci is not None
    p95 = next(g for g in high.guards if g.metric == "latency_p95_s" and g.against == "bk")
    assert p95.status == "fail" and p95.value > 1.5, p95
    assert "does not hold at concurrency=4" in matrix_sentence(v.cells)
    assert Verdict.from_json(v.to_json()) == v


@pytest.mark.slow
def test_an_honest_faster_candidate_passes_every_cell(tmp_path, hidden_seed):
    bk = round2.checkout(tmp_path, "bk", LOCK_SERVER, "honest")
    cand = round2.checkout(tmp_path, "cand", LOCK_SERVER, "faster")
    v = verify(bk, cand, _tts_config([1, 4]))
    assert v.decision == "accept", v.reason
    assert [c.setting for c in v.cells] == [{"concurrency": 1}, {"concurrency": 4}]
    for cell in v.cells:
        assert cell.measured and not cell.failed, [(g.name, g.status, g.detail) for g in cell.guards]
        assert cell.gain is not None and cell.gain > 0 and cell.gain_ci is not None
    assert matrix_sentence(v.cells).startswith("The gain holds at concurrency=1 (+")


@pytest.mark.slow
def test_a_candidate_rejected_at_the_primary_cell_does_not_pay_for_the_matrix(
    tmp_path, hidden_seed
):
    """At concurrency 4 as the primary the lock is seen at once: rejected
    there, the other cell is listed as not measured and the verdict says so."""
    bk = round2.checkout(tmp_path, "bk", LOCK_SERVER, "honest")
    cand = round2.checkout(tmp_path, "cand", LOCK_SERVER, "serialized")
    v = verify(bk, cand, _tts_config([4, 1]))
    assert v.decision == "reject", v.reason
    assert [(c.setting, c.measured) for c in v.cells] == [({"concurrency": 4}, True),
                                                        ({"concurrency": 1}, False)]
    assert any("were not measured" in w and "concurrency=1" in w for w in v.warnings), v.warnings
    assert "not measured" in matrix_sentence(v.cells)


def test_the_cli_shows_the_matrix(capsys):
    from rich.console import Console

    from verifier.cli import render_verdict

    v = Verdict(decision=Decision.REJECT, reason="guard failed",
                cells=(_cell({"concurrency": 1}, 0.6, 0.5, 0.7, _guard("pass"), primary=True),
                       _cell({"concurrency": 4}, -0.5, -0.6, -0.4, _guard("fail"))))
    console = Console(width=200, record=True)
    for part in render_verdict(v):
        console.print(part)
    text = console.export_text()
    assert "deployment matrix" in text and "concurrency=1 (primary)" in text
    assert "it does not hold at concurrency=4 (latency_p95_s <= 1.05x failed)" in text


@pytest.mark.slow
def test_measure_matrix_measures_every_cell_of_a_pair_of_checkouts(tmp_path, hidden_seed):
    """What the watch after merge calls: every cell, the primary included, with
    the pairs asked for; the lock's cell fails its tail guard, the other passes."""
    from verifier.cells import measure_matrix

    bk = round2.checkout(tmp_path, "bk", LOCK_SERVER, "honest")
    cand = round2.checkout(tmp_path, "cand", LOCK_SERVER, "serialized")
    run = measure_matrix(bk, cand, _tts_config([1, 4]), pairs=2, seed=7)
    assert run.error is None, run.error
    assert [(c.setting, c.primary, c.pairs) for c in run.cells] == [
        ({"concurrency": 1}, True, 2), ({"concurrency": 4}, False, 2)]
    assert [c.setting for c in run.failed] == [{"concurrency": 4}]
    assert run.runs == 8 and run.seed == 7
    assert run.cells[0].gain is not None and run.cells[0].gain > 0.3
    only = measure_matrix(bk, cand, _tts_config([1, 4]), pairs=2, include_primary=False)
    assert [c.setting for c in only.cells] == [{"concurrency": 4}] and only.failed


def test_the_run_estimate_counts_the_matrix():
    from harness.cli import estimate

    spec = build_task((round2.EXAMPLE / ".rsi" / "config.toml").read_text(), None, "t")
    text = estimate(spec, 1)
    # tiny-tts: one other cell (concurrency=4), 2 pairs measured up to 6 (max_pairs), 3 arms, no warm-up
    assert "plus 18 for the deployment matrix's other cells after an accept" in text, text


def test_a_guard_unclear_in_a_cell_makes_an_accept_review_never_a_point_decision():
    """Issue 29: a cell's guard whose interval straddles its bound on the
    cell's few pairs sends an accept to review, naming the guard, the cell and
    what would decide it; a failed guard still rejects; no cell unclear: as it was."""
    unclear = GuardResult(name="latency_p95_s <= 1.05x", kind="ratio", metric="latency_p95_s",
                          bound="<= 1.05x", value=1.04, status="unclear",
                          detail="1.040x [0.950x, 1.150x], bound <= 1.05x (interval straddles the bound)")
    cells = [_cell({"concurrency": 4}, 0.1, -0.05, 0.2, unclear)]
    decision, reason, warnings = cells_decision(
        Decision.ACCEPT, "gain ok", cells, [], pairs=2, bench_name="tts")
    assert decision == Decision.REVIEW, reason
    assert "latency_p95_s <= 1.05x at concurrency=4 vs Bk" in reason
    assert "never decided by its point" in reason and "[benchmarks.tts.matrix] max_pairs" in reason
    assert "measured to 2 pairs in the cell" in reason
    _, sessions, _ = cells_decision(Decision.ACCEPT, "gain ok", cells, [], pairs=2, bench_name="tts",
                                    per_start=4)  # runs_per_start = 4: session pairs
    assert "measured to 2 session pairs (8 runs of each arm) in the cell" in sessions
    assert warnings == []
    # a review stays a review with its own reason; the undecided cell is a warning then
    decision, reason, warnings = cells_decision(
        Decision.REVIEW, "gain > 2x", cells, [], pairs=2, bench_name="tts")
    assert (decision, reason) == (Decision.REVIEW, "gain > 2x") and len(warnings) == 1
    # a failed guard in another cell rejects first
    failed = [*cells, _cell({"concurrency": 8}, -0.8, -0.9, -0.7, _guard("fail"))]
    decision, reason, _ = cells_decision(
        Decision.ACCEPT, "gain ok", failed, [], pairs=2, bench_name="tts")
    assert decision == Decision.REJECT and "concurrency=8" in reason
    clear = [_cell({"concurrency": 4}, 0.1, 0.05, 0.2, _guard("pass"))]
    assert cells_decision(Decision.ACCEPT, "gain ok", clear, [], pairs=2,
                          bench_name="tts") == (Decision.ACCEPT, "gain ok", [])


# ------------------------------------------- a cell undecided: measured further

_CELL_BENCH = r'''
import json, os, pathlib, sys, time
conc = int(os.environ.get("RSI_SETTING_CONCURRENCY", "1"))
ARM = {arm!r}
# the candidate's runs at each concurrency, counted across fresh exports
counter = pathlib.Path({counter!r}) / f"{{ARM}}-{{conc}}.txt"
i = int(counter.read_text()) if counter.exists() else 0
counter.write_text(str(i + 1))
jitter = 1 + 0.002 * ((i * 7) % 5)
latency = 1.0 * jitter
throughput = 1.0 * jitter
if ARM == "cand":
    throughput *= 1.3
    if conc == 4:
        latency *= {cell_latency}[i] if i < len({cell_latency}) else {later}
time.sleep(0.3 / throughput)  # the work the throughput claims: the verifier's clock sees it
json.dump({{"metrics": {{"throughput": throughput}}, "samples": {{"latency_s": [latency] * 8}}}},
          open(os.environ["RSI_RESULT"], "w"))
'''

_CELL_CONFIG = BASE + """
[benchmarks.tts.matrix]
concurrency = [1, 4]
pairs = 2
{max_pairs}

[[guards]]
metric = "latency_p50_s"
max_ratio = 1.05
required = true

[verifier]
initial_pairs = 4
step = 2
max_pairs = 8
warmup = 0
default_guards = false
accept_wild_rate = 0
"""


def _cell_checkouts(tmp_path, cell_latency, later):
    counter = tmp_path / "counts"
    counter.mkdir(parents=True)
    out = []
    for arm in ("bk", "cand"):
        d = tmp_path / arm
        d.mkdir()
        (d / "bench.py").write_text(_CELL_BENCH.format(
            arm=arm, counter=str(counter), cell_latency=list(cell_latency), later=later))
        subprocess.run(["git", "init", "-q"], cwd=d, check=True)
        subprocess.run(["git", "add", "-A"], cwd=d, check=True)
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", arm],
                       cwd=d, check=True)
        out.append(d)
    return out


@pytest.mark.slow
def test_a_cell_whose_guard_stays_unclear_is_measured_to_max_pairs_then_review(tmp_path):
    """A candidate whose tail swings 0.5x / 2x at concurrency 4 (by its own
    run count, not this machine's noise): the guard straddles its bound at any
    number of pairs, so the cell is measured one block at a time to the
    matrix's max_pairs (default 3x pairs) and the accept goes to review,
    naming the guard, the cell and max_pairs; with max_pairs = pairs, no further."""
    swing = [0.5, 2.0] * 10
    bk, cand = _cell_checkouts(tmp_path, swing, 1.0)
    v = verify(bk, cand, VerifyConfig.from_toml(_CELL_CONFIG.replace("{max_pairs}", "")))
    assert v.decision == "review", v.reason
    assert [(c.setting, c.pairs) for c in v.cells] == [({"concurrency": 1}, v.pairs),
                                                       ({"concurrency": 4}, 6)]
    assert "latency_p50_s <= 1.05x at concurrency=4" in v.reason
    assert "measured to 6 pairs" in v.reason and "[benchmarks.tts.matrix] max_pairs" in v.reason

    bk, cand = _cell_checkouts(tmp_path / "again", swing, 1.0)
    v = verify(bk, cand, VerifyConfig.from_toml(_CELL_CONFIG.replace("{max_pairs}", "max_pairs = 2")))
    assert v.decision == "review" and [c.pairs for c in v.cells][1] == 2, v.reason
    assert "measured to 2 pairs" in v.reason


@pytest.mark.slow
def test_a_cell_unclear_on_its_first_pairs_is_decided_by_more_of_them(tmp_path):
    """The candidate's first run at concurrency 4 is as fast as Bk's, every
    later one 1.3x slower: its first 2 pairs straddle the bound; measured
    further (up to 10), the cell's guard fails and the candidate is rejected,
    the cell named: not a review, and never a pass on a point."""
    bk, cand = _cell_checkouts(tmp_path, [1.0], 1.3)
    v = verify(bk, cand, VerifyConfig.from_toml(_CELL_CONFIG.replace("{max_pairs}", "max_pairs = 10")))
    assert v.decision == "reject", v.reason
    cell = v.cells[1]
    assert cell.setting == {"concurrency": 4} and 2 < cell.pairs <= 10, cell.pairs
    assert "latency_p50_s <= 1.05x at concurrency=4" in v.reason
    # a cell clear at once is not measured further
    bk, cand = _cell_checkouts(tmp_path / "clear", [], 1.0)
    v = verify(bk, cand, VerifyConfig.from_toml(_CELL_CONFIG.replace("{max_pairs}", "")))
    assert v.decision == "accept" and v.cells[1].pairs == 2, (v.reason, [c.pairs for c in v.cells])


def test_max_pairs_below_pairs_is_refused_with_the_fix():
    errors = _errors("concurrency = [1, 4]\npairs = 4\nmax_pairs = 2")
    assert any("max_pairs: 2 is below pairs = 4" in e and "max_pairs >= 4" in e for e in errors), errors
    assert _config("concurrency = [1, 4]\npairs = 2").benchmark().matrix.cap() == 6
    assert _config("concurrency = [1, 4]\npairs = 12").benchmark().matrix.cap() == 30
    assert _config("concurrency = [1, 4]\npairs = 2\nmax_pairs = 2").benchmark().matrix.cap() == 2
