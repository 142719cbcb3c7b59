"""``rsi init`` for a repository with no benchmark: scaffold one.

Pure functions of data (like :mod:`harness.onboard`, whose files it adds to):
:func:`scaffold_files` returns ``{path: text}`` for

* a **serving** benchmark (``kind="serving"``): the repository's own server
  command (``serve``, on ``$RSI_PORT``), a protected load client
  ``bench/rsi/client.py`` that measures time to first real output (TTFA, not
  first byte), latencies and throughput and saves every output, and a
  protected evaluator ``bench/rsi/evaluate.py`` whose outputs the config's
  quality guards compare with the baseline's; ``require_external = true``
  because a protected client exists;
* or an **in-process** benchmark (``kind="inprocess"``): the repository's
  inference function (``entry = "pkg.mod:fn"``) called and timed by the
  verifier's own harness (``verifier/harness.py``: the candidate cannot change
  the code that measures it), the same evaluator judging its outputs, and
  ``bench/rsi/bench.py``, the same calls for people and agents to run by hand;

plus ``bench/rsi/prompts.txt`` (the inputs, one per line: edit them) and a
``.rsi/config.toml`` that is valid as written, with units, guards, quality
guards on the outputs and an agent kind that runs. Both write
``require_external = true``: the objective is never the candidate's own
report (issue 29). How to define metrics that resist gaming:
docs/writing-a-benchmark.md.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Literal

from harness.onboard import _AGENT_ENV as AGENT_ENV
from harness.spec import CONFIG_PATH

BENCH_DIR = "bench/rsi"
GUIDE = "https://github.com/rsi-bot/rsi-bot/blob/main/docs/writing-a-benchmark.md"
AGENTS_WITHOUT_KNOBS = ("mini-swe-agent", "claude-code", "codex", "aider", "command", "replay")
"""Agent kinds a scaffold may name: ``tuner`` needs ``[[knobs]]``, which a
scaffold cannot know."""
PROMPTS = ("Write one sentence about the sea.", "Count from one to ten in words.",
           "Name three colours of the rainbow.", "Describe a cat in five words.",
           "What is two plus two?", "Say hello in French.", "List four kinds of fruit.",
           "Give a short greeting to a new user.")
"""Default inputs: plain, short, and edited by the maintainer to match the repo."""


class ScaffoldError(ValueError):
    """The answers cannot make a benchmark; the message says what to pass."""


@dataclass
class Scaffold:
    kind: Literal["serving", "inprocess"]
    serve: str = ""
    """serving: the repo's server command; it must listen on ``$RSI_PORT``."""
    entry: str = ""
    """inprocess: ``package.module:function`` taking a prompt, returning or yielding output."""
    endpoint: str = "/generate"
    input_field: str = "prompt"
    ready_path: str | None = "/health"
    ready_pattern: str | None = None
    benchmark: str = "main"
    objective: str = "throughput"
    min_gain: float = 0.05
    agent: str = "mini-swe-agent"
    requests: int = 16
    concurrency: int = 2
    editable: list[str] = field(default_factory=lambda: ["**"])
    prompts: tuple[str, ...] = PROMPTS

    def problems(self) -> list[str]:
        out = []
        if self.kind == "serving":
            if not self.serve.strip():
                out.append("a serving benchmark needs the server command (--serve "
                           "'python -m app.server --port $RSI_PORT')")
            if not (self.ready_path or self.ready_pattern):
                out.append("give --ready-path (e.g. /health) or --ready-pattern (a line the "
                           "server prints when ready)")
            if self.ready_path is not None and not re.fullmatch(r"/[\w./-]{0,200}", self.ready_path):
                out.append(f"--ready-path {self.ready_path!r}: a path such as /health")
            if not re.fullmatch(r"/[\w./-]{0,200}", self.endpoint):
                out.append(f"--endpoint {self.endpoint!r}: a path such as /generate")
            if not re.fullmatch(r"[A-Za-z_][\w-]{0,63}", self.input_field):
                out.append(f"--input-field {self.input_field!r}: a JSON key such as prompt")
        elif self.kind == "inprocess":
            if not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", self.entry):
                out.append("an in-process benchmark needs the inference function (--entry "
                           "package.module:function; it takes a prompt and returns or yields output)")
        else:
            out.append(f"--scaffold {self.kind!r}: serving or inprocess")
        if self.agent not in AGENTS_WITHOUT_KNOBS:
            out.append(f"--agent {self.agent!r}: one of {', '.join(AGENTS_WITHOUT_KNOBS)} (the tuner "
                       "needs [[knobs]], which you add to the config once you know them)")
        if self.objective not in ("throughput", "output_bytes_per_s", "latency_p50_s",
                                  "latency_p95_s", "ttfa_p50_s"):
            out.append(f"--objective {self.objective!r}: throughput, output_bytes_per_s, "
                       "latency_p50_s, latency_p95_s or ttfa_p50_s")
        if not re.fullmatch(r"[A-Za-z_][\w-]{0,63}", self.benchmark):
            out.append(f"benchmark name {self.benchmark!r}: use letters, digits, '_' or '-'")
        if not 0 < self.min_gain <= 10:
            out.append(f"min_gain {self.min_gain} is outside (0, 10] (0.05 means 5% better)")
        if not 1 <= self.requests <= 10_000 or not 1 <= self.concurrency <= 256:
            out.append("requests must be 1..10000 and concurrency 1..256")
        return out


def _s(v: str) -> str:
    return json.dumps(v)  # a JSON string is a valid TOML basic string


def _template(name: str) -> str:
    return resources.files("harness").joinpath("templates", name).read_text(encoding="utf-8")


def render_config(a: Scaffold, runner_lines: list[str]) -> str:
    b = a.benchmark
    serving = a.kind == "serving"
    if serving:
        bench = [
            f"[benchmarks.{b}]",
            f"serve = {_s(a.serve)}   # this repo's server, run from the candidate's checkout; "
            "it listens on $RSI_PORT",
            f"ready_path = {_s(a.ready_path)}           # polled until it answers 200"
            if a.ready_path else f"ready_pattern = {_s(a.ready_pattern or '')}   # -> startup_s",
            f'client = "python {BENCH_DIR}/client.py"        # protected: from the baseline, in its own container',
            f'evaluator = "python {BENCH_DIR}/evaluate.py"   # protected: reads each run\'s saved outputs',
            "timeout_s = 600",
            f"settings = {{ endpoint = {_s(a.endpoint)}, input_field = {_s(a.input_field)}, "
            f"requests = {a.requests}, concurrency = {a.concurrency} }}",
        ]
        if a.ready_path and a.ready_pattern:
            bench.insert(3, f"ready_pattern = {_s(a.ready_pattern)}")
    else:
        bench = [
            f"[benchmarks.{b}]",
            f"entry = {_s(a.entry)}   # the verifier's own harness calls it and times every call",
            f'inputs = "{BENCH_DIR}/prompts.txt"        # read from the baseline, one input per line',
            f"requests = {a.requests}                       # calls per run",
            f'command = "python {BENCH_DIR}/bench.py {a.entry}"   # the same calls, by hand (you, '
            "agents); the verifier never runs it",
            f'evaluator = "python {BENCH_DIR}/evaluate.py"   # protected: reads each run\'s saved outputs',
            "timeout_s = 600",
        ]
    lines = [
        "#:schema https://raw.githubusercontent.com/rsi-bot/rsi-bot/main/docs/schema/rsi-config.schema.json",
        "# rsi-bot's repo config, written by `rsi init` with a scaffolded benchmark",
        f"# ({BENCH_DIR}/). The bot reads it from the default branch only. Every key:",
        "# https://github.com/rsi-bot/rsi-bot/blob/main/docs/configuration.md",
        f"# Metric definitions that resist gaming: {GUIDE}",
        "# Check it before committing: rsi config check. Try the whole flow: rsi try",
        "",
        *bench,
        "",
        "# What the " + ("client" if serving else "harness") + " reports, and the better direction of each.",
        f"[benchmarks.{b}.metrics]",
        'throughput = "higher"              # completed requests per second over the timed window',
        'output_bytes_per_s = "higher"',
        "",
        "# Per-request series; the verifier derives ttfa_p50_s ... latency_p99_s.",
        f"[benchmarks.{b}.samples]",
        'latency_s = "lower"                # send -> last byte',
        'ttfa_s = "lower"                   # send -> first real output (not first byte)',
        "",
        f"[benchmarks.{b}.units]",
        'throughput = "request/s"',
        'output_bytes_per_s = "B/s"',
        'latency_s = "s"',
        'ttfa_s = "s"',
        "",
        "[objective]",
        f"benchmark = {_s(b)}",
        f"metric = {_s(a.objective)}",
        f"min_gain = {a.min_gain!r}",
        "",
        "[[guards]]",
        'metric = "latency_p95_s"           # tail latency may not get worse by more than 10%',
        "max_ratio = 1.10",
        "required = true",
        "",
        "[[guards]]",
        'metric = "ttfa_p50_s"              # nor the first output come 25% later',
        "max_ratio = 1.25",
        "required = true",
        "",
        "# The outputs, compared with the baseline's on every run: word for word (loosen",
        "# max for lossy changes such as lower precision), and as long (a faster run that",
        "# emits less is not faster).",
        "[[quality]]",
        'kind = "wer"',
        'output = "texts"',
        "max = 0.0",
        "",
        "[[quality]]",
        'kind = "output_length"',
        'output = "output_words"',
        "max_change = 0.02",
        "",
    ]
    lines += ["# The objective is measured outside the candidate's code: by "
              + ("the protected client" if serving else "the verifier's timing harness") + ".",
              "[verifier]",
              "require_external = true            # refuse an objective the candidate reports itself",
              ""]
    lines += [
        "# The benchmark's files are protected: an agent never edits what measures it.",
        "[policy]",
        f"editable = [{', '.join(_s(g) for g in a.editable)}]",
        f'protected = ["{BENCH_DIR}/**"]',
        "max_changed_lines = 400",
        "",
        "# Who proposes changes (`rsi try --agent replay --patch my.patch` tries one of",
        "# yours). The tuner needs [[knobs]]; add them, then kind = \"tuner\".",
        "[agent]",
        f"kind = {_s(a.agent)}",
        "rounds = 6",
    ]
    if a.agent in AGENT_ENV:
        lines.append(f"env = [{_s(AGENT_ENV[a.agent])}]          # the API key's name on the runner")
    if a.agent == "command":
        lines.append('command = "your-agent --task {task_file} --workdir {workdir}"')
    lines += ["", *runner_lines]
    return "\n".join(lines) + "\n"


def scaffold_files(a: Scaffold, runner_lines: list[str]) -> dict[str, str]:
    """``{path: text}``: the config and the benchmark's files."""
    problems = a.problems()
    if problems:
        raise ScaffoldError("; ".join(problems))
    files = {CONFIG_PATH: render_config(a, runner_lines),
             f"{BENCH_DIR}/evaluate.py": _template("rsi_evaluate.py"),
             f"{BENCH_DIR}/prompts.txt": "\n".join(a.prompts) + "\n"}
    if a.kind == "serving":
        files[f"{BENCH_DIR}/client.py"] = _template("rsi_client.py")
    else:
        files[f"{BENCH_DIR}/bench.py"] = _template("rsi_inprocess.py")
    return files


def next_steps(a: Scaffold) -> str:
    if a.kind == "serving":
        run = (f"  2. Start your server by hand and try the client against it:\n"
               f"       RSI_PORT=8000 {a.serve} &\n"
               f"       RSI_SERVER_URL=http://127.0.0.1:8000 python {BENCH_DIR}/client.py")
    else:
        run = (f"  2. Run the same calls once by hand:  python {BENCH_DIR}/bench.py {a.entry}\n"
               "     (the verifier times them with its own harness, not with this script)")
    return f"""Next steps:
  1. Edit {BENCH_DIR}/prompts.txt: inputs like your users' (one per line).
{run}
  3. Check the config:  rsi config check
  4. Commit, then try the whole flow here, without GitHub:
       rsi try --agent replay --patch my-change.patch     (or --agent {a.agent})
  Writing metrics that resist gaming: {GUIDE}"""
