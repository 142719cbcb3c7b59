"""The edit policy: which changes a candidate may make, checked on its diff.

A candidate is a unified diff (``git diff --binary`` of the agent's worktree, or
a patch file given to ``replay``). :func:`check_diff` parses it with unidiff and
returns every violation with an exact reason; the loop records a violation as a
``reject`` in the ledger and never measures the candidate.

Rules, in the order they are reported for each file:

* ``escape``: a path that is absolute, contains ``..`` or a backslash, or is
  otherwise not a plain relative path inside the repository;
* ``protected``: a path matching a protected glob (``.rsi/**`` and
  ``.github/**`` always, plus the repo config's, the proposal's, and the files
  that the benchmark commands name);
* ``not_editable``: a path outside every ``editable`` glob (and outside the
  proposal's narrowing, when it gave one);
* ``binary``: a binary file;
* ``symlink``: a file whose old or new mode is ``120000``;
* ``mode``: a mode change (``old mode``/``new mode``), or a new file whose mode
  is not ``100644``; also submodules (``160000``);
* ``size``: more changed lines (added + removed) than ``max_changed_lines``
  (reported once, for the whole diff);
* ``parse``: a diff that unidiff cannot read.

Globs follow ``.gitignore`` rules (``pathspec``'s ``GitIgnoreSpec``), matched
on the POSIX path relative to the repository root: ``*`` and ``?`` stay inside
one path segment, ``**`` spans segments, ``[...]`` is a character class; a
glob with a ``/`` other than at its end is anchored at the root (``a/*.py``;
``/x.py`` for a top-level file only), one without matches at any depth
(``*.py``, ``bench``); a directory matches everything under it (``bench``,
``bench/``); a ``!glob`` re-includes what an earlier glob of the same list
matched (``editable = ["src/**", "!src/vendored/**"]``), the last match wins.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Literal

from pathspec import GitIgnoreSpec
from pydantic import BaseModel, ConfigDict, Field

ALWAYS_PROTECTED: tuple[str, ...] = (".rsi/**", ".github/**")

Rule = Literal["escape", "protected", "not_editable", "binary", "symlink", "mode", "size", "parse"]


class EditPolicy(BaseModel):
    """What an agent may edit. Lives under ``[policy]`` in the repo config."""

    model_config = ConfigDict(extra="forbid")

    editable: list[str] = Field(default_factory=lambda: ["**"])
    """Globs of paths an agent may change. Default: everything not protected."""
    protected: list[str] = Field(default_factory=list)
    """Globs an agent may never change (``.rsi/**`` and ``.github/**`` always are)."""
    max_changed_lines: int = Field(400, ge=1)
    """Cap on added + removed lines in one candidate."""
    narrow: list[str] = Field(default_factory=list)
    """Set by a proposal: a second editable list; a path must match both."""

    def all_protected(self, extra: Iterable[str] = ()) -> list[str]:
        out: list[str] = []
        for g in (*ALWAYS_PROTECTED, *self.protected, *extra):
            if g not in out:
                out.append(g)
        return out


class Violation(BaseModel):
    model_config = ConfigDict(frozen=True)

    rule: Rule
    path: str = ""
    reason: str

    def __str__(self) -> str:
        return self.reason


class PolicyResult(BaseModel):
    violations: list[Violation] = Field(default_factory=list)
    files: list[str] = Field(default_factory=list)
    lines_added: int = 0
    lines_removed: int = 0

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def changed_lines(self) -> int:
        return self.lines_added + self.lines_removed

    def reason(self) -> str:
        """All violations as one line, for a verdict's reason and the ledger."""
        return "; ".join(v.reason for v in self.violations)


@functools.lru_cache(maxsize=512)
def _spec(globs: tuple[str, ...]) -> tuple[GitIgnoreSpec, tuple[str, ...]]:
    """The compiled list and the globs it holds (blank ones and comments are not
    patterns, so they are left out to keep the indexes aligned)."""
    kept = tuple(g for g in globs if g.strip() and not g.strip().startswith("#"))
    lines = [g.strip().removeprefix("./") for g in kept]
    return GitIgnoreSpec.from_lines(lines), kept


def matches_any(path: str, globs: Iterable[str]) -> str | None:
    """The glob that decides that ``path`` matches the list (the last matching
    one, gitignore's rule), or None when the list does not match it (no glob
    does, or the last one that does is a ``!`` negation)."""
    spec, kept = _spec(tuple(globs))
    if not kept:
        return None
    res = spec.check_file(path)
    return kept[res.index] if res.include and res.index is not None else None


def glob_match(path: str, glob: str) -> bool:
    """True when ``path`` matches ``glob``; a glob naming a directory (``bench``
    or ``bench/``) matches everything under it too."""
    return matches_any(path, (glob,)) is not None


def _strip_prefix(name: str | None) -> str | None:
    if name is None:
        return None
    name = name.strip()
    if name.startswith('"') and name.endswith('"'):
        name = name[1:-1]
    if name == "/dev/null":
        return None
    if name.startswith(("a/", "b/")):
        return name[2:]
    return name


def _escape_reason(path: str) -> str | None:
    if not path:
        return "empty path"
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        return "absolute path"
    if "\\" in path:
        return "backslash in path"
    parts = path.split("/")
    if ".." in parts:
        return "'..' in path"
    if any(p in ("", ".") for p in parts):
        return "empty or '.' path segment"
    if parts[0] == ".git" or ".git" in parts:
        return "path inside .git"
    return None


def _modes(info: list[str]) -> dict[str, str]:
    modes: dict[str, str] = {}
    for line in info:
        for key in ("old mode", "new mode", "new file mode", "deleted file mode"):
            if line.startswith(key + " "):
                modes[key] = line[len(key) + 1 :].strip()
        m = re.match(r"^index [0-9a-f]+\.\.[0-9a-f]+ (\d{6})$", line.strip())
        if m:
            modes["index"] = m.group(1)
    return modes


def _diff_git_paths(info: list[str]) -> list[str]:
    for line in info:
        if line.startswith("diff --git "):
            rest = line[len("diff --git ") :].strip()
            m = re.match(r'^(".*?"|\S+) (".*?"|\S+)$', rest)
            if m:
                return [p for p in (_strip_prefix(m.group(1)), _strip_prefix(m.group(2))) if p]
    return []


def check_diff(
    diff_text: str,
    policy: EditPolicy,
    *,
    extra_protected: Iterable[str] = (),
) -> PolicyResult:
    """Check a unified diff against ``policy``; never raises."""
    from unidiff import PatchSet
    from unidiff.errors import UnidiffParseError

    result = PolicyResult()
    if not diff_text.strip():
        return result
    try:
        patch = PatchSet(diff_text)
    except (UnidiffParseError, Exception) as exc:  # noqa: BLE001 - any parse failure is a violation
        result.violations.append(
            Violation(rule="parse", reason=f"the diff cannot be parsed: {exc}")
        )
        return result

    extra_protected = tuple(extra_protected)  # read once per path below
    for pf in patch:
        info = list(pf.patch_info or [])
        names = [
            p
            for p in (_strip_prefix(pf.source_file), _strip_prefix(pf.target_file))
            if p is not None
        ]
        names += _diff_git_paths(info)
        paths = list(dict.fromkeys(names)) or [pf.path]
        shown = paths[-1]
        result.files.append(shown)
        result.lines_added += pf.added
        result.lines_removed += pf.removed

        escaped = False
        for p in paths:
            why = _escape_reason(p)
            if why:
                escaped = True
                result.violations.append(
                    Violation(rule="escape", path=p, reason=f"{p}: path escapes the repository ({why})")
                )
        if escaped:
            continue
        for p in paths:
            g = _protected_by(p, policy, extra_protected)
            if g:
                result.violations.append(
                    Violation(rule="protected", path=p, reason=f"{p}: protected path (matches '{g}')")
                )
            elif not matches_any(p, policy.editable):
                result.violations.append(
                    Violation(
                        rule="not_editable",
                        path=p,
                        reason=f"{p}: not editable (editable: {', '.join(policy.editable)})",
                    )
                )
            elif policy.narrow and not matches_any(p, policy.narrow):
                result.violations.append(
                    Violation(
                        rule="not_editable",
                        path=p,
                        reason=f"{p}: outside the proposal's editable paths ({', '.join(policy.narrow)})",
                    )
                )
        if pf.is_binary_file or any(line.startswith("GIT binary patch") for line in info):
            result.violations.append(
                Violation(rule="binary", path=shown, reason=f"{shown}: binary file")
            )
        modes = _modes(info)
        if "120000" in modes.values():
            result.violations.append(
                Violation(rule="symlink", path=shown, reason=f"{shown}: symbolic link")
            )
        elif "160000" in modes.values():
            result.violations.append(
                Violation(rule="mode", path=shown, reason=f"{shown}: submodule change")
            )
        elif "old mode" in modes or "new mode" in modes:
            result.violations.append(
                Violation(
                    rule="mode",
                    path=shown,
                    reason=f"{shown}: mode change {modes.get('old mode', '?')} -> {modes.get('new mode', '?')}",
                )
            )
        elif modes.get("new file mode", "100644") != "100644":
            result.violations.append(
                Violation(
                    rule="mode",
                    path=shown,
                    reason=f"{shown}: new file with mode {modes['new file mode']} (only 100644 allowed)",
                )
            )

    if result.changed_lines > policy.max_changed_lines:
        result.violations.append(
            Violation(
                rule="size",
                reason=(
                    f"{result.changed_lines} changed lines (+{result.lines_added} -{result.lines_removed}) "
                    f"exceed the cap of {policy.max_changed_lines}"
                ),
            )
        )
    return result


def _protected_by(path: str, policy: EditPolicy, extra: Iterable[str]) -> str | None:
    """The protected glob ``path`` matches. A ``!`` negation acts only inside the
    repo config's own ``protected`` list: it never un-protects ``.rsi/**``,
    ``.github/**`` or a file a benchmark command names."""
    own = set(policy.protected)
    fixed = [*ALWAYS_PROTECTED, *(g for g in extra if g not in own and not g.startswith("!"))]
    return matches_any(path, fixed) or matches_any(path, policy.protected)


def paths_named_by(command: str) -> list[str]:
    """Repository paths a benchmark command names (``python bench/tts.py -x``
    -> ``bench/tts.py``): they are protected so an agent cannot edit the
    benchmark that judges it."""
    import shlex

    try:
        tokens = shlex.split(command)
    except ValueError:
        tokens = command.split()
    out = []
    for tok in tokens:
        if tok.startswith(("-", "/")) or "=" in tok:
            continue
        if re.search(r"\.(py|sh|bash|toml|json|yaml|yml|txt|cfg|ini)$", tok) or (
            "/" in tok and not tok.startswith(("http:", "https:"))
        ):
            tok = tok.removeprefix("./")
            if _escape_reason(tok) is None and tok not in out:
                out.append(tok)
    return out
