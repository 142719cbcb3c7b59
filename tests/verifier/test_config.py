"""The verifier's part of .rsi/config.toml."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from verifier.config import ConfigError, VerifyConfig, percentile_name

MINIMAL = """
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


def _errors(text: str) -> list[str]:
    with pytest.raises(ConfigError) as e:
        VerifyConfig.from_toml(text)
    return e.value.errors


def test_minimal_config_from_design_keeps_working():
    cfg = VerifyConfig.from_toml(MINIMAL)
    b = cfg.benchmark()
    assert b.name == "tts" and b.timeout_s == 600 and b.ready_pattern == "READY"
    assert cfg.objective.min_gain == 0.02
    assert cfg.guards[0].max_ratio == 1.05 and cfg.guards[0].kind == "ratio"
    assert cfg.verifier.initial_pairs >= 2 and cfg.verifier.bootstrap >= 10_000


def test_other_sections_are_ignored():
    text = (
        MINIMAL
        + '\n[policy]\neditable = ["x/**"]\n[agent]\nkind = "tuner"\n[[knobs]]\nname = "t"\n'
    )
    assert VerifyConfig.from_toml(text).objective.metric == "throughput"


def test_full_contract_example_parses():
    text = (
        MINIMAL.replace(
            'ready_pattern = "READY"',
            """ready_pattern = "READY"
setup = "true"
env = { OMP_NUM_THREADS = "2" }
settings = { device = "cpu", dtype = "fp32", concurrency = 4, seed = 0, fast = true }""",
        )
        + """
[[quality]]
kind = "wer"
output = "transcripts"
max = 0.05
max_delta = 0.01

[verifier]
warmup = 1
initial_pairs = 10
step = 10
max_pairs = 30
seed = 0
calibration_pairs = 6

[hidden]
env = { TTS_EVAL_SET = "/srv/rsi/hidden/tts.txt" }
seed_env = "RSI_HIDDEN_SEED"
"""
    )
    cfg = VerifyConfig.from_toml(text)
    env = cfg.benchmark().setting_env()
    assert env["RSI_SETTING_DTYPE"] == "fp32" and env["RSI_SETTING_CONCURRENCY"] == "4"
    assert env["RSI_SETTING_FAST"] == "true"
    assert cfg.quality[0].kind == "wer" and cfg.hidden.seed_env == "RSI_HIDDEN_SEED"


def test_unknown_guard_metric_names_what_exists():
    errs = _errors(MINIMAL + '\n[[guards]]\nmetric = "p99"\nmax_ratio = 1.05\n')
    assert len(errs) == 1
    assert errs[0].startswith(
        "guards[1]: unknown metric 'p99'; benchmark 'tts' declares: throughput, latency_p95_s"
    )


def test_errors_are_collected_and_actionable():
    errs = _errors("""
[benchmarks.a]
commnd = "x"
[benchmarks.a.metrics]
speed = "up"
[objective]
benchmark = "a"
metric = "speed"
""")
    text = "\n".join(errs)
    assert 'direction must be "higher" or "lower"' in text
    assert "benchmarks.a.commnd: unknown key" in text


@pytest.mark.parametrize(
    "extra, needle",
    [
        ('[[guards]]\nmetric = "throughput"\nmax_ratio = 1.05\n', "min_ratio = 0.952"),
        (
            '[[guards]]\nmetric = "latency_p95_s"\nmax_ratio = 1.05\nmax_delta = 0.1\n',
            "exactly one bound",
        ),
        ('[[guards]]\nmetric = "latency_p95_s"\nmax_ratio = 0.9\n', "would demand an improvement"),
        (
            '[[guards]]\nmetric = "wall_s"\nbenchmark = "nope"\nmax_ratio = 1.1\n',
            "unknown benchmark 'nope'",
        ),
        ("[verifier]\ninitial_pairs = 20\nmax_pairs = 10\n", "raise max_pairs"),
        ("[verifier]\nbootstrap = 100\n", "verifier.bootstrap"),
        ("[verifier]\ninitial_pairs = 4\nmax_pairs = 6\n", "needs at least 7 pairs"),
        ('[[quality]]\nkind = "wer"\noutput = "t"\n', "give max"),
        ('[hidden]\nenv = { RSI_RESULT = "x" }\n', "reserved"),
    ],
)
def test_semantic_errors(extra, needle):
    errs = _errors(MINIMAL + "\n" + extra)
    assert any(needle in e for e in errs), errs


def test_missing_sections_and_bad_toml():
    assert any("missing [objective]" in e for e in _errors('[benchmarks.a]\ncommand = "x"\n'))
    assert any("not valid TOML" in e for e in _errors("[benchmarks\n"))
    assert any(
        "[[guards]]" in e
        for e in _errors(MINIMAL.split("[[guards]]")[0] + "[guards]\nmetric='x'\n")
    )
    errs = _errors(MINIMAL.replace('metric = "throughput"', 'metric = "speed"'))
    assert errs[0].startswith("objective: unknown metric 'speed'")


def test_default_guards_where_metrics_exist():
    cfg = VerifyConfig.from_toml(MINIMAL + '\n[benchmarks.tts.samples]\nlatency_s = "lower"\n')
    known = cfg.benchmark().known_metrics()
    assert "latency_p99_s" in known and "startup_s" in known and "peak_rss_mib" in known
    guards = {g.metric: g for g in cfg.guards_for("tts", known)}
    assert "latency_p99_s" not in guards  # p99 of few requests per run: no default guard
    assert guards["peak_rss_mib"].max_ratio == 1.02
    assert guards["device_peak_memory_mib"].max_ratio == 1.02
    assert guards["startup_s"].max_ratio == 1.10
    assert not guards["latency_p95_s"].default  # the user's own guard stays
    plain = VerifyConfig.from_toml(
        MINIMAL.split("[[guards]]")[0] + '\n[benchmarks.tts.samples]\nlatency_s = "lower"\n'
    )
    tail = {g.metric: g for g in plain.guards_for("tts", plain.benchmark().known_metrics())}
    assert tail["latency_p95_s"].max_ratio == 1.10 and tail["latency_p95_s"].default
    # only where the metric exists
    assert "startup_s" not in {g.metric for g in cfg.guards_for("tts", {"peak_rss_mib": "lower"})}
    off = VerifyConfig.from_toml(MINIMAL + "\n[verifier]\ndefault_guards = false\n")
    assert [g.metric for g in off.guards_for("tts", known)] == ["latency_p95_s"]


def test_user_guard_replaces_default():
    cfg = VerifyConfig.from_toml(
        MINIMAL + '\n[[guards]]\nmetric = "peak_rss_mib"\nmax_ratio = 1.5\n'
    )
    rss = [
        g for g in cfg.guards_for("tts", {"peak_rss_mib": "lower"}) if g.metric == "peak_rss_mib"
    ]
    assert len(rss) == 1 and rss[0].max_ratio == 1.5


def test_percentile_names():
    assert percentile_name("latency_s", 95) == "latency_p95_s"
    assert percentile_name("ttft_ms", 99) == "ttft_p99_ms"
    assert percentile_name("tokens", 50) == "tokens_p50"


def test_from_dict_and_embeddable_in_other_models():
    cfg = VerifyConfig.from_toml(MINIMAL)

    class TaskSpec(BaseModel):
        verify: VerifyConfig
        task_id: str

    spec = TaskSpec(verify=cfg, task_id="t1")
    again = TaskSpec.model_validate_json(spec.model_dump_json())
    assert again.verify == cfg
    assert VerifyConfig.from_dict(cfg.model_dump()) == cfg
    with pytest.raises(ConfigError):
        VerifyConfig.from_dict([])  # type: ignore[arg-type]


UNITS = """
[benchmarks.gen]
command = "python bench.py"
[benchmarks.gen.metrics]
tokens_per_s = "higher"
[benchmarks.gen.samples]
latency_s = "lower"
[benchmarks.gen.units]
%s
[objective]
benchmark = "gen"
metric = "tokens_per_s"
"""


def test_units_are_declared_parsed_and_inherited_by_percentiles():
    bench = VerifyConfig.from_toml(UNITS % 'tokens_per_s = "tokens / second"\nlatency_s = "s"').benchmark()
    assert bench.unit_of("tokens_per_s") == "token/s"
    assert bench.unit_of("latency_p95_s") == "s" and bench.unit_of("wall_s") == "s"
    assert VerifyConfig.from_toml(UNITS % "").benchmark().unit_of("tokens_per_s") == ""


def test_every_unit_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as exc:
        VerifyConfig.from_toml(UNITS % 'tokens_per_s = "sekonds"\nlatency_s = "bogons"\nttfa = "s"')
    errors = exc.value.errors
    assert any("units.tokens_per_s: unit 'sekonds' is not a unit" in e for e in errors)
    assert any("units.latency_s: unit 'bogons'" in e for e in errors)
    assert any("'ttfa' is not a declared metric or sample series" in e for e in errors)
