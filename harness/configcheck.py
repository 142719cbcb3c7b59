"""``rsi config check``: the repo config in a working tree, with file:line errors.

:func:`check_config` reads ``.rsi/config.toml`` from disk (the working tree,
never a commit: an uncommitted typo must not print "ok"), validates it exactly
as the bot will (:func:`harness.spec.build_task` with no proposal), and turns
each error into a :class:`Problem`: the file, the line of the offending key in
the TOML text, the message, and a link to the key's section of
``docs/configuration.md``.

:func:`blame` splits the errors of a proposal checked against a config:
errors the config has on its own belong to ``.rsi/config.toml``, the rest to
the proposal (the issue body).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness.gitutil import git
from harness.policy import paths_named_by
from harness.spec import CONFIG_PATH, SpecError, build_task

DOCS_URL = "https://github.com/rsi-bot/rsi-bot/blob/main/docs/configuration.md"
"""Where ``docs/configuration.md`` is published; its headings are the anchors."""
SECTIONS = ("benchmarks", "objective", "guards", "quality", "verifier", "hidden",
            "knobs", "policy", "agent", "runner", "bot")


@dataclass(frozen=True)
class Problem:
    """One problem: where (file and 1-based line, when known) and what."""

    file: str
    message: str
    line: int | None = None
    doc: str | None = None
    warning: bool = False
    """A warning does not fail the check."""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        tail = f"\n    see {self.doc}" if self.doc else ""
        return f"{where}: {'warning: ' if self.warning else ''}{self.message}{tail}"


# ------------------------------------------------------------ TOML key lines

_BARE = r"[A-Za-z0-9_-]+|\"(?:[^\"\\]|\\.)*\"|'[^']*'"
_DOTTED = rf"(?:{_BARE})(?:\s*\.\s*(?:{_BARE}))*"
_HEADER_RX = re.compile(rf"^\s*(\[\[?)\s*({_DOTTED})\s*\]\]?\s*(?:#.*)?$")
_KEY_RX = re.compile(rf"^\s*({_DOTTED})\s*=")


def _parts(dotted: str) -> list[str]:
    return [p.strip().strip("\"'") for p in re.findall(rf"{_BARE}", dotted)]


def key_lines(text: str) -> dict[str, int]:
    """Map each key path (``agent.kind``, ``guards[1].metric``) to the line that
    sets it. Parent paths map to their first line. Lines inside multi-line
    strings are skipped."""
    out: dict[str, int] = {}
    prefix: list[str] = []
    aot: dict[str, int] = {}
    open_ml: str | None = None
    for n, line in enumerate(text.splitlines(), start=1):
        if open_ml:
            if line.count(open_ml) % 2 == 1:
                open_ml = None
            continue
        m = _HEADER_RX.match(line)
        if m:
            name = _parts(m.group(2))
            if m.group(1) == "[[":
                key = ".".join(name)
                aot[key] = aot.get(key, -1) + 1
                name = name[:-1] + [f"{name[-1]}[{aot[key]}]"]
            prefix = name
            _record(out, prefix, n)
            continue
        m = _KEY_RX.match(line)
        if m:
            _record(out, prefix + _parts(m.group(1)), n)
            rest = line[m.end():]
            for delim in ('"""', "'''"):
                if rest.count(delim) == 1:
                    open_ml = delim
    return out


def _record(out: dict[str, int], parts: list[str], n: int) -> None:
    for i in range(1, len(parts) + 1):
        out.setdefault(".".join(parts[:i]), n)


# ------------------------------------------------------- error -> key path


def error_path(message: str) -> str | None:
    """The key path an error message is about, in :func:`key_lines` form."""
    head = message.split(":", 1)[0].strip().removeprefix("proposal ").strip()
    head = re.sub(r"\s*\([^)]*\)", "", head)
    m = re.match(r"^\[(\w+)\]\s*(.*)$", head)
    if m:
        head = m.group(1) + ("." + m.group(2) if m.group(2) else "")
    m = re.match(r"^knob (\d+)\s*(.*)$", head)
    if m:
        head = f"knobs[{int(m.group(1)) - 1}]" + ("." + m.group(2) if m.group(2) else "")
    m = re.match(r"^missing \[(\w+)", message)
    if m:
        return m.group(1)
    m = re.match(r"^'(\w+)' must be an array of tables", message)
    if m:
        return m.group(1)
    head = re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", head.replace(" ", "."))
    if not re.fullmatch(r"[\w\-\[\].]+", head):
        return None
    m = re.search(r":\s+unknown (metric|benchmark) ", message)  # point at the name's key
    return f"{head}.{m.group(1)}" if m and not head.endswith(m.group(1)) else head


def locate(path: str | None, lines: dict[str, int]) -> int | None:
    """The line of ``path``, or of its nearest parent the text sets."""
    while path:
        if path in lines:
            return lines[path]
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""
    return None


def doc_link(path: str | None) -> str:
    top = re.split(r"[.\[]", path or "", maxsplit=1)[0]
    return f"{DOCS_URL}#{top}" if top in SECTIONS else DOCS_URL


def config_problems(errors: list[str], text: str, file: str = CONFIG_PATH) -> list[Problem]:
    lines = key_lines(text)
    out = []
    for e in errors:
        m = re.search(r"\(at line (\d+), column \d+\)", e)
        path = error_path(e)
        line = int(m.group(1)) if m else locate(path, lines)
        out.append(Problem(file, e.removeprefix(f"{CONFIG_PATH}: "), line, doc_link(path)))
    return out


# -------------------------------------------------------------- the checks


def working_tree_files(repo: Path) -> set[str]:
    """Files in the working tree (relative to ``repo``): tracked and
    untracked-but-not-ignored when ``repo`` is in a git work tree, else every
    file under it. Git runs hardened (:func:`harness.gitutil.git`)."""
    if git(repo, "rev-parse", "--is-inside-work-tree", check=False) == "true":
        out = git(repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
        return {p for p in out.split("\0") if p}
    return {p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file()}


_COMMAND_KEYS = ("command", "serve", "client", "evaluator", "setup")


def missing_paths(text: str, files: set[str]) -> list[Problem]:
    """Warnings: files a benchmark command names that the working tree lacks."""
    try:
        benches = tomllib.loads(text).get("benchmarks") or {}
    except tomllib.TOMLDecodeError:
        return []
    lines = key_lines(text)
    out = []
    for name, bench in benches.items() if isinstance(benches, dict) else ():
        for key in _COMMAND_KEYS:
            cmd = bench.get(key) if isinstance(bench, dict) else None
            for path in paths_named_by(cmd) if isinstance(cmd, str) else ():
                if path not in files and not any(f.startswith(path + "/") for f in files):
                    where = f"benchmarks.{name}.{key}"
                    out.append(Problem(CONFIG_PATH, f"{where}: names '{path}', which is not in "
                                       "the working tree", lines.get(where), doc_link(where),
                                       warning=True))
    return out


def _resolve(schema: dict, node: dict) -> dict:
    while "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    if "anyOf" in node:  # optional tables: the non-null branch
        for branch in node["anyOf"]:
            if branch.get("type") != "null":
                return _resolve(schema, branch)
    return node


def unknown_keys(data: object, schema: dict | None = None) -> dict[str, str]:
    """``{key path: message}`` for every key the JSON Schema of the repo config
    (docs/schema/rsi-config.schema.json, :mod:`harness.schema`) does not allow,
    each with ``difflib``'s nearest known key as a "did you mean"."""
    import difflib

    from harness.schema import _repo_config_model

    # the checked-in schema's shape without its descriptions (reading those from
    # the source takes seconds; the keys are the same)
    schema = schema or _repo_config_model().model_json_schema()
    out: dict[str, str] = {}

    def walk(value: object, node: dict, path: str) -> None:
        node = _resolve(schema, node)
        if isinstance(value, dict):
            props = node.get("properties", {})
            extra = node.get("additionalProperties", True)
            for key, sub in value.items():
                where = f"{path}.{key}" if path else str(key)
                if key in props:
                    walk(sub, props[key], where)
                elif isinstance(extra, dict):
                    walk(sub, extra, where)
                elif extra is False or (props and node.get("type") == "object" and not extra):
                    near = difflib.get_close_matches(str(key), list(props), n=1, cutoff=0.6)
                    hint = f"; did you mean '{near[0]}'?" if near else ""
                    here = f"[{path}]" if path else "the top level"
                    out[where] = (f"{where}: unknown key{hint} (known in {here}: "
                                  f"{', '.join(props)})")
        elif isinstance(value, list) and isinstance(node.get("items"), dict):
            for i, item in enumerate(value):
                walk(item, node["items"], f"{path}[{i}]")

    walk(data, schema, "")
    return out


def check_config(repo: Path) -> list[Problem]:
    """Every problem of ``<repo>/.rsi/config.toml`` as it is on disk, in one
    pass: keys the JSON Schema does not know (with "did you mean"), then every
    error of building a task from it."""
    path = Path(repo) / CONFIG_PATH
    if not path.is_file():
        return [Problem(CONFIG_PATH, f"not found in {repo}; `rsi init` writes one",
                        doc=DOCS_URL)]
    text = path.read_text(encoding="utf-8", errors="replace")
    files = working_tree_files(Path(repo))
    warnings = missing_paths(text, files)
    try:
        unknown = unknown_keys(tomllib.loads(text))
    except tomllib.TOMLDecodeError:
        unknown = {}
    errors = list(unknown.values())
    try:
        build_task(text, None, "config-check", repo_files=files)
    except SpecError as exc:
        errors += [e.replace("on the default branch", "in the working tree") for e in exc.errors
                   if error_path(e) not in unknown]  # the schema's message has the suggestion
    return config_problems(errors, text) + warnings if errors else warnings


def blame(config_text: str, proposal_body: str | None, proposal_file: str, *,
          repo_files: set[str] | None = None) -> list[Problem]:
    """Problems of a proposal checked against a config, each blamed on the file
    that causes it: what the config fails on its own is the config's."""
    own = _errors(config_text, None, repo_files)
    all_errors = _errors(config_text, proposal_body, repo_files)
    mine = [e for e in all_errors if e in own]
    theirs = [Problem(proposal_file, e) for e in all_errors if e not in own]
    return config_problems(mine, config_text) + theirs


def _errors(text: str, body: str | None, repo_files: set[str] | None) -> list[str]:
    try:
        build_task(text, body, "config-check", repo_files=repo_files)
    except SpecError as exc:
        return exc.errors
    return []
