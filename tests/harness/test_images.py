"""harness.images: what goes into the sandbox's images, and their tags."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import images

ROOT = Path(__file__).resolve().parents[2]


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    for pkg in images.PACKAGES:
        (root / pkg).mkdir(parents=True)
        (root / pkg / "__init__.py").write_text(f"# {pkg}\n")
    (root / "harness" / "templates").mkdir()
    (root / "harness" / "templates" / "rsi-job-caller.yml").write_text("on: push\n")
    return root


def test_only_the_packages_code_and_data_go_into_the_runtime_image(tmp_path: Path):
    """The bot's state next to the checkout, a key dropped into a package, a
    cache or a link out of the tree: none of it is image content."""
    root = _tree(tmp_path)
    (root / "rsi-app").mkdir()
    (root / "rsi-app" / "app.private-key.pem").write_text("-----BEGIN RSA PRIVATE KEY-----\n")
    (root / "rsi-bot.db").write_bytes(b"SQLite format 3\0")
    (root / "harness" / "app.private-key.pem").write_text("-----BEGIN RSA PRIVATE KEY-----\n")
    (root / "harness" / "rsi-bot.db").write_bytes(b"SQLite format 3\0")
    (root / "harness" / "__pycache__").mkdir()
    (root / "harness" / "__pycache__" / "x.py").write_text("")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.py").write_text("KEY = 'x'\n")
    (root / "harness" / "linked.py").symlink_to(outside / "secret.py")
    (root / "verifier" / "linked_dir").symlink_to(outside)
    got = {str(p) for p in images.source_files(root)}
    assert got == {"bot/__init__.py", "harness/__init__.py", "verifier/__init__.py", "kernels/__init__.py",
                   "harness/templates/rsi-job-caller.yml"}


def test_tags_are_digests_of_their_inputs(tmp_path: Path):
    root = _tree(tmp_path)
    py = images.python_tag("sha256:aaa", ("pydantic==2.0",))
    assert py.startswith(images.PYTHON_REPO + ":") and len(py.split(":")[1]) == 16
    assert py == images.python_tag("sha256:aaa", ("pydantic==2.0",))
    assert py != images.python_tag("sha256:bbb", ("pydantic==2.0",))  # another base image
    assert py != images.python_tag("sha256:aaa", ("pydantic==2.1",))  # another pin
    tag = images.runtime_tag(py, root)
    assert tag == images.runtime_tag(py, root) and tag.startswith(images.RUNTIME_REPO + ":")
    (root / "harness" / "__init__.py").write_text("# changed\n")
    assert images.runtime_tag(py, root) != tag  # a changed file is a new image, never a stale one
    assert images.runtime_tag(images.python_tag("sha256:bbb", ("pydantic==2.0",)), root) != \
        images.runtime_tag(py, root)


@pytest.mark.torch
def test_runtime_pins_are_this_venvs_versions_of_rsi_bots_closure():
    import importlib.metadata as md

    pins = dict(p.split("==") for p in images.runtime_pins())
    for name in ("pydantic", "numpy", "httpx", "torch"):
        assert pins[name] == md.version(name)
    assert "rsi-bot" not in pins and "pytest" not in pins  # not the project, not its dev extras


def test_reading_the_pins_leaves_setuptools_importable_in_this_process():
    """The pins were read with pip's vendored packaging in the bot's own process:
    importing pip there made setuptools' distutils shim stand down, and torch's
    inductor (which imports setuptools) then failed in the same process with an
    AssertionError about distutils/core.py. A fresh process, so no other test's
    imports decide it."""
    code = ("from harness import images; images.runtime_pins(); import sys; "
            "assert not any(m == 'pip' or m.startswith('pip.') for m in sys.modules), 'pip imported'; "
            "import setuptools, distutils.core; "
            "assert '_distutils' in distutils.core.__file__, distutils.core.__file__; print('ok')")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert got.returncode == 0 and got.stdout.strip() == "ok", got.stderr[-2000:]


def test_a_profiles_own_image_is_used_as_it_is():
    assert images.sandbox_image("registry.example/cuda-stack:12.4") == "registry.example/cuda-stack:12.4"


def test_the_agents_pins_must_be_there(tmp_path: Path):
    with pytest.raises(images.ImageError, match="agents' pins are not here"):
        images.agents_tag("rsi-bot/python:x", tmp_path)


@pytest.mark.docker
def test_the_runtime_image_is_built_from_its_inputs_and_holds_python(tmp_path: Path):
    """Built in seconds on the python image, found again by its tag; Debian's
    Python with rsi-bot's dependencies and the copied packages, nothing else."""
    import subprocess

    root = tmp_path / "checkout"
    for pkg in images.PACKAGES:
        shutil.copytree(ROOT / pkg, root / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "harness" / "rsi30_marker.py").write_text("MARK = 'built from this tree'\n")
    python = images.python_tag(images._base_id())
    tag = images.build_runtime(python, root=root)
    try:
        assert tag == images.runtime_tag(python, root) and images.image_id(tag)
        assert images.build_runtime(python, root=root) == tag  # found, not built again
        out = subprocess.run(["docker", "run", "--rm", "--network", "none", "--read-only", "-u", "1000:1000",
                              tag, "python3", "-c",
                              "import sys, harness.rsi30_marker as m, pydantic, numpy; print(sys.version_info[:2], m.MARK)"],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "(3, 11) built from this tree"
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)


def _agents_checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    shutil.copytree(ROOT / "scripts" / "agents-constraints", root / "scripts" / "agents-constraints")
    return root


def test_the_agents_tag_covers_the_npm_agents_pins(tmp_path: Path):
    """claude-code and codex are image content: a new pin of either (or of its
    binary's path) is a new agents image, never the old one found again."""
    root = _agents_checkout(tmp_path)
    tag = images.agents_tag("rsi-bot/python:x", root)
    assert tag == images.agents_tag("rsi-bot/python:x", root)
    npm = root / "scripts" / "agents-constraints" / "npm.txt"
    npm.write_text(npm.read_text().replace("@openai/codex@0.171.0", "@openai/codex@0.172.0"))
    assert images.agents_tag("rsi-bot/python:x", root) != tag
    assert images.npm_pins(root)["codex"][0] == "@openai/codex@0.172.0"
    npm.unlink()
    with pytest.raises(images.ImageError, match="npm agents' pins are not here"):
        images.agents_tag("rsi-bot/python:x", root)


@pytest.mark.parametrize("line, why", [
    ("claude-code @anthropic-ai/claude-code@2.1.332 claude", "a line is 'preset npm-spec"),
    ("claude-code @anthropic-ai/claude-code@2.1.332 claude ../../../etc/passwd", "a line is 'preset npm-spec"),
    ("claude-code @anthropic-ai/claude-code@2.1.332 claude /bin/sh", "a line is 'preset npm-spec"),
    ("claude-code @anthropic-ai/claude-code claude x/claude", "a line is 'preset npm-spec"),
])
def test_a_bad_npm_pin_is_refused_by_name(tmp_path: Path, line: str, why: str):
    root = _agents_checkout(tmp_path)
    npm = root / "scripts" / "agents-constraints" / "npm.txt"
    npm.write_text("\n".join(ln for ln in npm.read_text().splitlines() if not ln.startswith("claude-code"))
                   + f"\n{line}\n")
    with pytest.raises(images.ImageError, match=why):
        images.npm_pins(root)


def test_the_npm_binaries_come_only_from_setup_agents_install_of_the_pin(tmp_path: Path, monkeypatch):
    """The agents image takes each binary from scripts/setup-agents.sh's dir
    only when its stamp is this pin (npm checked it against the registry's
    integrity hash); a link where the binary should be, a stale install or
    none at all is an error saying what to run."""
    root = _agents_checkout(tmp_path)
    pins = images.npm_pins(root)
    home = tmp_path / "agents"
    monkeypatch.setenv("RSI_AGENTS_VENV", str(home))
    for preset, (spec, _, binary) in pins.items():
        src = home / preset / "node_modules" / binary
        src.parent.mkdir(parents=True)
        src.write_text(f"#!/bin/sh\necho {spec}\n")
        src.chmod(0o700)
        (home / preset / ".rsi-installed").write_text(f"{spec} {binary}\n")
    checks = images._npm_binaries(tmp_path / "ctx", root)
    for preset, (spec, exe, _) in pins.items():
        got = tmp_path / "ctx" / preset / "bin" / exe
        assert got.read_text() == f"#!/bin/sh\necho {spec}\n" and got.stat().st_mode & 0o7777 == 0o755
    assert any("grep -qwF 2.1.332" in c and "/opt/rsi/agents/claude-code/bin/claude --version" in c
               for c in checks), checks
    (home / "codex" / ".rsi-installed").write_text("@openai/codex@0.1.0 x\n")  # another version installed
    with pytest.raises(images.ImageError, match=r"codex \(@openai/codex@0.171.0\) is not installed .*setup-agents"):
        images._npm_binaries(tmp_path / "ctx2", root)
    (home / "codex" / ".rsi-installed").write_text(f"{pins['codex'][0]} {pins['codex'][2]}\n")
    binary = home / "codex" / "node_modules" / pins["codex"][2]
    binary.unlink()
    binary.symlink_to("/bin/sh")
    with pytest.raises(images.ImageError, match="codex"):
        images._npm_binaries(tmp_path / "ctx3", root)
