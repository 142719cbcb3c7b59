"""`rsi config check` on a working tree: file:line errors, doc links, blame,
and the checked-in JSON Schema."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import jsonschema
import pytest

from harness.configcheck import (
    DOCS_URL,
    blame,
    check_config,
    error_path,
    key_lines,
    locate,
)
from harness.schema import SCHEMA_PATH, config_schema, schema_text
from harness.spec import CONFIG_PATH

ROOT = Path(__file__).resolve().parents[2]

GOOD = """\
[benchmarks.main]
command = "python bench/run.py"
timeout_s = 60

[benchmarks.main.metrics]
throughput = "higher"
latency_s = "lower"

[objective]
benchmark = "main"
metric = "throughput"
min_gain = 0.05

[[guards]]
metric = "latency_s"
max_ratio = 1.05
"""


def _repo(tmp_path: Path, config: str, *, commit: bool = True, bench: bool = True) -> Path:
    repo = tmp_path / "repo"
    (repo / ".rsi").mkdir(parents=True)
    (repo / ".rsi" / "config.toml").write_text(config)
    if bench:
        (repo / "bench").mkdir()
        (repo / "bench" / "run.py").write_text("")
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    if commit:
        subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                        "commit", "-qm", "init"], check=True)
    return repo


def test_key_lines_maps_tables_arrays_of_tables_and_dotted_keys():
    text = GOOD + '\n[[guards]]\nmetric = "x"\n"max_ratio" = 2\n[runner.profiles.gpu]\ndevice = "cuda"\n'
    lines = key_lines(text)
    assert lines["benchmarks.main.command"] == 2
    assert lines["benchmarks.main.metrics.latency_s"] == 7
    assert lines["guards[0].max_ratio"] == 16
    assert lines["guards[1].max_ratio"] == 20
    assert lines["runner.profiles.gpu.device"] == 22
    assert lines["objective"] == 9


def test_multiline_strings_do_not_fake_keys():
    text = 'a = """\nb = 1\n"""\nc = 2\n'
    assert key_lines(text) == {"a": 1, "c": 4}


@pytest.mark.parametrize("msg,path", [
    ("[agent] kind: unknown agent kind 'x'", "agent.kind"),
    ("[runner] profiles.gpu: device = 'cuda' needs devices", "runner.profiles.gpu"),
    ("knob 2 (threads) values: List should have at least 1 item", "knobs[1].values"),
    ("guards[0] (lat): give exactly one bound", "guards[0]"),
    ("benchmarks.main.metrics.lat: direction must be", "benchmarks.main.metrics.lat"),
    ("missing [objective] section: set benchmark", "objective"),
    ("objective: unknown metric 'thruput'; benchmark 'main' declares: x", "objective.metric"),
    ("guards[1]: unknown benchmark 'b'; declared benchmarks: main", "guards[1].benchmark"),
])
def test_error_paths(msg, path):
    assert error_path(msg) == path


def test_locate_falls_back_to_the_nearest_parent():
    lines = key_lines(GOOD)
    assert locate("guards[0].min_ratio", lines) == 14
    assert locate("agent.kind", lines) is None


def test_uncommitted_typo_is_found_in_the_working_tree(tmp_path):
    repo = _repo(tmp_path, GOOD)
    assert check_config(repo) == []
    typo = GOOD.replace('latency_s = "lower"', 'latency_s = "lowr"') + '\n[agent]\nroundz = 3\n'
    (repo / CONFIG_PATH).write_text(typo)  # not committed
    problems = check_config(repo)
    by_line = {p.line: p for p in problems}
    assert set(by_line) == {7, 19}, [str(p) for p in problems]
    assert all(p.file == CONFIG_PATH for p in problems)
    assert "direction" in by_line[7].message and by_line[7].doc == f"{DOCS_URL}#benchmarks"
    assert "roundz" in by_line[19].message and by_line[19].doc == f"{DOCS_URL}#agent"
    assert str(by_line[19]).startswith(".rsi/config.toml:19: ")


def test_invalid_toml_reports_its_line(tmp_path):
    repo = _repo(tmp_path, GOOD.replace("min_gain = 0.05", "min_gain 0.05"), commit=False)
    [p] = check_config(repo)
    assert p.line == 12 and "not valid TOML" in p.message


def test_knob_files_are_looked_up_in_the_working_tree(tmp_path):
    knob = '\n[[knobs]]\nname = "t"\nfile = "app/settings.toml"\nkey = "threads"\nvalues = [1, 2]\n'
    repo = _repo(tmp_path, GOOD + knob, commit=False)
    [p] = check_config(repo)
    assert "app/settings.toml" in p.message and "working tree" in p.message and p.line == 18  # its [[knobs]] header
    (repo / "app").mkdir()
    (repo / "app" / "settings.toml").write_text("threads = 1\n")
    assert check_config(repo) == []


def test_missing_config_says_how_to_make_one(tmp_path):
    [p] = check_config(tmp_path)
    assert "rsi init" in p.message


def test_blame_splits_proposal_and_config_errors():
    config = GOOD + "\n[agent]\nroundz = 3\n"
    proposal = "```toml\n[objective]\nmin_gain = 0.01\n```\n"
    problems = blame(config, proposal, "issue.md")
    files = sorted(p.file for p in problems)
    assert files == [CONFIG_PATH, "issue.md"], [str(p) for p in problems]
    conf = next(p for p in problems if p.file == CONFIG_PATH)
    prop = next(p for p in problems if p.file == "issue.md")
    assert conf.line == 19 and "roundz" in conf.message
    assert "min_gain" in prop.message and prop.line is None


def test_checked_in_schema_is_current():
    checked_in = (ROOT / SCHEMA_PATH).read_text()
    assert checked_in == schema_text(), (
        f"{SCHEMA_PATH} is stale: run `rsi config schema --out {SCHEMA_PATH}`")


def test_schema_accepts_the_example_and_rejects_typos():
    schema = config_schema()
    example = tomllib.loads((ROOT / "examples/tiny-tts/.rsi/config.toml").read_text())
    jsonschema.validate(example, schema)
    bad = tomllib.loads(GOOD + "\n[agent]\nroundz = 3\n")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    props = schema["$defs"]["AgentSettings"]["properties"]
    assert "rounds" in props and props["max_straight_rejections"]["description"]
    assert "name" not in schema["$defs"]["BenchmarkConfig"]["properties"]
    assert json.loads(json.dumps(schema)) == schema


def test_configuration_doc_tables_are_current_and_every_anchor_exists():
    import re

    from harness.configcheck import SECTIONS
    from harness.schema import DOC_TABLES, DOCS_PATH, render_doc_tables

    doc = (ROOT / DOCS_PATH).read_text()
    assert doc == render_doc_tables(doc), (
        f"{DOCS_PATH} is stale: run `rsi config schema --out {SCHEMA_PATH} --docs {DOCS_PATH}`")
    headings = set(re.findall(r"^#+ (\S+)$", doc, re.M))
    assert set(SECTIONS) <= headings
    assert set(re.findall(r"<!-- keys:([\w.]+) -->", doc)) == set(DOC_TABLES)
    schema = config_schema()
    for section, model in DOC_TABLES.items():  # every key has a row
        for key in schema["$defs"][model]["properties"]:
            assert f"| `{key}` |" in doc, (section, key)


def test_files_a_benchmark_names_must_exist_in_the_working_tree(tmp_path):
    repo = _repo(tmp_path, GOOD, commit=False, bench=False)
    [w] = check_config(repo)
    assert w.warning and w.line == 2 and "bench/run.py" in w.message
    assert str(w).startswith(".rsi/config.toml:2: warning: benchmarks.main.command")
    (repo / "bench").mkdir()
    (repo / "bench" / "run.py").write_text("")
    assert check_config(repo) == []


def test_unknown_tables_and_keys_are_caught_with_did_you_mean(tmp_path):
    """The JSON Schema forbids them; the check used to say ok to a misspelt table."""
    typo = GOOD + "\n[verifer]\nmax_pairs = 3\n\n[agent]\nknd = \"replay\"\n"
    typo = typo.replace("max_ratio = 1.05", "max_ratoi = 1.05")
    repo = _repo(tmp_path, typo)
    problems = check_config(repo)
    lines = typo.splitlines()
    by_key = {p.message.split(":")[0]: p for p in problems}
    assert "did you mean 'verifier'?" in by_key["verifer"].message
    assert lines[by_key["verifer"].line - 1] == "[verifer]"
    assert "did you mean 'kind'?" in by_key["agent.knd"].message
    assert lines[by_key["agent.knd"].line - 1].startswith("knd =")
    assert "did you mean 'max_ratio'?" in by_key["guards[0].max_ratoi"].message
    assert len(problems) == 3, [str(p) for p in problems]  # one message per key
    # jsonschema agrees with each of them
    errors = list(jsonschema.Draft202012Validator(config_schema()).iter_errors(tomllib.loads(typo)))
    assert len(errors) == 3


def test_objective_errors_come_in_one_pass():
    from harness.spec import SpecError, build_task

    bad = GOOD.replace('benchmark = "main"', 'benchmark = "mian"').replace(
        'metric = "throughput"\nmin', 'metric = "throughput_"\nmin')
    with pytest.raises(SpecError) as exc:
        build_task(bad, None, "t")
    text = "\n".join(exc.value.errors)
    assert "unknown benchmark 'mian'" in text and "did you mean 'main'?" in text
    assert "unknown metric 'throughput_'" in text and "did you mean 'throughput'?" in text
