"""The `rsi` command line for adopters: --version, the hidden internal
commands, `rsi init`, `rsi config check|schema`, `rsi spec check`'s blame,
`rsi worker --job`'s exit status."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml
from typer.testing import CliRunner

from bot.cli import INTERNAL, build_app, version
from harness.onboard import (
    CALLER_PATH,
    CHECK_PATH,
    FILES,
    FORM_PATH,
    InitAnswers,
    detect,
    release_ref,
    render_files,
)
from harness.spec import CONFIG_PATH, build_task
from tests.harness import target

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def rsi(*args: str):
    return runner.invoke(build_app(), list(args), catch_exceptions=False)


def _target(tmp_path: Path) -> Path:
    repo = tmp_path / "target"
    (repo / "bench").mkdir(parents=True)
    (repo / "bench" / "run.py").write_text(target.BENCH)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    return repo


def test_version():
    r = rsi("--version")
    assert r.exit_code == 0 and r.output.strip() == f"rsi-bot {version()}"
    assert version() != "unknown"


def test_internal_commands_are_hidden_but_work():
    top = rsi("--help").output
    for name in INTERNAL:
        assert f" {name} " not in top
        assert rsi(name, "--help").exit_code == 0
    for name in ("init", "config", "verify", "serve", "setup"):
        assert f" {name} " in top


def test_init_detects_writes_and_refuses_to_overwrite(tmp_path):
    repo = _target(tmp_path)
    r = rsi("init", "--repo", str(repo), "--yes")
    assert r.exit_code == 0, r.output
    assert "detected: python bench/run.py" in r.output and "Next steps" in r.output
    for f in FILES:
        assert (repo / f).is_file(), f
    cfg = tomllib.loads((repo / CONFIG_PATH).read_text())
    assert cfg["benchmarks"]["main"]["metrics"] == {"throughput": "higher"}
    assert cfg["benchmarks"]["main"]["samples"] == {"latency_s": "lower"}
    # the objective is the run's time on the verifier's clock, not the number the
    # benchmark (the candidate's process) reports, and the config says it must stay so
    assert cfg["objective"]["metric"] == "wall_s" and "self_reported" not in cfg["objective"]
    assert cfg["verifier"]["require_external"] is True
    spec = build_task((repo / CONFIG_PATH).read_text(), None, "t")
    assert spec.verify.benchmark().metric_source("wall_s") == "verifier"
    assert spec.verify.self_report_note() is None
    assert rsi("config", "check", "--repo", str(repo)).exit_code == 0

    before = (repo / CONFIG_PATH).read_text()
    r = rsi("init", "--repo", str(repo), "--yes", "--min-gain", "0.2")
    assert r.exit_code == 1 and "--force" in r.output
    assert (repo / CONFIG_PATH).read_text() == before
    r = rsi("init", "--repo", str(repo), "--yes", "--min-gain", "0.2", "--force")
    assert r.exit_code == 0
    assert tomllib.loads((repo / CONFIG_PATH).read_text())["objective"]["min_gain"] == 0.2


def test_init_non_interactive_flags_and_bad_input(tmp_path):
    repo = tmp_path / "empty"
    repo.mkdir()
    r = rsi("init", "--repo", str(repo), "--yes")
    assert r.exit_code == 2 and "--command" in r.output
    r = rsi("init", "--repo", str(repo), "--yes", "--command", "make bench",
            "--metric", "tokens_per_s=higher", "--metric", "ttft_s", "--device", "cuda")
    assert r.exit_code == 0, r.output
    cfg = tomllib.loads((repo / CONFIG_PATH).read_text())
    assert cfg["benchmarks"]["main"]["metrics"] == {"tokens_per_s": "higher", "ttft_s": "lower"}
    assert cfg["runner"]["profiles"]["cuda"]["devices"] == ["0"]
    assert [g["metric"] for g in cfg["guards"]] == ["ttft_s"]
    r = rsi("init", "--repo", str(tmp_path / "x"), "--yes", "--command", "b",
            "--metric", "a=up")
    assert r.exit_code == 1 and "direction must be higher or lower" in r.output
    assert not (tmp_path / "x" / CONFIG_PATH).exists()


def test_every_device_renders_a_config_the_bot_accepts():
    for device in ("cpu", "cuda", "npu"):
        a = InitAnswers(command="python b.py", metrics={"qps": "higher", "p99_ms": "lower"},
                        objective="wall_s", device=device, samples={"lat_s": "lower"})
        files = render_files(a)
        spec = build_task(files[CONFIG_PATH], None, "t")
        assert spec.runner.active.device == device and spec.verify.guards[0].metric == "p99_ms"


def test_workflows_pin_the_release_tag_and_parse():
    files = render_files(InitAnswers(command="x", metrics={"a": "higher"}, objective="wall_s"))
    ref = release_ref()
    caller = yaml.safe_load(files[CALLER_PATH])
    job = caller["jobs"]["rsi"]
    assert job["uses"] == f"rsi-bot/rsi-bot/.github/workflows/rsi-job.yml@{ref}"
    # installed from a setting (the repository variable), never a URL that may not exist
    assert job["with"]["rsi_install"] == "${{ vars.RSI_INSTALL }}"
    assert "git+https" not in files[CALLER_PATH] + files[CHECK_PATH]
    pinned = render_files(InitAnswers(command="x", metrics={"a": "higher"}, objective="wall_s",
                                      install="rsi-bot @ https://example.com/rsi_bot-0.1.0-py3-none-any.whl"))
    assert yaml.safe_load(pinned[CALLER_PATH])["jobs"]["rsi"]["with"]["rsi_install"].endswith(".whl")
    assert set(caller[True]["workflow_dispatch"]["inputs"]) == {"job", "runner_labels"}
    check = yaml.safe_load(files[CHECK_PATH])
    assert check[True]["pull_request"]["paths"] == [CONFIG_PATH]
    steps = " ".join(s.get("run", "") for s in check["jobs"]["check"]["steps"])
    assert "config check" in steps and "venv" in steps and "--user" not in steps
    # the form has the root form's fields, its placeholders from this repo (not tiny-tts's)
    form, root = yaml.safe_load(files[FORM_PATH]), yaml.safe_load(
        (ROOT / ".github/ISSUE_TEMPLATE/rsi-proposal.yml").read_text())
    assert [b.get("id") for b in form["body"]] == [b.get("id") for b in root["body"]]
    assert "tts" not in files[FORM_PATH] and "vocoder" not in files[FORM_PATH]
    assert "@" not in files[CALLER_PATH].replace(f"@{ref}", "").replace("@ git", "")


def test_detect_prefers_scripts_that_write_the_result(tmp_path):
    (tmp_path / "Makefile").write_text("bench:\n\tpython x.py\n")
    assert detect(tmp_path).command == "make bench"
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "serve.py").write_text(
        'import os, json\njson.dump({"metrics": {"req_per_s": 1, "p95_latency_ms": 2}}, '
        'open(os.environ["RSI_RESULT"], "w"))\n')
    d = detect(tmp_path)
    assert d.command == "python benchmarks/serve.py"
    assert d.metrics == {"req_per_s": "higher", "p95_latency_ms": "lower"}


def test_detect_never_reads_through_a_linked_directory(tmp_path):
    """Issue 18: in a checkout (rsi init) a path through a symlinked directory is
    not read; in a git tree (the bot) the link is a blob and its target unseen."""
    import os
    import subprocess

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "run.py").write_text('{"metrics": {"leaked": 1}}  # RSI_RESULT\n')
    repo = tmp_path / "repo"
    repo.mkdir()
    os.symlink(outside, repo / "bench")
    (repo / "benchmarks").mkdir()
    (repo / "benchmarks" / "own.py").write_text('{"metrics": {"qps": 1}}  # RSI_RESULT\n')
    assert detect(repo).command == "python benchmarks/own.py"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-qm", "x"], check=True)
    (repo / "benchmarks" / "own.py").write_text("# not committed: the tree is read\n")
    d = detect(repo, ref="HEAD")
    assert d.command == "python benchmarks/own.py" and d.metrics == {"qps": "higher"}


def test_config_check_exit_codes_and_file_line(tmp_path):
    repo = _target(tmp_path)
    assert rsi("init", "--repo", str(repo), "--yes").exit_code == 0
    path = repo / CONFIG_PATH
    path.write_text(path.read_text().replace("rounds = 6", "rounds = 0"))
    r = rsi("config", "check", "--repo", str(repo))
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if t == "rounds = 0")
    assert r.exit_code == 1
    assert f"{CONFIG_PATH}:{line}: [agent] rounds" in r.output
    assert "configuration.md#agent" in r.output


def test_spec_check_blames_each_file_and_notes_uncommitted_edits(tmp_path):
    repo = _target(tmp_path)
    assert rsi("init", "--repo", str(repo), "--yes").exit_code == 0
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-qm", "init"], check=True)
    issue = tmp_path / "issue.md"
    issue.write_text("### Minimum gain\n\n1%\n")
    r = rsi("spec", "check", str(issue), "--repo", str(repo))
    assert r.exit_code == 1 and f"{issue}: proposal [objective] min_gain" in r.output
    text = (repo / CONFIG_PATH).read_text()
    (repo / CONFIG_PATH).write_text(text.replace("require_external = true\n",
                                                 "require_external = true\nbogus = 1\n"))
    issue.write_text("### Minimum gain\n\n10%\n")
    r = rsi("spec", "check", str(issue), "--repo", str(repo))
    assert r.exit_code == 0 and "differs from the committed one" in r.output
    r = rsi("spec", "check", str(issue), "--repo", str(repo), "--working-tree")
    assert r.exit_code == 1 and f"{CONFIG_PATH}:" in r.output and "bogus" in r.output


def test_config_schema_command(tmp_path):
    out = tmp_path / "s.json"
    assert rsi("config", "schema", "--out", str(out)).exit_code == 0
    assert json.loads(out.read_text())["title"] == "rsi-bot repo config"


def test_worker_job_exits_non_zero_when_the_job_fails(tmp_path):
    bad = json.dumps({"schema": "nope", "repo": "a/b", "issue": 1})
    proc = subprocess.run([sys.executable, "-m", "bot.cli", "worker", "--job", bad,
                           "--repo", str(tmp_path), "--out", str(tmp_path / "out"),
                           "--state-dir", str(tmp_path / "state")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert "unknown job schema" in result["error"]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["error"] == result["error"]


def test_version_fast_path_exits_zero():
    proc = subprocess.run([sys.executable, "-m", "bot.cli", "--version"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == f"rsi-bot {version()}"


def test_docs_are_user_docs_with_working_links():
    import re

    docs = ROOT / "docs"
    assert not list(docs.glob("notes-*.md")) and (ROOT / "notes").is_dir()
    texts = {p: p.read_text() for p in [*docs.glob("*.md"), ROOT / "README.md",
                                        *ROOT.glob("*/README.md")]}
    for path, text in texts.items():
        assert not re.search(r"\b(DESIGN|STYLE)\.md\b", text), path
        for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
            assert (path.parent / link).exists(), (path, link)
    for src in [*ROOT.glob("bot/**/*.py"), *ROOT.glob("harness/**/*.py")]:
        assert not re.search(r"\b(DESIGN|STYLE)\.md\b|STYLE item", src.read_text()), src
    gs = texts[docs / "getting-started.md"]
    for topic in ("nvidia-container-toolkit", "CANN", "rsi init", "rsi setup", "docker compose"):
        assert topic in gs, topic


def test_init_asks_with_the_detected_values_as_defaults(tmp_path, monkeypatch):
    import harness.cli

    repo = _target(tmp_path)
    monkeypatch.setattr(harness.cli, "_interactive", lambda: True)
    # command: keep the detected one; metrics: replace; objective: pick the second, a
    # self-report, and accept it when asked
    answers = "\nthroughput=higher,p95_ms=lower\np95_ms\ny\n0.1\nnpu\n"
    r = runner.invoke(build_app(), ["init", "--repo", str(repo)], input=answers)
    assert r.exit_code == 0, r.output
    assert "Benchmark command [python bench/run.py]" in r.output
    assert "Metrics (NAME=higher|lower, comma-separated) [throughput=higher]" in r.output
    cfg = tomllib.loads((repo / CONFIG_PATH).read_text())
    assert cfg["benchmarks"]["main"]["command"] == "python bench/run.py"
    assert cfg["benchmarks"]["main"]["metrics"] == {"throughput": "higher", "p95_ms": "lower"}
    assert cfg["objective"]["metric"] == "p95_ms" and cfg["objective"]["min_gain"] == 0.1
    assert "reported by the benchmark's own process" in r.output
    assert cfg["objective"]["self_reported"] is True and "verifier" not in cfg
    assert cfg["runner"]["profile"] == "npu"
    note = build_task((repo / CONFIG_PATH).read_text(), None, "t").verify.self_report_note()
    assert note and "self-reported (declared self_reported = true)" in note
    # refusing it keeps the verifier's clock
    answers = "\nthroughput=higher,p95_ms=lower\np95_ms\nn\n0.1\nnpu\n"
    r = runner.invoke(build_app(), ["init", "--repo", str(repo), "--force"], input=answers)
    assert r.exit_code == 0, r.output
    cfg = tomllib.loads((repo / CONFIG_PATH).read_text())
    assert cfg["objective"]["metric"] == "wall_s" and cfg["verifier"]["require_external"] is True


def test_init_refuses_a_self_reported_objective_unless_told(tmp_path):
    """Issue 29: rsi init never makes the candidate's own report the objective by
    default; --objective naming one is refused without --self-reported."""
    repo = _target(tmp_path)
    r = rsi("init", "--repo", str(repo), "--yes", "--objective", "throughput")
    assert r.exit_code == 1 and "--self-reported" in r.output and "wall_s" in r.output
    assert not (repo / CONFIG_PATH).exists()
    r = rsi("init", "--repo", str(repo), "--yes", "--objective", "throughput", "--self-reported")
    assert r.exit_code == 0, r.output
    spec = build_task((repo / CONFIG_PATH).read_text(), None, "t")
    assert spec.verify.objective.self_reported is True
    assert not spec.verify.verifier.require_external
    r = rsi("init", "--repo", str(repo), "--yes", "--force", "--objective", "cpu_s",
            "--self-reported")
    assert r.exit_code == 1 and "leave the flag out" in r.output


def test_run_names_the_config_line_of_each_error(tmp_path):
    repo = _target(tmp_path)
    assert rsi("init", "--repo", str(repo), "--yes").exit_code == 0
    cfg = repo / CONFIG_PATH
    cfg.write_text(cfg.read_text().replace("rounds = 6", "rounds = 6\nroundz = 1"))
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-qm", "init"], check=True)
    line = cfg.read_text().splitlines().index("roundz = 1") + 1
    r = rsi("run", "--repo", str(repo), "--quiet")
    assert r.exit_code == 2 and f"{CONFIG_PATH}:{line}: [agent] roundz" in r.output


def test_init_asks_how_the_repo_runs_inference_when_it_has_no_benchmark(tmp_path, monkeypatch):
    """Interactive: no benchmark detected, so init asks serving or in-process and
    the questions of that kind, then scaffolds it."""
    import harness.cli

    repo = tmp_path / "gen"
    (repo / "gen").mkdir(parents=True)
    (repo / "gen" / "model.py").write_text("def generate(p):\n    return p\n")
    monkeypatch.setattr(harness.cli, "_interactive", lambda: True)
    answers = "inprocess\ngen.model:generate\nreplay\n"
    r = runner.invoke(build_app(), ["init", "--repo", str(repo)], input=answers,
                      catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "No benchmark found" in r.output and "serving (an HTTP server)" in r.output
    spec = build_task((repo / CONFIG_PATH).read_text(), None, "t")
    assert spec.benchmark.entry == "gen.model:generate" and spec.agent.kind == "replay"
    assert spec.verify.benchmark().metric_source("throughput") == "harness"
    assert spec.verify.verifier.require_external
    assert (repo / "bench/rsi/bench.py").is_file() and (repo / "bench/rsi/evaluate.py").is_file()
    form = yaml.safe_load((repo / FORM_PATH).read_text())
    editable = next(b for b in form["body"] if b.get("id") == "editable")
    assert editable["attributes"]["placeholder"] == "gen/model.py"


def test_a_result_with_outputs_gets_a_quality_guard_on_them(tmp_path):
    """The config init wrote had no quality guard although the result carried
    outputs: a faster run that emits less would have passed."""
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "run.py").write_text(
        'import os, json\njson.dump({"metrics": {"tokens_per_s": 1}, "outputs": {"texts": ["a"]}},'
        ' open(os.environ["RSI_RESULT"], "w"))\n')
    r = rsi("init", "--repo", str(tmp_path), "--yes")
    assert r.exit_code == 0, r.output
    spec = build_task((tmp_path / CONFIG_PATH).read_text(), None, "t")
    assert [(q.kind, q.output) for q in spec.verify.quality] == [("output_length", "texts")]
    assert spec.agent.kind == "mini-swe-agent"  # an agent that runs without [[knobs]]
