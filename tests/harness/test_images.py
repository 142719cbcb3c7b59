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
