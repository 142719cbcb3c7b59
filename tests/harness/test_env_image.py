"""The target's own environment (issue 30): a runner profile's ``environment``
(a requirements file or a Dockerfile of the repository, read from B0's tree)
becomes an image built once on the runtime image and found again by a digest
of what it was built from; the verifier's containers run in it; nothing of
the host is mounted, and a candidate's copy of the declaration is never read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness import images
from harness.sections import RunnerProfile, environment_kind
from harness.spec import build_task, load_task

from .target import CONFIG, commit_all, make_target, wheel

ENV_CONFIG = "\n[runner.profiles.cpu]\nenvironment = \"{decl}\"\n"
DOCKERFILE = "ARG RSI_RUNTIME\nFROM ${RSI_RUNTIME}\nCOPY marker.txt /opt/rsi-env-marker.txt\n"


def requirements_tree(root: Path, mark: str) -> Path:
    (root / "bench").mkdir(parents=True, exist_ok=True)
    wheel(root / "bench", mark)
    (root / "bench" / "requirements.txt").write_text("./rsienvdep-1.0-py3-none-any.whl  # the target's own\n")
    return root


def run_in(tag: str, code: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "run", "--rm", "--network", "none", "--read-only", "-u", "1000:1000",
                           tag, "python3", "-c", code], capture_output=True, text=True, timeout=120)


def rmi(*tags: str) -> None:
    subprocess.run(["docker", "rmi", "-f", *tags], capture_output=True)


# ----------------------------------------------------------------- the declaration


@pytest.mark.parametrize("decl, kind", [
    ("bench/requirements.txt", "requirements"), ("requirements-lock.txt", "requirements"),
    ("Dockerfile", "dockerfile"), ("docker/bench.Dockerfile", "dockerfile"), ("ci/Dockerfile.bench", "dockerfile"),
])
def test_an_environment_is_a_requirements_file_or_a_dockerfile_by_its_name(decl: str, kind: str):
    assert environment_kind(decl) == kind
    assert RunnerProfile(environment=decl).environment == decl


@pytest.mark.parametrize("decl, why", [
    ("../outside/requirements.txt", "without '..'"),
    ("/etc/requirements.txt", "relative to its root"),
    ("bench/./requirements.txt", "without '..'"),
    ("bench/setup.cfg", "name a requirements or lock file"),
    ("-rfoo.txt", "relative to its root"),
])
def test_a_bad_environment_is_a_config_error_that_says_what_to_write(decl: str, why: str):
    with pytest.raises(ValidationError) as err:
        RunnerProfile(environment=decl)
    assert why in str(err.value)


def test_the_environment_file_is_protected_like_the_measuring_code(tmp_path: Path):
    spec = build_task(CONFIG.replace("{python}", "python3") + ENV_CONFIG.format(decl="env/bench.Dockerfile"),
                      "", "t")
    assert "env/bench.Dockerfile" in spec.protected_paths()
    plain = build_task(CONFIG.replace("{python}", "python3"), "", "t")
    assert not any("Dockerfile" in p for p in plain.protected_paths())


def test_a_declaration_that_leaves_the_tree_or_is_missing_is_refused_by_name(tmp_path: Path):
    tree = tmp_path / "b0"
    (tree / "bench").mkdir(parents=True)
    outside = tmp_path / "host-secrets.txt"
    outside.write_text("-----BEGIN RSA PRIVATE KEY-----\n")
    (tree / "bench" / "requirements.txt").symlink_to(outside)
    with pytest.raises(images.ImageError, match="is a symbolic link"):
        images.target_image("bench/requirements.txt", tree, "unused")
    (tree / "linked").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(images.ImageError, match="linked is a symbolic link"):
        images.target_image("linked/host-secrets.txt", tree, "unused")
    with pytest.raises(images.ImageError, match="no such file in B0's tree"):
        images.target_image("bench/missing.txt", tree, "unused")


def test_the_requirements_digest_covers_every_file_of_the_tree_they_name(tmp_path: Path):
    """A rebuilt local wheel under the same requirements text is another
    image, never the stale one; a name outside the repository is refused."""
    tree = requirements_tree(tmp_path / "b0", "one")
    (tree / "bench" / "requirements.txt").write_text(
        "./rsienvdep-1.0-py3-none-any.whl\n-r more.txt\n")
    (tree / "bench" / "more.txt").write_text("-e ./pkg  # editable\nnumpy==1.26.4\n")
    (tree / "bench" / "pkg").mkdir()
    (tree / "bench" / "pkg" / "setup.py").write_text("# one\n")

    def digest():
        req = (tree / "bench" / "requirements.txt").resolve()
        return images._digest(*images._requirements_digest(req, tree.resolve()))

    first = digest()
    assert digest() == first
    wheel(tree / "bench", "two")  # the same file name, other content
    assert digest() != first
    second = digest()
    (tree / "bench" / "pkg" / "setup.py").write_text("# two\n")  # a folder named by an included file
    assert digest() != second
    (tree / "bench" / "more.txt").write_text("../../outside.whl\n")
    with pytest.raises(images.ImageError, match="outside the repository"):
        digest()


# ------------------------------------------------------------------ built for real


@pytest.mark.docker
def test_a_requirements_environment_is_built_on_the_runtime_image_and_found_again(tmp_path: Path, monkeypatch):
    on = images.ensure_runtime()
    tree = requirements_tree(tmp_path / "b0", "from the target's environment")
    tag = images.target_image("bench/requirements.txt", tree, on)
    try:
        assert tag.startswith(images.ENV_REPO + ":") and images.image_id(tag)
        out = run_in(tag, "import rsienvdep, verifier.probe, numpy; print(rsienvdep.MARK)")
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "from the target's environment"
        assert run_in(on, "import rsienvdep").returncode != 0  # the runtime image itself is untouched

        def no_build(*a, **kw):
            raise AssertionError("built again")

        monkeypatch.setattr(images, "_build", no_build)
        assert images.target_image("bench/requirements.txt", tree, on) == tag  # found by its digest
        other = requirements_tree(tmp_path / "other", "changed")
        assert images.env_tag("bench/requirements.txt", other, on) != tag  # another content, another image
    finally:
        rmi(tag)


@pytest.mark.docker
def test_a_dockerfile_environment_is_built_from_its_folder_on_the_runtime_image(tmp_path: Path):
    on = images.ensure_runtime()
    tree = tmp_path / "b0"
    (tree / "env").mkdir(parents=True)
    (tree / "env" / "bench.Dockerfile").write_text(DOCKERFILE)
    (tree / "env" / "marker.txt").write_text("built from the maintainers' Dockerfile\n")
    tag = images.target_image("env/bench.Dockerfile", tree, on)
    try:
        out = run_in(tag, "import verifier.probe; print(open('/opt/rsi-env-marker.txt').read().strip())")
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "built from the maintainers' Dockerfile"
        (tree / "env" / "marker.txt").write_text("changed\n")
        assert images.env_tag("env/bench.Dockerfile", tree, on) != tag  # the folder is in the digest
    finally:
        rmi(tag)


@pytest.mark.docker
def test_a_dockerfile_that_cannot_run_the_verifiers_roles_is_refused_with_the_fix(tmp_path: Path):
    on = images.ensure_runtime()
    tree = tmp_path / "b0"
    tree.mkdir()
    (tree / "Dockerfile").write_text(f"FROM {images.BASE_IMAGE}\nRUN true\n")  # no Python: not on the runtime
    tag = images.env_tag("Dockerfile", tree, on)
    with pytest.raises(images.ImageError, match=r"ARG RSI_RUNTIME.*FROM \$\{RSI_RUNTIME\}"):
        images.target_image("Dockerfile", tree, on)
    assert images.image_id(tag) is None  # not kept: the next try builds again, and says the same


FAKE_VERIFIER = """#!/bin/sh
cp isolation.json "{log}/isolation.json"
exit 3
"""


@pytest.mark.docker
def test_the_verifiers_containers_run_in_the_environment_of_b0_never_the_candidates(tmp_path: Path):
    """verify(): the image comes from B0's declaration; a candidate that
    rewrote its copy (a Dockerfile of its own) changes nothing."""
    from harness.verification import SandboxVerifier
    from harness.workspace import Workspace

    repo = make_target(tmp_path, python="python3",
                       config=CONFIG + ENV_CONFIG.format(decl="bench/requirements.txt"))
    requirements_tree(repo, "B0's")
    commit_all(repo, "the target's environment")
    spec = load_task(repo, None, "t")
    ws = Workspace(repo, tmp_path / "wts")
    b0 = ws.export("b0", "main", for_sandbox=True)
    cand = ws.export("cand", "main", for_sandbox=True)
    requirements_tree(cand, "the candidate's")
    log = tmp_path / "log"
    log.mkdir()
    script = tmp_path / "fake-python"
    script.write_text(FAKE_VERIFIER.format(log=log))
    script.chmod(0o755)
    v = SandboxVerifier(work_root=tmp_path, python=str(script), environ={"PATH": os.environ["PATH"]})
    v.verify(b0, cand, spec, b0=None, shas={}, calibration=None)
    image = json.loads((log / "isolation.json").read_text())["image"]
    try:
        assert image == images.env_tag("bench/requirements.txt", b0, images.ensure_runtime())
        out = run_in(image, "import rsienvdep; print(rsienvdep.MARK)")
        assert out.stdout.strip() == "B0's", out.stderr
        (b0 / "bench" / "requirements.txt").unlink()  # a B0 without its declaration: an error verdict, by name
        verdict = v.verify(b0, cand, spec, b0=None, shas={}, calibration=None)
        assert verdict.decision == "error" and "no such file in B0's tree" in verdict.reason
    finally:
        rmi(image)


@pytest.mark.docker
def test_a_calibration_measures_the_benchmark_in_the_targets_environment(tmp_path: Path):
    """The real verifier, each run in its own container of the environment
    image: the benchmark imports what only the environment holds."""
    from harness.verification import SandboxVerifier
    from harness.workspace import Workspace

    repo = make_target(tmp_path, python="python3",
                       config=CONFIG + ENV_CONFIG.format(decl="bench/requirements.txt"))
    requirements_tree(repo, "env")
    bench = repo / "bench" / "run.py"
    bench.write_text(bench.read_text().replace("from app import core\n", "from app import core\nimport rsienvdep\n"))
    commit_all(repo, "the benchmark needs the target's environment")
    spec = load_task(repo, None, "t")
    b0 = Workspace(repo, tmp_path / "wts").export("b0", "main", for_sandbox=True)
    v = SandboxVerifier(environ={"PATH": os.environ["PATH"]}, python=sys.executable)
    tag = images.env_tag("bench/requirements.txt", b0, images.ensure_runtime())
    try:
        cal = v.calibrate(b0, spec)
        assert cal.pairs == 3, cal
    finally:
        rmi(tag)
