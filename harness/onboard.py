"""``rsi init``: the files that onboard a target repo, and what can be detected.

Pure functions of data (docs/architecture.md, habit 4): :func:`detect` reads a git tree
(the bot) or a checkout (``rsi init``) and guesses the benchmark command and its metrics; :func:`render_files` returns
``{path: text}`` for

* ``.rsi/config.toml``, commented, valid as written (a test builds a task of it);
* ``.github/workflows/rsi-job.yml``, the caller of rsi-bot's reusable workflow
  (the ``actions`` executor dispatches it);
* ``.github/workflows/rsi-config-check.yml``, ``rsi config check`` on every
  change of ``.rsi/config.toml``;
* ``.github/ISSUE_TEMPLATE/rsi-proposal.yml``, the proposal form.

:func:`write_files` writes them, refusing to overwrite any file unless forced.
The bot's onboarding PR (``bot/handlers/onboarding.py``) uses the same files.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from importlib import metadata, resources
from pathlib import Path
from typing import Literal

from harness.spec import CONFIG_PATH

PROJECT = "rsi-bot/rsi-bot"
"""The GitHub repository of rsi-bot (the reusable workflow lives there)."""
CALLER_PATH = ".github/workflows/rsi-job.yml"
CHECK_PATH = ".github/workflows/rsi-config-check.yml"
FORM_PATH = ".github/ISSUE_TEMPLATE/rsi-proposal.yml"
FILES = (CONFIG_PATH, CALLER_PATH, CHECK_PATH, FORM_PATH)
_LOWER = re.compile(r"(latency|_s$|_ms$|_us$|time|duration|rss|mib|mem|bytes|rtf|ttf|wer|loss|"
                    r"error|^p\d\d)", re.I)
_HIGHER = re.compile(r"(per_s|per_sec|_ps$|throughput|qps|rps|tps|speed|rate$|rtfx)", re.I)
_MAX_READ = 512 * 1024
_BENCH_GLOBS = ("bench/*.py", "benchmarks/*.py", "benchmark/*.py", "bench*.py")


class InitError(ValueError):
    """Init cannot go on; the message says what to do."""


VERIFIER_OBJECTIVES = ("wall_s", "cpu_s")
"""Objectives the verifier measures itself from outside the run (its clock, the
run's cgroup): what ``rsi init`` makes an in-process command's objective."""


def default_objective(metrics: dict[str, str], client: str | None) -> str:
    """What ``rsi init --yes`` improves: the first metric a protected client
    reports, else the run's wall time on the verifier's clock (``wall_s``):
    never a number the candidate's process reports about itself."""
    return next(iter(metrics), "wall_s") if client else "wall_s"


def self_report_refusal(metric: str) -> str:
    return (f"the objective {metric!r} is reported by the benchmark's own process, where the "
            "candidate's code runs: a candidate could report any number. Leave --objective "
            "out (the verifier's clock: wall_s), time your function with the verifier's harness "
            "(rsi init --scaffold inprocess --entry package.module:function), or accept the "
            "self-report with --self-reported (every verdict then says so)")


def release_ref() -> str:
    """The tag of this release (``v`` + the package version): the reusable
    workflow and installs are pinned to it (see docs/getting-started.md)."""
    try:
        return "v" + metadata.version("rsi-bot")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare tree
        return "main"


def direction_of(metric: str) -> Literal["higher", "lower"]:
    """A guess: times, latencies, memory and error rates are better lower."""
    if _HIGHER.search(metric):
        return "higher"
    return "lower" if _LOWER.search(metric) else "higher"


@dataclass
class Detected:
    command: str | None = None
    metrics: dict[str, str] = field(default_factory=dict)
    samples: dict[str, str] = field(default_factory=dict)
    source: str = ""
    """Where the guess comes from (shown to the user)."""
    client: str | None = None
    """A load generator of the repo (a script that writes $RSI_RESULT and reads
    $RSI_SERVER_URL): the benchmark is then a serving one, ``command`` the server."""
    outputs: list[str] = field(default_factory=list)
    """Keys of the result's ``outputs``: what quality guards can compare."""


@dataclass
class InitAnswers:
    command: str
    metrics: dict[str, str]
    objective: str
    benchmark: str = "main"
    samples: dict[str, str] = field(default_factory=dict)
    min_gain: float = 0.05
    timeout_s: int = 600
    ready_pattern: str | None = None
    client: str | None = None
    """The repo's load generator (:attr:`Detected.client`): ``command`` is then the
    server (``serve``), and the objective must come from outside the candidate
    (``require_external = true``)."""
    self_reported: bool = False
    """The maintainer accepts an objective that the benchmark's own process
    reports (``--self-reported``): written as ``self_reported = true``. Without
    it, an in-process command's objective is one the verifier measures
    (:data:`VERIFIER_OBJECTIVES`) and ``require_external = true`` (issue 29)."""
    editable: list[str] = field(default_factory=lambda: ["**"])
    device: Literal["cpu", "cuda", "npu"] = "cpu"
    ref: str = field(default_factory=release_ref)
    install: str = ""
    """The pip requirement the generated workflows install rsi-bot from; empty:
    the repository variable ``RSI_INSTALL`` (a setting, never a URL guessed here)."""
    agent: str = "mini-swe-agent"
    """An agent kind that runs without [[knobs]] (the tuner needs them)."""
    outputs: list[str] = field(default_factory=list)
    """Keys of the result's outputs: each gets an output-length quality guard."""
    examples: list[str] = field(default_factory=list)
    """Source files of this repo (:func:`source_examples`): the issue form's placeholders."""

    def problems(self) -> list[str]:
        out = []
        if not self.command.strip():
            out.append("the benchmark command is empty (--command)")
        if not self.metrics:
            out.append("declare at least one metric (--metric NAME=higher|lower)")
        for m, d in {**self.metrics, **self.samples}.items():
            if not re.fullmatch(r"[A-Za-z_]\w*", m):
                out.append(f"metric name {m!r}: use letters, digits and '_'")
            if d not in ("higher", "lower"):
                out.append(f"metric {m}: direction must be higher or lower, not {d!r}")
        if self.objective not in self.metrics and self.objective not in VERIFIER_OBJECTIVES:
            out.append(f"the objective {self.objective!r} is not one of the metrics "
                       f"({', '.join(self.metrics) or 'none'}) nor one the verifier measures "
                       f"({', '.join(VERIFIER_OBJECTIVES)})")
        elif self.objective in self.metrics and not self.client and not self.self_reported:
            out.append(self_report_refusal(self.objective))
        if self.self_reported and (self.client or self.objective not in self.metrics):
            out.append(f"--self-reported: the objective {self.objective!r} is not reported by "
                       "the benchmark's own process; leave the flag out")
        if not 0 <= self.min_gain <= 10:
            out.append(f"min_gain {self.min_gain} is outside 0..10 (0.05 means 5% better)")
        if self.agent == "tuner":
            out.append("the tuner needs [[knobs]], which init cannot know: pick another --agent "
                       "(mini-swe-agent, claude-code, codex, aider, command, replay) and add "
                       "knobs later")
        if not re.fullmatch(r"[A-Za-z_][\w-]*", self.benchmark):
            out.append(f"benchmark name {self.benchmark!r}: use letters, digits, '_' or '-'")
        return out


# ---------------------------------------------------------------- detection


def _result_keys(source: str) -> tuple[dict[str, str], dict[str, str]]:
    """Metric and sample names from dict literals ``{"metrics": {...}, "samples": {...}}``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}, {}
    found: dict[str, dict[str, str]] = {"metrics": {}, "samples": {}}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict):
            continue
        for k, v in zip(node.keys, node.values, strict=True):
            if isinstance(k, ast.Constant) and k.value in found and isinstance(v, ast.Dict):
                for mk in v.keys:
                    if isinstance(mk, ast.Constant) and isinstance(mk.value, str):
                        found[k.value][mk.value] = direction_of(mk.value)
    return found["metrics"], found["samples"]


def _output_keys(source: str) -> list[str]:
    """Keys of dict literals under ``"outputs"`` (what the result carries for quality guards)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=True):
                if isinstance(k, ast.Constant) and k.value == "outputs" and isinstance(v, ast.Dict):
                    out += [mk.value for mk in v.keys if isinstance(mk, ast.Constant)
                            and isinstance(mk.value, str) and re.fullmatch(r"\w{1,64}", mk.value)
                            and mk.value not in out]
    return out


def _plain(p: Path, root: Path) -> bool:
    """A regular file of a sane size inside ``root``, with no link on the way
    (itself or a directory above it): a checkout may be untrusted."""
    try:
        inside = p.resolve() == root.resolve() / p.relative_to(root)
    except (OSError, ValueError):
        return False
    return inside and p.is_file() and not p.is_symlink() and p.stat().st_size <= _MAX_READ


def _glob_match(path: str, pattern: str) -> bool:
    """``Path.glob``'s rule for one of :data:`_BENCH_GLOBS` (``*`` stays in one
    directory), on a path of the git tree."""
    from fnmatch import fnmatchcase

    parts, pats = path.split("/"), pattern.split("/")
    return len(parts) == len(pats) and all(fnmatchcase(a, b) for a, b in zip(parts, pats,
                                                                             strict=True))


def _tree_files(repo: Path, ref: str) -> dict[str, str]:
    """The files detection looks at, read from the git tree at ``ref`` (blobs of
    mode 100644/100755 only: a symlink is a blob of its own mode there, and a
    path through a symlinked directory does not exist in the tree)."""
    from harness.gitutil import git

    wanted: dict[str, str] = {}
    listing = git(repo, "ls-tree", "-r", "-l", "-z", "--full-tree", ref)
    for entry in listing.split("\0"):
        if "\t" not in entry:
            continue
        meta, path = entry.split("\t", 1)
        mode, kind, sha, size = meta.split()
        if kind != "blob" or mode not in ("100644", "100755") or not size.isdigit():
            continue
        if int(size) > _MAX_READ:
            continue
        if path == "Makefile" or any(_glob_match(path, g) for g in _BENCH_GLOBS):
            wanted[path] = sha
    return {p: git(repo, "cat-file", "blob", sha) for p, sha in sorted(wanted.items())[:51]}


def _checkout_files(repo: Path) -> dict[str, str]:
    scripts = sorted({p for g in _BENCH_GLOBS for p in repo.glob(g) if _plain(p, repo)})
    out = {p.relative_to(repo).as_posix(): p.read_text(encoding="utf-8", errors="replace")
           for p in scripts[:50]}
    if _plain(repo / "Makefile", repo):
        out["Makefile"] = (repo / "Makefile").read_text(errors="replace")
    return out


def detect(repo: Path, *, ref: str | None = None) -> Detected:
    """Guess the benchmark: a script that writes ``$RSI_RESULT`` first, then a
    ``bench`` target of the Makefile, then any benchmark-looking script. With
    ``ref`` (the bot's onboarding: an untrusted repository) it reads the git
    tree at ``ref``, never the checkout; without, the checkout (``rsi init``),
    refusing any path through a link."""
    repo = Path(repo)
    files = _tree_files(repo, ref) if ref is not None else _checkout_files(repo)
    texts = {p: t for p, t in files.items()
             if p != "Makefile" and any(_glob_match(p, g) for g in _BENCH_GLOBS)}
    scripts = sorted(texts)[:50]
    native = [p for p in scripts if "RSI_RESULT" in texts[p]]
    for rel in native:
        metrics, samples = _result_keys(texts[rel])
        if "RSI_SERVER_URL" in texts[rel]:  # a client: the command to find is the server's
            return Detected(None, metrics, samples, f"{rel} is a load generator (reads "
                            "$RSI_SERVER_URL): give your server's command", client=f"python {rel}",
                            outputs=_output_keys(texts[rel]))
        return Detected(f"python {rel}", metrics, samples, f"{rel} writes $RSI_RESULT",
                        outputs=_output_keys(texts[rel]))
    if "Makefile" in files:
        m = re.search(r"^(bench(?:mark)?)\s*:", files["Makefile"], re.M)
        if m:
            return Detected(f"make {m.group(1)}", source=f"Makefile target '{m.group(1)}'")
    if scripts:
        rel = scripts[0]
        return Detected(f"python {rel}", source=f"{rel} (it must write its result JSON to "
                        "$RSI_RESULT)")
    return Detected()


# ------------------------------------------------------------------ rendering


def _s(v: str) -> str:
    return json.dumps(v)  # a JSON string is a valid TOML basic string


def render_config(a: InitAnswers) -> str:
    lines = [
        "#:schema https://raw.githubusercontent.com/rsi-bot/rsi-bot/main/docs/schema/rsi-config.schema.json",
        "# rsi-bot's repo config, written by `rsi init`. The bot reads it from the",
        "# default branch only. Every key: https://github.com/rsi-bot/rsi-bot/blob/main/docs/configuration.md",
        "# Check it (the working tree) before committing: rsi config check",
        "",
        "# A benchmark is a command run in a checkout of this repo; it writes its result",
        '# JSON to the file $RSI_RESULT names: {"metrics": {...}, "samples": {...},',
        '# "outputs": {...}, "counts": {"failed": 0}}. The verifier runs it many times,',
        "# alternating baseline and candidate, each run in a fresh container.",
        f"[benchmarks.{a.benchmark}]",
        *([f"command = {_s(a.command)}"] if not a.client else [
            f"serve = {_s(a.command)}                  # your server, from the candidate's checkout; "
            "it listens on $RSI_PORT",
            'ready_path = "/health"               # polled until it answers 200',
            f"client = {_s(a.client)}             # protected: run from the baseline, reaches the "
            "server at $RSI_SERVER_URL"]),
        f"timeout_s = {a.timeout_s}                     # one run; the whole process group is killed after",
        f"ready_pattern = {_s(a.ready_pattern)}" if a.ready_pattern else
        '# ready_pattern = "READY"              # a stdout line that ends start-up (-> startup_s)',
        "",
        "# Each metric the benchmark reports, and its better direction.",
        f"[benchmarks.{a.benchmark}.metrics]",
        *(f"{m} = {_s(d)}" for m, d in a.metrics.items()),
    ]
    if a.samples:
        lines += ["", "# Per-request series: the verifier derives <name>_p50 ... _p99 from them.",
                  f"[benchmarks.{a.benchmark}.samples]",
                  *(f"{m} = {_s(d)}" for m, d in a.samples.items())]
    lines += [
        "",
        "# What to improve, and the smallest gain worth a pull request (0.05 = 5%).",
        "[objective]",
        f"benchmark = {_s(a.benchmark)}",
        f"metric = {_s(a.objective)}" + ("                  # the run's time on the verifier's clock"
                                          if a.objective == "wall_s" else ""),
        f"min_gain = {a.min_gain!r}",
        *(["self_reported = true                 # the benchmark's own process reports it: "
           "every verdict says so"] if a.self_reported else []),
        "",
        "# Guards: how much worse any other metric may get (checked against the current",
        "# baseline and the task's first one). The verifier also adds default guards on",
        "# peak memory and tail latency. For example:",
        "# [[guards]]",
        '# metric = "peak_rss_mib"',
        "# max_ratio = 1.05",
        "# required = true                      # a proposal may not loosen it",
        *_guard_lines(a),
        *_quality_lines(a),
        "",
        *_external_lines(a),
        "# What an agent may change. .rsi/** and .github/** are always protected, and so",
        "# is every file a benchmark command names. Globs use .gitignore rules.",
        "[policy]",
        f"editable = [{', '.join(_s(g) for g in a.editable)}]",
        "protected = []",
        "max_changed_lines = 400",
        "",
        "# Who proposes changes. 'tuner' needs [[knobs]]; external agents (claude-code,",
        "# codex, aider, mini-swe-agent) need their API key's name in env and the model",
        "# API host in the runner profile's allowed_hosts.",
        "[agent]",
        "rounds = 6",
        f"kind = {_s(a.agent)}",
        *([f"env = [{_s(_AGENT_ENV[a.agent])}]"] if a.agent in _AGENT_ENV else []),
        "",
        *_runner_lines(a),
    ]
    return "\n".join(lines) + "\n"


def _external_lines(a: InitAnswers) -> list[str]:
    if a.self_reported:
        return []
    why = (["# This repo has a load generator: the objective and the required guards must be",
            "# measured outside the candidate (a server cannot report its own speed)."]
           if a.client else
           [f"# The objective is {a.objective}, measured by the verifier from outside the run: the",
            "# benchmark's own numbers come from the candidate's process, so they are guards",
            "# and table rows, never the objective. To improve one of them, time your function",
            "# with the verifier's harness instead (docs/writing-a-benchmark.md: entry).",
            "# Accepting a self-report takes self_reported = true under [objective] and",
            "# require_external = false; every verdict then says the objective was self-reported."])
    return [*why, "[verifier]", "require_external = true", ""]


_AGENT_ENV = {"mini-swe-agent": "OPENAI_API_KEY", "aider": "OPENAI_API_KEY",
              "claude-code": "ANTHROPIC_API_KEY", "codex": "OPENAI_API_KEY"}


def _quality_lines(a: InitAnswers) -> list[str]:
    """An output-length guard on each output the result carries (a faster run
    that emits less is not faster); a WER guard where the outputs are texts is
    the maintainer's to add (docs/configuration.md#quality)."""
    lines = []
    for key in a.outputs[:3]:
        lines += ["", "[[quality]]", 'kind = "output_length"            # outputs as long as the '
                  "baseline's", f"output = {_s(key)}", "max_change = 0.02"]
    return lines


def _guard_lines(a: InitAnswers) -> list[str]:
    others = [m for m, d in a.metrics.items() if m != a.objective and d == "lower"]
    return [line for m in others[:3]
            for line in ("", "[[guards]]", f"metric = {_s(m)}", "max_ratio = 1.05")]


def _runner_lines(a: InitAnswers) -> list[str]:
    head = ["# Where agents and benchmarks run. The bot dispatches jobs to self-hosted runners",
            "# with labels from the profile; see docs/getting-started.md for CUDA and Ascend NPU.",
            "[runner]", f"profile = {_s(a.device)}", "",
            f"[runner.profiles.{a.device}]", f"device = {_s(a.device)}",
            f'# runs_on = ["self-hosted", "{a.device}"]   # the runner labels of its jobs']
    if a.device == "cuda":
        return head + ['devices = ["0"]                       # GPU ids this profile may use']
    if a.device == "npu":
        return head + ['devices = ["0"]                       # davinci indices this profile may use']
    return head + ["cpus = 2.0", 'memory = "4g"']


def _template(name: str) -> str:
    return resources.files("harness").joinpath("templates", name).read_text(encoding="utf-8")


def render_files(a: InitAnswers) -> dict[str, str]:
    """``{path: text}`` of every file ``rsi init`` writes."""
    problems = a.problems()
    if problems:
        raise InitError("; ".join(problems))
    sub = {"@RSI_REF@": a.ref, "@RSI_PROJECT@": PROJECT, "@RSI_VERSION@": a.ref.removeprefix("v"),
           "@RSI_INSTALL@": json.dumps(a.install) if a.install else "${{ vars.RSI_INSTALL }}"}

    def fill(text: str) -> str:
        for k, v in sub.items():
            text = text.replace(k, v)
        return text

    return {
        CONFIG_PATH: render_config(a),
        CALLER_PATH: fill(_template("rsi-job-caller.yml")),
        CHECK_PATH: fill(_template("rsi-config-check.yml")),
        FORM_PATH: render_form(a.benchmark, a.objective, [m for m in a.metrics if m != a.objective],
                               a.examples),
    }


def render_form(benchmark: str, metric: str, others: list[str], examples: list[str]) -> str:
    """The issue form, its placeholders taken from this repo: its benchmark,
    objective, other metrics and source files (JSON strings: valid YAML scalars)."""
    guards = [f"{m} <= 1.05x" for m in others[:2]] or ["peak_rss_mib <= 1.05x"]
    files = ", ".join(examples[:2]) or "src/model.py"
    idea = (f"What to change in {examples[0]} and why it should help {metric}." if examples
            else f"What to change and why it should help {metric}.")
    sub = {"@BENCHMARK@": benchmark, "@METRIC@": metric, "@GUARDS@": "\n".join(guards),
           "@EDITABLE@": files, "@IDEA@": idea}
    text = _template("rsi-proposal.yml")
    for k, v in sub.items():
        text = text.replace(k, json.dumps(v[:300]))
    return text


_SOURCE_SUFFIXES = (".py", ".cc", ".cpp", ".cu", ".rs", ".go", ".c", ".h")
_NOT_SOURCE = re.compile(r"(^|/)(tests?|bench(mark)?s?|docs?|examples?|\.\w+|build|dist|"
                         r"node_modules|venv|site-packages)/|(^|/)(setup|conftest)\.py$|(^|/)test_")


def source_examples(repo: Path, limit: int = 2, *, ref: str | None = None) -> list[str]:
    """This repo's largest source files outside tests, benchmarks and docs (the
    likely hot paths), for the issue form's placeholders. With ``ref`` (the
    bot's onboarding) the git tree at ``ref`` is listed, never the checkout."""
    repo = Path(repo)
    found = []
    if ref is not None:
        from harness.gitutil import git

        for entry in git(repo, "ls-tree", "-r", "-l", "-z", "--full-tree", ref).split("\0"):
            if "\t" not in entry:
                continue
            meta, rel = entry.split("\t", 1)
            mode, kind, _sha, size = meta.split()
            if (kind == "blob" and mode in ("100644", "100755") and size.isdigit()
                    and Path(rel).suffix in _SOURCE_SUFFIXES and not _NOT_SOURCE.search(rel)):
                found.append((int(size), rel))
        return [rel for _, rel in sorted(found, key=lambda x: (-x[0], x[1]))[:limit]]
    for p in repo.rglob("*"):
        if len(found) > 2000:
            break
        if p.suffix in _SOURCE_SUFFIXES and _plain(p, repo):
            rel = p.relative_to(repo).as_posix()
            if not _NOT_SOURCE.search(rel):
                found.append((p.stat().st_size, rel))
    return [rel for _, rel in sorted(found, key=lambda x: (-x[0], x[1]))[:limit]]


def write_files(repo: Path, files: dict[str, str], *, force: bool = False) -> list[Path]:
    """Write ``files`` under ``repo``; refuse, writing nothing, when any exists
    (unless ``force``) or when a path goes through a symbolic link."""
    repo = Path(repo)
    existing = [p for p in files if (repo / p).exists()]
    if existing and not force:
        raise InitError(f"{', '.join(existing)} already exist(s) in {repo}; "
                        "nothing was written (--force overwrites)")
    for rel in files:
        path = repo / rel
        for part in [path, *path.parents]:
            if part == repo:
                break
            if part.is_symlink():
                raise InitError(f"{part.relative_to(repo)} is a symbolic link; nothing was "
                                "written (rsi init never writes through links)")
    written = []
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def next_steps(a: InitAnswers) -> str:
    return f"""Next steps:
  1. Check the config (the working tree):  rsi config check
  2. Run the benchmark once by hand:       RSI_RESULT=/tmp/r.json {a.command} && cat /tmp/r.json
  3. Commit .rsi/ and .github/ to the default branch (the bot reads only that).
  4. Install the rsi-bot GitHub App on this repository (docs/getting-started.md).
  5. Register a self-hosted runner with the labels of profile '{a.device}'.
  6. Open an issue with the "rsi optimization proposal" form; a maintainer adds
     the `rsi` label to start.
Docs: https://github.com/{PROJECT}/blob/main/docs/getting-started.md"""
