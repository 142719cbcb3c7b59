"""The verifier's timing harness (``entry`` benchmarks; issue 29, item 3): the
entry point runs in a worker process, the verifier's own program times it, and
nothing the candidate's code does in its process can change the measurement
or the result: a slowed clock of its own, a forged answer frame, a read of the
timer's key, a rewritten result or output file. Every run here is real
(``run_once`` with process isolation; one case in containers); no assertion
rests on how fast the machine is (only lower bounds of sleeps, and reasons)."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from verifier.config import ConfigError, VerifyConfig
from verifier.harness import MAC_FILE, check
from verifier.runner import run_once

INPUTS = "alpha beta\ngamma\ndelta epsilon zeta\n"


def _config(entry: str = "app.gen:generate", requests: int = 4, extra: str = "") -> VerifyConfig:
    return VerifyConfig.from_toml(textwrap.dedent(f"""
        [benchmarks.m]
        entry = "{entry}"
        inputs = "bench/inputs.txt"
        requests = {requests}
        timeout_s = 60
        {extra}
        [benchmarks.m.metrics]
        throughput = "higher"
        [benchmarks.m.samples]
        latency_s = "lower"
        ttfa_s = "lower"
        [objective]
        benchmark = "m"
        metric = "throughput"
    """))


def _repo(root: Path, gen: str) -> Path:
    (root / "app").mkdir(parents=True)
    (root / "bench").mkdir()
    (root / "app" / "__init__.py").write_text("")
    (root / "app" / "gen.py").write_text(textwrap.dedent(gen))
    (root / "bench" / "inputs.txt").write_text(INPUTS)
    return root


def _run(tmp_path: Path, gen: str, cfg: VerifyConfig | None = None, **kw):
    repo = _repo(tmp_path / "repo", gen)
    cfg = cfg or _config()
    return run_once(cfg.benchmark(), repo, workdir=tmp_path, base_checkout=repo, **kw)


def _outputs(rec) -> list[str]:
    return [p.read_text() for p in sorted(Path(rec.output_dir).glob("req-*.out"))]


def test_an_entry_point_is_timed_by_the_harness_and_its_outputs_saved(tmp_path):
    rec = _run(tmp_path, """
        import time
        def generate(prompt):
            time.sleep(0.02)
            yield "  "          # blank: not the first real output
            time.sleep(0.01)
            yield prompt.upper()
    """)
    assert rec.ok, (rec.error, rec.stderr_tail)
    assert rec.sources == {"throughput": "harness", "outputs.prompts": "harness"} | {
        k: "harness" for k in ("output_bytes_per_s",)}
    res = rec.result
    assert res is not None and res.counts == {"requests": 4, "failed": 0}
    assert all(t >= 0.03 for t in res.samples["ttfa_s"])  # the blank chunk did not stop the clock
    assert all(lat >= t for lat, t in zip(res.samples["latency_s"], res.samples["ttfa_s"], strict=True))
    assert res.metrics["throughput"] <= 4 / (4 * 0.03)
    assert [o.strip() for o in _outputs(rec)] == [p.upper() for p in res.outputs["prompts"]]
    assert rec.startup_s is not None and 0 < rec.startup_s < rec.wall_s
    assert (Path(rec.work_dir) / "run" / MAC_FILE).is_file()


def test_a_slowed_clock_in_the_candidates_process_changes_nothing(tmp_path):
    """The round-2 timer cheat: perf_counter (and monotonic) at 10% in the
    entry point's process. The harness's clock is in another process."""
    rec = _run(tmp_path, """
        import time
        _real = time.perf_counter
        _t0 = _real()
        time.perf_counter = lambda: _t0 + (_real() - _t0) * 0.1
        time.monotonic = time.perf_counter
        def generate(prompt):
            time.sleep(0.05)
            return prompt
    """)
    assert rec.ok, (rec.error, rec.stderr_tail)
    assert min(rec.result.samples["latency_s"]) >= 0.05
    assert rec.result.metrics["throughput"] <= 1 / 0.05


PROBE = """
        import os
        def generate(prompt):
            seen = sorted(k for k in os.environ if k.startswith("RSI_") or k == "SECRET_X")
            try:
                leak = open(f"/proc/{os.getppid()}/environ", "rb").read()
                at = leak.find(b"RSI_HARNESS_KEY=") + 16
                value = leak[at:at + 64].strip(bytes(1))
                secret = value or b"s3cret" in leak or b"RSI_SEED=7" in leak
                environ = "leaked" if secret else "read"
            except OSError as e:
                environ = type(e).__name__
            try:
                open(f"/proc/{os.getppid()}/mem", "rb").read(1)
                mem = "read"
            except OSError as e:
                mem = type(e).__name__
            return f"{seen} {environ} {mem}"
    """


def test_the_candidate_sees_neither_the_key_nor_the_hidden_inputs(tmp_path):
    """The worker's environment has no key, seed or hidden value, and the
    timer's /proc environ and memory are closed to it (not dumpable)."""
    rec = _run(tmp_path, PROBE, extra_env={"RSI_SEED": "7", "SECRET_X": "s3cret"})
    assert rec.ok, (rec.error, rec.stderr_tail)
    seen, environ, mem = _outputs(rec)[0].rsplit(" ", 2)
    assert seen == "[]" and environ != "leaked"
    if os.geteuid() != 0:  # root (CAP_SYS_PTRACE) may read any process: only a trusted run
        assert (environ, mem) == ("PermissionError", "PermissionError")
    # the seed did reach the timer: the inputs it drew are the ones seed 7 draws
    import random

    pool = [x for x in INPUTS.splitlines() if x.strip()]
    rng = random.Random(7)
    assert list(rec.result.outputs["prompts"]) == [rng.choice(pool) for _ in range(4)]


@pytest.mark.parametrize("when", ["at import", "in a call"])
def test_an_answer_not_to_the_request_sent_is_refused(tmp_path, when):
    """A forged end-of-answer frame (the worker's answer pipe found among its
    fds) cannot carry the request's random nonce: the run fails, whether it
    is written before the entry point is loaded or during a call."""
    forge = textwrap.indent(textwrap.dedent("""
        for fd in range(3, 64):
            try:
                os.write(fd, b"E" + (16).to_bytes(4, "big") + bytes(16))
            except OSError:
                pass
    """), "    " if when == "in a call" else "")
    gen = ("import os\n" + (forge if when == "at import" else "")
           + "def generate(prompt):\n" + (forge if when == "in a call" else "") + "    return prompt\n")
    rec = _run(tmp_path, gen)
    assert not rec.ok and "not to the request sent" in rec.stderr_tail, (rec.error, rec.stderr_tail)
    assert "timing harness" in rec.error and rec.wall_s < 30


def test_a_failing_call_is_counted_and_an_unloadable_entry_is_an_error(tmp_path):
    rec = _run(tmp_path, """
        def generate(prompt):
            if prompt == "gamma":
                raise RuntimeError("no")
            return prompt
    """, cfg=_config(requests=12))
    assert rec.ok, (rec.error, rec.stderr_tail)
    failed = sum(p == "gamma" for p in rec.result.outputs["prompts"])
    assert failed and rec.result.counts == {"requests": 12, "failed": failed}
    assert "RuntimeError: no" in rec.stderr_tail
    rec = _run(tmp_path / "b", "raise SystemExit('broken at import')\n")
    assert not rec.ok and "could not be loaded" in rec.stderr_tail and "timing harness" in rec.error


@pytest.mark.parametrize("tamper", ["result", "output", "extra-output", "mac"])
def test_a_result_or_output_rewritten_after_the_harness_is_an_error(tmp_path, tamper):
    """What a process left behind by the candidate could do after the timer
    wrote its files: every such change fails the MAC or a digest."""
    rec = _run(tmp_path, "def generate(p):\n    return p\n")
    assert rec.ok
    run = Path(rec.work_dir) / "run"
    key_check = check  # the key is the run's own: re-check with a forged one and the real files
    assert key_check(run, "0" * 64).startswith("the result is not the one")
    res = run / "result.json"
    if tamper == "result":
        data = json.loads(res.read_text())
        data["metrics"]["throughput"] *= 1.6
        res.write_text(json.dumps(data))
    elif tamper == "output":
        (run / "outputs" / "req-000.out").write_text("a better answer")
    elif tamper == "extra-output":
        (run / "outputs" / "req-999.out").write_text("x")
    else:
        (run / MAC_FILE).write_text("0" * 64)
    # any key: the MAC or a digest fails before the key could matter
    for key in ("0" * 64, "1" * 64):
        assert check(run, key)


def test_entry_benchmarks_are_checked_when_the_config_is_read():
    with pytest.raises(ConfigError) as e:
        VerifyConfig.from_toml(textwrap.dedent("""
            [benchmarks.m]
            entry = "not a function"
            inputs = "../outside.txt"
            ready_pattern = "READY"
            serve = "python s.py"
            [benchmarks.m.metrics]
            throughput = "lower"
            tokens = "higher"
            [objective]
            benchmark = "m"
            metric = "throughput"
        """))
    text = "\n".join(e.value.errors)
    for needle in ("write it as package.module:function", "not both", "a path inside the repository",
                   "ready_pattern is the harness's own", "the harness reports only",
                   "throughput: higher is better"):
        assert needle in text, (needle, text)


def test_self_reported_is_an_explicit_key_and_the_minimal_form_means_it():
    base = textwrap.dedent("""
        [benchmarks.tts]
        command = "python bench/tts.py"
        [benchmarks.tts.metrics]
        throughput = "higher"
        [objective]
        benchmark = "tts"
        metric = "{metric}"
        {key}
    """)
    minimal = VerifyConfig.from_toml(base.format(metric="throughput", key=""))
    note = minimal.self_report_note()
    assert note and "self-reported (the config names a metric the benchmark reports)" in note
    declared = VerifyConfig.from_toml(base.format(metric="throughput", key="self_reported = true"))
    assert "declared self_reported = true" in (declared.self_report_note() or "")
    assert VerifyConfig.from_toml(base.format(metric="wall_s", key="")).self_report_note() is None
    with pytest.raises(ConfigError, match="self_reported = true, but 'wall_s' is measured by the verifier"):
        VerifyConfig.from_toml(base.format(metric="wall_s", key="self_reported = true"))
    with pytest.raises(ConfigError, match="self_reported = false"):
        VerifyConfig.from_toml(base.format(metric="throughput", key="self_reported = false"))


@pytest.mark.docker
def test_in_a_container_a_rewrite_by_a_process_the_candidate_left_is_an_error(tmp_path):
    """In the run's container: the entry point works (the harness's text, not
    the checkout's), and a detached process the candidate started that rewrites
    /rsi/run/result.json after the timer wrote it makes the run an error."""
    from tests.conftest import docker_unavailable_reason
    from tests.images import runtime_image
    from verifier.isolation import ContainerIsolation, IsolationSpec

    why = docker_unavailable_reason()
    if why is not None:
        if os.environ.get("RSI_REQUIRE_DOCKER") == "1":
            pytest.fail(f"docker required but unavailable: {why}")
        pytest.skip(why)
    iso = ContainerIsolation(IsolationSpec.simple(runtime_image(), cpus=1, memory="1g"))
    try:
        rec = _run(tmp_path / "ok", "def generate(p):\n    return p[::-1]\n", isolation=iso)
        assert rec.ok, (rec.error, rec.stderr_tail)
        assert rec.result.counts["failed"] == 0 and rec.sources["throughput"] == "harness"
        # uid 1000 without capabilities: the timer's /proc is closed to the worker
        rec = _run(tmp_path / "probe", PROBE, isolation=iso, extra_env={"RSI_SEED": "7"})
        assert rec.ok, (rec.error, rec.stderr_tail)
        assert _outputs(rec)[0] == "[] PermissionError PermissionError", _outputs(rec)
        rec = _run(tmp_path / "cheat", """
            import json, os, subprocess, sys
            subprocess.Popen([sys.executable, "-c", '''
            import json, os, time
            p = "/rsi/run/result.json"
            for _ in range(400):
                if os.path.exists(p):
                    time.sleep(0.05)
                    d = json.load(open(p)); d["metrics"]["throughput"] *= 1.6
                    open(p, "w").write(json.dumps(d)); break
                time.sleep(0.01)
            '''.replace("\\n            ", "\\n")], start_new_session=True)
            def generate(p):
                return p
        """, isolation=iso)
        assert not rec.ok
        assert ("MAC does not match" in rec.error or "process(es) running" in rec.error), rec.error
    finally:
        iso.close()


# ---- whole verifications (serial: their decisions rest on measured time) ---------------------

GEN = """
import time
def generate(prompt):
    time.sleep({s})
    return prompt[::-1]
"""
HARNESS_TASK = _config(requests=6, extra='[[guards]]\nmetric = "startup_s"\nmax_ratio = 3.0\n')


@pytest.mark.serial
def test_an_honest_in_process_speedup_timed_by_the_harness_is_accepted(tmp_path):
    """1.5x less time per call (sleep-bound: the load of the machine barely
    moves it), identical outputs: accepted on the harness's measurement,
    and nothing in the verdict calls the objective self-reported."""
    from harness.report import render_markdown_report
    from verifier.judge import verify

    cfg = VerifyConfig.from_dict({**HARNESS_TASK.model_dump(exclude_defaults=True),
                                  "objective": {"benchmark": "m", "metric": "throughput",
                                                "min_gain": 0.2}})
    base = _repo(tmp_path / "bk", GEN.format(s=0.045))
    cand = _repo(tmp_path / "cand", GEN.format(s=0.03))
    v = verify(base, cand, cfg)
    assert v.decision == "accept", (v.decision, v.reason, v.warnings)
    src = {m.name: m.source for m in v.metrics}
    assert src["throughput"] == "harness" and src["startup_s"] == "verifier"
    assert not any("self-reported" in w for w in v.warnings)
    text = render_markdown_report(v)
    assert "Self-reported objective" not in text and "timing harness" in text


@pytest.mark.serial
def test_a_self_reported_objective_is_said_so_in_the_verdict_and_the_report(tmp_path):
    """The minimal form: the objective names what the benchmark process reports.
    Allowed (a maintainer wrote it), and every verdict and report say so."""
    from harness.report import render_markdown_report
    from verifier.judge import verify

    bench = ("import json, os, time\nt = time.perf_counter()\ntime.sleep({s})\n"
             "json.dump({{'metrics': {{'speed': 1 / (time.perf_counter() - t)}}}}, "
             "open(os.environ['RSI_RESULT'], 'w'))\n")
    repos = []
    for name, s in (("bk", 0.03), ("cand", 0.06)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "bench.py").write_text(bench.format(s=s))
        repos.append(tmp_path / name)
    import sys

    cfg = VerifyConfig.from_toml(textwrap.dedent(f"""
        [benchmarks.loop]
        command = "{sys.executable} bench.py"
        [benchmarks.loop.metrics]
        speed = "higher"
        [objective]
        benchmark = "loop"
        metric = "speed"
        min_gain = 0.05
    """))
    v = verify(repos[0], repos[1], cfg)
    assert v.decision == "reject", (v.decision, v.reason)
    assert v.warnings[0].startswith("the objective speed is self-reported (the config names"), v.warnings
    text = render_markdown_report(v)
    assert "**Self-reported objective**: speed is reported by the candidate's own process" in text
