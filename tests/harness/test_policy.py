"""Edit policy: each violation with its exact reason, on real git diffs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from harness.policy import EditPolicy, check_diff, glob_match, paths_named_by
from harness.workspace import Workspace

from .target import sh


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "r"
    (r / "app").mkdir(parents=True)
    (r / "bench").mkdir()
    (r / "app" / "a.py").write_text("x = 1\n")
    (r / "bench" / "run.py").write_text("print(1)\n")
    (r / "run.sh").write_text("echo hi\n")
    sh(r, "init", "-q", "-b", "main")
    sh(r, "add", "-A")
    sh(r, "commit", "-q", "-m", "init")
    return r


POLICY = EditPolicy(editable=["app/**", "run.sh"], protected=["bench/**"], max_changed_lines=10)


def diff_of(repo: Path) -> str:
    """The candidate's way: the edited tree exported as plain files, committed
    in a private index, and the committed diff."""
    ws = Workspace(repo, repo.parent / "wt")
    dest, _ = ws.export_candidate(repo, "taken")
    return ws.commit_candidate(dest, "main", "rsi/p/1", "policy test").diff


def test_clean_edit_passes(repo: Path):
    (repo / "app" / "a.py").write_text("x = 2\n")
    res = check_diff(diff_of(repo), POLICY)
    assert res.ok, res.violations
    assert res.files == ["app/a.py"] and res.lines_added == 1 and res.lines_removed == 1


def test_protected_path(repo: Path):
    (repo / "bench" / "run.py").write_text("print(2)\n")
    res = check_diff(diff_of(repo), POLICY)
    assert [v.rule for v in res.violations] == ["protected"]
    assert res.violations[0].reason == "bench/run.py: protected path (matches 'bench/**')"


@pytest.mark.parametrize("path", [".rsi/config.toml", ".github/workflows/ci.yml"])
def test_always_protected(repo: Path, path: str):
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text("x\n")
    res = check_diff(diff_of(repo), EditPolicy())
    assert [v.rule for v in res.violations] == ["protected"]
    assert path in res.violations[0].reason


def test_not_editable(repo: Path):
    (repo / "README.md").write_text("hello\n")
    res = check_diff(diff_of(repo), POLICY)
    assert [v.rule for v in res.violations] == ["not_editable"]
    assert res.violations[0].reason == "README.md: not editable (editable: app/**, run.sh)"


def test_proposal_narrowing(repo: Path):
    (repo / "run.sh").write_text("echo bye\n")
    pol = POLICY.model_copy(update={"narrow": ["app/**"]})
    res = check_diff(diff_of(repo), pol)
    assert [v.rule for v in res.violations] == ["not_editable"]
    assert "outside the proposal's editable paths" in res.violations[0].reason


def test_symlink(repo: Path):
    os.symlink("/etc/passwd", repo / "app" / "link")
    res = check_diff(diff_of(repo), POLICY)
    assert [v.rule for v in res.violations] == ["symlink"]
    assert res.violations[0].reason == "app/link: symbolic link"


def test_binary(repo: Path):
    (repo / "app" / "blob.bin").write_bytes(bytes(range(256)) * 4)
    res = check_diff(diff_of(repo), POLICY)
    assert [v.rule for v in res.violations] == ["binary"]
    assert res.violations[0].reason == "app/blob.bin: binary file"


def test_mode_change(repo: Path):
    os.chmod(repo / "run.sh", 0o755)
    res = check_diff(diff_of(repo), POLICY)
    assert [v.rule for v in res.violations] == ["mode"]
    assert res.violations[0].reason == "run.sh: mode change 100644 -> 100755"


def test_new_executable_file(repo: Path):
    (repo / "app" / "tool.sh").write_text("echo\n")
    os.chmod(repo / "app" / "tool.sh", 0o755)
    res = check_diff(diff_of(repo), POLICY)
    assert [v.rule for v in res.violations] == ["mode"]
    assert "new file with mode 100755" in res.violations[0].reason


def test_oversize(repo: Path):
    (repo / "app" / "a.py").write_text("".join(f"y{i} = {i}\n" for i in range(12)))
    res = check_diff(diff_of(repo), POLICY)
    assert [v.rule for v in res.violations] == ["size"]
    assert res.violations[0].reason == "13 changed lines (+12 -1) exceed the cap of 10"


ESCAPE = """\
diff --git a/../outside.py b/../outside.py
new file mode 100644
--- /dev/null
+++ b/../outside.py
@@ -0,0 +1 @@
+evil = 1
"""

ABSOLUTE = """\
--- /dev/null
+++ /etc/cron.d/evil
@@ -0,0 +1 @@
+* * * * * root sh
"""


def test_path_escape():
    res = check_diff(ESCAPE, POLICY)
    assert {v.rule for v in res.violations} == {"escape"}
    assert res.violations[0].reason == "../outside.py: path escapes the repository ('..' in path)"
    res = check_diff(ABSOLUTE, POLICY)
    assert [v.rule for v in res.violations] == ["escape"]
    assert "absolute path" in res.violations[0].reason


def test_escape_patch_does_not_apply_with_git(repo: Path, tmp_path: Path):
    """The policy is the first line; git refuses it too."""
    p = tmp_path / "e.patch"
    p.write_text(ESCAPE)
    proc = subprocess.run(["git", "apply", str(p)], cwd=repo, capture_output=True, text=True)
    assert proc.returncode != 0


def test_unparseable():
    res = check_diff("@@ -1 +1 @@\n-x\n+y\n", POLICY)
    assert [v.rule for v in res.violations] == ["parse"]


def test_several_violations_all_reported(repo: Path):
    (repo / "bench" / "run.py").write_text("print(3)\n")
    os.symlink("a.py", repo / "app" / "l")
    res = check_diff(diff_of(repo), POLICY)
    assert sorted(v.rule for v in res.violations) == ["protected", "symlink"]
    assert "bench/run.py" in res.reason() and "app/l" in res.reason()


def test_globs():
    assert glob_match("app/x/y.py", "app/**")
    assert glob_match("y.py", "**/y.py") and glob_match("a/b/y.py", "**/y.py")
    assert not glob_match("app2/x.py", "app/**")
    assert glob_match("bench/x.py", "bench")
    assert not glob_match("app/x/y.py", "app/*.py")


def test_benchmark_command_paths():
    assert paths_named_by("python bench/tts.py --concurrency 4") == ["bench/tts.py"]
    assert paths_named_by("sh ./scripts/run.sh -n 3 X=1") == ["scripts/run.sh"]
    assert paths_named_by("/usr/bin/python -m bench") == []


# ---------------------------------------------------------- gitignore globs (pathspec)


def _diff_of(path: str) -> str:
    return (f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n"
            "@@ -1 +1 @@\n-a\n+b\n")


def test_globs_have_gitignore_semantics():
    assert glob_match("src/k1.py", "src/k[0-9].py") and not glob_match("src/kx.py", "src/k[0-9].py")
    assert glob_match("a/b/c.py", "*.py")          # no slash: any depth
    assert not glob_match("a/c.py", "/c.py")       # leading slash: the root only
    assert glob_match("bench/a/b.json", "bench/")  # a directory: all under it


def test_negation_in_editable():
    pol = EditPolicy(editable=["src/**", "!src/vendored/**"])
    assert check_diff(_diff_of("src/app.py"), pol).ok
    res = check_diff(_diff_of("src/vendored/lib.py"), pol)
    assert [v.rule for v in res.violations] == ["not_editable"]


def test_negation_never_unprotects_what_is_always_protected():
    pol = EditPolicy(protected=["bench/**", "!bench/gen.py", "!.rsi/**", "!.github/**"])
    assert check_diff(_diff_of("bench/gen.py"), pol).ok
    assert not check_diff(_diff_of("bench/run.py"), pol).ok
    for path in (".rsi/config.toml", ".github/workflows/x.yml"):
        assert [v.rule for v in check_diff(_diff_of(path), pol).violations] == ["protected"]
    named = check_diff(_diff_of("bench/gen.py"), pol, extra_protected=["bench/gen.py"])
    assert [v.rule for v in named.violations] == ["protected"]


def test_a_proposal_cannot_negate_protected_paths():
    from harness.spec import SpecError, build_task

    config = ('[benchmarks.b]\ncommand = "python b.py"\n[benchmarks.b.metrics]\nq = "higher"\n'
              '[objective]\nbenchmark = "b"\nmetric = "q"\n')
    body = '```toml\n[policy]\nprotected = ["!b.py"]\n```\n'
    try:
        build_task(config, body, "t")
    except SpecError as exc:
        assert any("un-protect" in e for e in exc.errors)
    else:
        raise AssertionError("a '!' protected glob from a proposal was accepted")
