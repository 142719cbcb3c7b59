"""Images built for the sandbox: a container gets its Python from its image,
never from the host.

Nothing of the host (this checkout, its venv, the bot's state next to it) is
mounted into an agent, verifier or gateway container; what a run needs is image
content, built here once and found again by a tag that is a digest of its
inputs (a changed input is a new tag, so a stale image is never used):

* ``rsi-bot/python:<digest>``: the debootstrap base (``rsi-bot/base:bookworm``,
  ``scripts/setup-docker.sh``) plus Debian's Python 3.11 (the ``.deb`` files of
  :data:`DEBS` and what they need beyond the base, fetched on the host with
  ``apt-get download``) plus the runtime dependencies of rsi-bot with its
  ``torch`` extra, at the exact versions installed in this venv, as wheels
  fetched on the host (``pip download``; torch from the local wheel dir) and
  installed in the image by ``pip --no-index`` (the build has no network:
  ``docker build --network none``). Its digest: the base image's id, the
  package list, the pins and the Dockerfile. Minutes to build, once
  (``scripts/build-images.sh``, run by ``.ci/run``).
* ``rsi-bot/agents:<digest>``: that image plus the agent presets, each in
  ``/opt/rsi/agents/<preset>``: venvs of aider and mini-swe-agent (from wheels
  of the pins in ``scripts/agents-constraints/<preset>.txt``, built on the host)
  and the native binaries of claude-code and codex (pinned npm packages,
  ``scripts/agents-constraints/npm.txt``; fetched by ``scripts/setup-agents.sh``
  into ``$RSI_AGENTS_VENV/<preset>`` with npm's integrity check, and copied from
  there: no node in the image). Its digest: the python image's tag, the pins,
  this machine's architecture and the Dockerfile. The build checks each binary
  is the pinned version (``--version``, no network).
* ``rsi-bot/runtime:<digest>``: that image plus this checkout's packages
  (``bot``, ``harness``, ``verifier``, ``kernels``: their ``.py`` files and
  package data, nothing else of the checkout), byte-compiled. Its digest: the
  python image's tag and every copied file. Seconds to build: made on first use
  (:func:`ensure_runtime`) when the python image is there.

:func:`sandbox_image` is what every container of ours asks for its image: a
runner profile's own image (a CUDA or Ascend image with the user's stack,
which carries its own Python) as it is; the default base image, which has no
Python, becomes the runtime image. ``python -m harness.images build`` builds
both (``tag`` prints the runtime image's tag).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

BASE_IMAGE = os.environ.get("RSI_BASE_IMAGE", "rsi-bot/base:bookworm")
PYTHON_REPO = "rsi-bot/python"
RUNTIME_REPO = "rsi-bot/runtime"
AGENTS_REPO = "rsi-bot/agents"
AGENTS_ROOT = "/opt/rsi/agents"
"""Where the agents image holds each agent preset's venv (``<root>/<preset>``)."""
AGENTS = ("mini-swe-agent", "aider")
"""The presets with a venv of their own: ``scripts/agents-constraints/<preset>.txt`` pins all of it."""
NPM_AGENTS = ("claude-code", "codex")
"""The presets from npm: a native binary each, pinned in ``scripts/agents-constraints/npm.txt``."""
NPM_ARCH = {"x86_64": ("x64", "x86_64"), "aarch64": ("arm64", "aarch64"), "arm64": ("arm64", "aarch64")}
"""``uname -m`` -> the npm packages' ``{arch}`` and ``{march}`` (the only CPUs they are built for)."""
DEBS = ("python3", "python-is-python3", "python3-pip", "ca-certificates")
"""Debian packages of the python image (with what they depend on beyond the base)."""
EXTRAS = ("torch",)
"""rsi-bot's extras whose dependencies the image holds (torch: the demo's target and ``verifier.probe``)."""
PACKAGES = ("bot", "harness", "verifier", "kernels")
DATA_SUFFIXES = (".py", ".md", ".yml", ".json")
"""What of the packages is copied (their code and package data; see pyproject.toml)."""
SITE = "/usr/local/lib/python3.11/dist-packages"
ROOT = Path(__file__).resolve().parents[1]

PYTHON_DOCKERFILE = """FROM {base}
COPY debs/ /tmp/rsi-debs/
RUN DEBIAN_FRONTEND=noninteractive sh -e /tmp/rsi-debs/install.sh && rm -rf /tmp/rsi-debs
COPY wheels/ /tmp/rsi-wheels/
RUN python3 -m pip install --no-index --no-deps --break-system-packages --no-cache-dir \\
      --disable-pip-version-check -q /tmp/rsi-wheels/*.whl && rm -rf /tmp/rsi-wheels \\
 && python3 -c "import pydantic, numpy, torch"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
"""
AGENTS_DOCKERFILE = f"""FROM {{python}}
COPY agents/ /tmp/rsi-agents/
RUN for a in {' '.join(AGENTS)}; do python3 -m venv --without-pip {AGENTS_ROOT}/$a \\
      && python3 -m pip --python {AGENTS_ROOT}/$a/bin/python install -q --no-index --no-deps --no-cache-dir --disable-pip-version-check \\
         -r /tmp/rsi-agents/$a.txt --find-links /tmp/rsi-agents/wheels || exit 1; done \\
 && rm -rf /tmp/rsi-agents && chmod -R a+rX {AGENTS_ROOT} \\
 && {AGENTS_ROOT}/mini-swe-agent/bin/mini --help >/dev/null && {AGENTS_ROOT}/aider/bin/aider --help >/dev/null
COPY npm/ {AGENTS_ROOT}/
RUN @NPM_CHECKS@
"""
"""The venvs' step comes first and as it was (an image built before the npm
agents joined reuses its layers); the binaries are copied with their mode
(0755, root-owned) and only run: no layer rewrites them."""
NPM_CHECK = ("HOME=/tmp/rsi-home {root}/{preset}/bin/{exe} --version </dev/null | grep -qwF {version} "
             "|| {{ echo '{preset}: bin/{exe} is not version {version}' >&2; exit 1; }}")
RUNTIME_DOCKERFILE = f"""FROM {{python}}
COPY src/ {SITE}/
RUN python3 -m compileall -q {' '.join(f'{SITE}/{p}' for p in PACKAGES)} \\
 && python3 -c "import harness.gateway, verifier.probe"
"""


class ImageError(RuntimeError):
    """An image is missing and cannot be made here (the message says how to make it)."""


def cache_dir() -> Path:
    """Where fetched ``.deb`` files and wheels are kept between builds."""
    explicit = os.environ.get("RSI_IMAGE_CACHE")
    if explicit:
        return Path(explicit)
    ci = Path(os.environ.get("RSI_CI_CACHE", "/var/cache/rsi-ci"))
    if ci.is_dir() and os.access(ci, os.W_OK):
        return ci / "images"
    return Path.home() / ".cache" / "rsi-bot" / "images"


def _docker(*args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, **kw)


def image_id(tag: str) -> str | None:
    """The image's id, or None when the engine has no such image."""
    out = _docker("image", "inspect", "--format", "{{.Id}}", tag)
    return out.stdout.strip() if out.returncode == 0 else None


# Run in a child: importing pip (its vendored ``packaging``) in this process
# makes setuptools' distutils shim stand down for the rest of the process
# (``_distutils_hack.spec_for_pip``), and a later ``import setuptools`` (torch's
# inductor compiling a kernel) then fails on an assertion about distutils.
_PINS_CHILD = r"""
import importlib.metadata as md, json, sys
from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name

seen = set()
todo = [("rsi-bot", frozenset(sys.argv[1:]))]
while todo:
    name, extras = todo.pop()
    try:
        requires = md.distribution(name).requires or []
    except md.PackageNotFoundError:
        print(json.dumps({"missing": name, "root": name == "rsi-bot"}))
        sys.exit(0)
    for text in requires:
        req = Requirement(text)
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in (extras or {""})):
            continue
        key = (canonicalize_name(req.name), frozenset(req.extras))
        if key not in seen:
            seen.add(key)
            todo.append(key)
pins = []
for n in sorted({n for n, _ in seen}):
    try:
        pins.append(f"{n}=={md.version(n)}")
    except md.PackageNotFoundError:
        print(json.dumps({"missing": n, "root": False}))
        sys.exit(0)
print(json.dumps({"pins": pins}))
"""


@functools.lru_cache(maxsize=1)
def runtime_pins() -> tuple[str, ...]:
    """``name==version`` of every distribution rsi-bot (with :data:`EXTRAS`)
    needs at run time, as installed in this venv (the closure of its
    requirements, read with pip's own copy of ``packaging`` in a child process:
    pip is in every venv, packaging is no dependency of ours)."""
    got = subprocess.run([sys.executable, "-c", _PINS_CHILD, *EXTRAS], capture_output=True, text=True)
    try:
        out = json.loads(got.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise ImageError(f"could not read this venv's installed versions ({sys.executable}): "
                         f"{got.stderr.strip()[-500:] or 'no output'}; run make venv") from None
    if "missing" in out:
        if out["root"]:
            raise ImageError(f"{out['missing']} is not installed in this venv: run make venv")
        raise ImageError(f"{out['missing']} is not installed in this venv, and the sandbox's python image holds "
                         f"rsi-bot's dependencies with {', '.join(EXTRAS)} at this venv's versions: "
                         "run make venv")
    return tuple(out["pins"])


def source_files(root: Path = ROOT) -> list[Path]:
    """The files of :data:`PACKAGES` that go into the runtime image (relative to ``root``)."""
    out = []
    for pkg in PACKAGES:
        for p in sorted((root / pkg).rglob("*")):
            rel = p.relative_to(root)
            if (p.is_file() and p.suffix in DATA_SUFFIXES and "__pycache__" not in rel.parts
                    and not any((root / Path(*rel.parts[:i])).is_symlink() for i in range(1, len(rel.parts) + 1))):
                out.append(rel)  # never through a link
    return out


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()[:16]


def python_tag(base_id: str, pins: tuple[str, ...] = ()) -> str:
    """The python image's tag: a digest of the base image, the packages, the pins and the Dockerfile."""
    return f"{PYTHON_REPO}:{_digest(base_id, *DEBS, '--', *(pins or runtime_pins()), PYTHON_DOCKERFILE)}"


def runtime_tag(python: str, root: Path = ROOT) -> str:
    """The runtime image's tag: a digest of the python image's tag and every copied file."""
    parts: list[str | bytes] = [python, RUNTIME_DOCKERFILE]
    for rel in source_files(root):
        parts += [str(rel), (root / rel).read_bytes()]
    return f"{RUNTIME_REPO}:{_digest(*parts)}"


def _constraints(root: Path = ROOT) -> dict[str, str]:
    """Each agent preset's pins (``scripts/agents-constraints/<preset>.txt`` of a checkout)."""
    where = root / "scripts" / "agents-constraints"
    try:
        return {a: (where / f"{a}.txt").read_text() for a in AGENTS}
    except OSError as exc:
        raise ImageError(f"the agents' pins are not here ({where}: {exc.strerror}): the agents image is "
                         "built from a checkout of rsi-bot (scripts/build-images.sh)") from None


def agents_dir() -> Path:
    """Where ``scripts/setup-agents.sh`` put the agents on this host
    (``$RSI_AGENTS_VENV``, else the checkout's ``.agents-venv``): the npm
    agents' binaries are copied into the agents image from there."""
    explicit = os.environ.get("RSI_AGENTS_VENV")
    return Path(explicit) if explicit else ROOT / ".agents-venv"


def machine() -> str:
    return os.uname().machine


def npm_pins(root: Path = ROOT) -> dict[str, tuple[str, str, str]]:
    """Each npm preset's ``(npm spec, executable, binary in node_modules)``
    for this machine's CPU (``scripts/agents-constraints/npm.txt``)."""
    path = root / "scripts" / "agents-constraints" / "npm.txt"
    try:
        text = path.read_text()
    except OSError as exc:
        raise ImageError(f"the npm agents' pins are not here ({path}: {exc.strerror}): the agents image is "
                         "built from a checkout of rsi-bot (scripts/build-images.sh)") from None
    arch = NPM_ARCH.get(machine())
    if arch is None:
        raise ImageError(f"claude-code and codex have no build for this CPU ({machine()}): no agents image here")
    out: dict[str, tuple[str, str, str]] = {}
    for line in text.splitlines():
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) != 4 or "@" not in fields[1][1:] or ".." in fields[3] or fields[3].startswith("/"):
            raise ImageError(f"{path}: a line is 'preset npm-spec executable binary', not {line!r}")
        preset, spec, exe, binary = fields
        out[preset] = (spec, exe, binary.replace("{arch}", arch[0]).replace("{march}", arch[1]))
    if sorted(out) != sorted(NPM_AGENTS):
        raise ImageError(f"{path} pins {', '.join(sorted(out)) or 'nothing'}, not {', '.join(NPM_AGENTS)}")
    return out


def agents_tag(python: str, root: Path = ROOT) -> str:
    """The agents image's tag: a digest of the python image's tag, the agents'
    pins (the venvs' and the npm binaries' for this CPU) and the Dockerfile."""
    pins = _constraints(root)
    npm = npm_pins(root)
    parts = [python, AGENTS_DOCKERFILE, NPM_CHECK, machine(), *(x for a in AGENTS for x in (a, pins[a])),
             *(x for a in NPM_AGENTS for x in (a, *npm[a]))]
    return f"{AGENTS_REPO}:{_digest(*parts)}"


def _npm_binaries(dest: Path, root: Path) -> list[str]:
    """Each npm preset's pinned binary, from :func:`agents_dir`, into
    ``dest/<preset>/bin/<exe>`` (mode 0755); the build's version checks.
    :class:`ImageError` naming what to run when one is missing or not the pin."""
    checks = []
    for preset, (spec, exe, binary) in npm_pins(root).items():
        home = agents_dir() / preset
        src = home / "node_modules" / binary
        try:
            stamp = (home / ".rsi-installed").read_text().strip()
        except OSError:
            stamp = ""
        if stamp != f"{spec} {binary}" or src.is_symlink() or not src.is_file():
            raise ImageError(f"{preset} ({spec}) is not installed in {home} for the agents image: run "
                             "scripts/setup-agents.sh (it needs npm: apt-get install npm), with RSI_AGENTS_VENV "
                             "set as it is here")
        target = dest / preset / "bin" / exe
        target.parent.mkdir(parents=True)
        try:  # the context is only read: a link where it can be (300+ MB each), the mode the image needs
            if src.stat().st_mode & 0o7777 != 0o755:
                raise OSError("not mode 0755")
            os.link(src, target)
        except OSError:
            shutil.copyfile(src, target)
            os.chmod(target, 0o755)
        checks.append(NPM_CHECK.format(root=AGENTS_ROOT, preset=preset, exe=exe,
                                       version=shlex.quote(spec.rsplit("@", 1)[1])))
    return checks


def _base_id() -> str:
    base = image_id(BASE_IMAGE)
    if base is None:
        raise ImageError(f"the base image {BASE_IMAGE} is missing: run scripts/setup-docker.sh")
    return base


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    """One builder of ``name`` at a time on this host (parallel tests ask at once)."""
    path = Path(tempfile.gettempdir()) / f"rsi-image-{hashlib.sha256(name.encode()).hexdigest()[:12]}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _build(tag: str, context: Path, timeout: float, no_cache: bool = False) -> None:
    argv = ["docker", "build", "--network", "none", "-q", *(["--no-cache"] if no_cache else []), "-t", tag]
    out = subprocess.run([*argv, str(context)],
                         capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, "DOCKER_BUILDKIT": "0"})
    if out.returncode != 0:
        raise ImageError(f"docker build of {tag} failed: {(out.stderr or out.stdout)[-3000:]}")


def _fetch_debs(dest: Path, cache: Path) -> None:
    """The ``.deb`` files :data:`DEBS` need beyond what the base image holds, into ``dest``."""
    status = _docker("run", "--rm", "--network", "none", BASE_IMAGE, "cat", "/var/lib/dpkg/status")
    if status.returncode != 0:
        raise ImageError(f"could not read the base image's package list: {status.stderr[-500:]}")
    with tempfile.NamedTemporaryFile("w", suffix=".status") as fh:
        fh.write(status.stdout)
        fh.flush()
        sim = subprocess.run(["apt-get", "-o", f"Dir::State::status={fh.name}", "install", "-s",
                              "--no-install-recommends", *DEBS], capture_output=True, text=True, timeout=120)
    steps = [ln.split()[:3] for ln in sim.stdout.splitlines() if ln.startswith(("Inst ", "Conf "))]
    wanted = [f"{name}={version.strip('(')}" for op, name, version in steps if op == "Inst"]
    if sim.returncode != 0 or not wanted:
        raise ImageError(f"apt-get could not resolve {' '.join(DEBS)} against the base image "
                         f"(run apt-get update): {sim.stderr[-800:]}")
    debs = cache / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    got = subprocess.run(["apt-get", "download", *wanted], cwd=debs, capture_output=True, text=True, timeout=600)
    if got.returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, timeout=600)
        got = subprocess.run(["apt-get", "download", *wanted], cwd=debs, capture_output=True, text=True,
                             timeout=600)
        if got.returncode != 0:
            raise ImageError(f"apt-get download failed: {got.stderr[-800:]}")
    dest.mkdir()
    files: dict[str, str] = {}
    for item in wanted:
        name, version = item.split("=", 1)
        found = sorted(debs.glob(f"{name}_{version.replace(':', '%3a')}_*.deb"))
        if not found:
            raise ImageError(f"apt-get download left no .deb of {item} in {debs}")
        shutil.copy2(found[0], dest / found[0].name)
        files[name] = found[0].name
    # apt's own order (pre-dependencies configured before what needs them)
    script = [f"dpkg --unpack /tmp/rsi-debs/{files[name]}" if op == "Inst" else f"dpkg --configure {name}"
              for op, name, _ in steps]
    (dest / "install.sh").write_text("\n".join(script) + "\n")


def _fetch_wheels(dest: Path, cache: Path, pins: tuple[str, ...]) -> None:
    """A wheel of each pin into ``dest`` (``pip download`` on the host, kept in the cache)."""
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    got = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                          "--disable-pip-version-check", "--find-links", str(wheels), "-d", str(wheels), *pins],
                         capture_output=True, text=True, timeout=1800)
    if got.returncode != 0:
        raise ImageError(f"pip download of the runtime's wheels failed: {got.stderr[-1500:]}")
    from pip._vendor.packaging.utils import canonicalize_name, parse_wheel_filename

    have: dict[tuple[str, str], Path] = {}
    for w in wheels.glob("*.whl"):
        wname, wversion, _, _ = parse_wheel_filename(w.name)
        have[(str(canonicalize_name(wname)), str(wversion))] = w
    dest.mkdir()
    for pin in pins:
        name, version = pin.split("==")
        found = have.get((str(canonicalize_name(name)), version))
        if found is None:
            raise ImageError(f"no wheel of {pin} in {wheels} after pip download")
        shutil.copy2(found, dest / found.name)


def build_python(*, timeout: float = 3600, tag: str | None = None, no_cache: bool = False) -> str:
    """Build the python image unless its tag exists; its tag. (``tag``,
    ``no_cache``: build anew under another tag, for benchmarks/sandbox_images.py.)"""
    tag, again = tag or python_tag(_base_id()), tag is not None
    with _locked(tag):
        if image_id(tag) and not again:
            return tag
        cache = cache_dir()
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="rsi-python-image-", dir=cache) as tmp:
            ctx = Path(tmp)
            _fetch_debs(ctx / "debs", cache)
            _fetch_wheels(ctx / "wheels", cache, runtime_pins())
            (ctx / "Dockerfile").write_text(PYTHON_DOCKERFILE.format(base=BASE_IMAGE))
            _build(tag, ctx, timeout, no_cache)
    return tag


def build_runtime(python: str, *, root: Path = ROOT, timeout: float = 600, tag: str | None = None,
                  no_cache: bool = False) -> str:
    """Build the runtime image on ``python`` unless its tag exists; its tag."""
    tag, again = tag or runtime_tag(python, root), tag is not None
    with _locked(tag):
        if image_id(tag) and not again:
            return tag
        with tempfile.TemporaryDirectory(prefix="rsi-runtime-image-") as tmp:
            ctx = Path(tmp)
            for rel in source_files(root):
                (ctx / "src" / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(root / rel, ctx / "src" / rel)
            (ctx / "Dockerfile").write_text(RUNTIME_DOCKERFILE.format(python=python))
            _build(tag, ctx, timeout, no_cache)
    return tag


def build_agents(python: str, *, root: Path = ROOT, timeout: float = 3600, tag: str | None = None,
                 no_cache: bool = False) -> str:
    """Build the agents image (the agent presets' venvs, from wheels built on
    the host at the pinned versions) unless its tag exists; its tag."""
    tag, again = tag or agents_tag(python, root), tag is not None
    with _locked(tag):
        if image_id(tag) and not again:
            return tag
        cache = cache_dir()
        wheels = cache / "agent-wheels"
        wheels.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="rsi-agents-image-", dir=cache) as tmp:
            ctx = Path(tmp)
            (ctx / "agents" / "wheels").mkdir(parents=True)
            for agent, text in _constraints(root).items():
                pins = ctx / "agents" / f"{agent}.txt"
                pins.write_text(text)
                got = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                                      "--disable-pip-version-check", "--find-links", str(wheels),
                                      "-w", str(wheels), "-r", str(pins)],
                                     capture_output=True, text=True, timeout=timeout)
                if got.returncode != 0:
                    raise ImageError(f"pip wheel of {agent}'s pins failed: {got.stderr[-1500:]}")
            for w in wheels.glob("*.whl"):
                shutil.copy2(w, ctx / "agents" / "wheels" / w.name)
            checks = _npm_binaries(ctx / "npm", root)
            (ctx / "Dockerfile").write_text(AGENTS_DOCKERFILE.format(python=python).replace(
                "@NPM_CHECKS@", " \\\n && ".join([*checks, "rm -rf /tmp/rsi-home"])))
            _build(tag, ctx, timeout, no_cache)
    return tag


def agents_image() -> str:
    """The agents image's tag; :class:`ImageError` when it is not built (``scripts/build-images.sh``)."""
    tag = agents_tag(python_tag(_base_id()))
    if image_id(tag) is None:
        raise ImageError(f"the agents image {tag} is missing (the agent presets' venvs, image content: "
                         "the host's are never mounted): run scripts/build-images.sh")
    return tag


@functools.lru_cache(maxsize=1)
def ensure_runtime() -> str:
    """The runtime image's tag, built now (seconds) if only it is missing.
    Raises :class:`ImageError` when the python image is missing (minutes to
    build: ``scripts/build-images.sh``, which ``.ci/run`` runs)."""
    python = python_tag(_base_id())
    if image_id(python) is None:
        raise ImageError(f"the sandbox's python image {python} is missing (it holds Debian's Python and "
                         "rsi-bot's dependencies; the host's are never mounted): run scripts/build-images.sh")
    return build_runtime(python)


def sandbox_image(image: str) -> str:
    """The image a container of ours runs: ``image`` as it is, except the
    default base (no Python of its own), which becomes the runtime image."""
    return ensure_runtime() if image == BASE_IMAGE else image


# ------------------------------------------------------- the target's own environment

ENV_REPO = "rsi-bot/env"
ENV_DOCKERFILE = """FROM {on}
COPY wheels/ /tmp/rsi-env-wheels/
RUN python3 -m pip install --no-index --no-deps --break-system-packages --no-cache-dir --disable-pip-version-check \\
      -q /tmp/rsi-env-wheels/*.whl && rm -rf /tmp/rsi-env-wheels
"""
"""The requirements' closure as ``pip wheel`` resolved it on the host (their
local paths are the repository's, not the image's): every wheel installed,
the target's versions winning over the image's, then :data:`PROBE_CHECK`."""
PROBE_CHECK = "import verifier.probe"
"""What a target's environment image must still run: the verifier's roles
(its probe and harness) run in it, as in the runtime image."""
MAX_CONTEXT_BYTES = 2 << 30
"""The most a Dockerfile's folder may hold (its build context): past it, an error."""


def _within(tree: Path, rel: str) -> Path:
    """``tree/rel``, a regular file reached through no link (the declaration
    comes from a tree a candidate may have shaped: no way out of it)."""
    path = tree
    for part in Path(rel).parts:
        path = path / part
        if path.is_symlink():
            raise ImageError(f"environment {rel!r}: {path.relative_to(tree)} is a symbolic link in "
                             f"{tree}; name the file itself")
    if not path.is_file():
        raise ImageError(f"environment {rel!r}: no such file in B0's tree ({tree}); commit it, or fix "
                         "[runner.profiles.<name>] environment in .rsi/config.toml")
    return path


def _context_digest(folder: Path) -> list[str | bytes]:
    """Every file of a Dockerfile's build context, by path and content (links by target)."""
    parts: list[str | bytes] = []
    total = 0
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        for name in sorted(filenames):
            p = Path(dirpath) / name
            rel = str(p.relative_to(folder))
            if p.is_symlink():
                parts += [rel, "->", os.readlink(p)]
                continue
            data = p.read_bytes()
            total += len(data)
            if total > MAX_CONTEXT_BYTES:
                raise ImageError(f"the Dockerfile's folder {folder} holds more than {MAX_CONTEXT_BYTES >> 20} MiB "
                                 "(its build context): put the Dockerfile in a folder of its own")
            parts += [rel, data]
    return parts


def _check_probe(tag: str, declaration: str) -> None:
    out = _docker("run", "--rm", "--network", "none", "--entrypoint", "python3", tag, "-c", PROBE_CHECK,
                  timeout=300)
    if out.returncode != 0:
        _docker("image", "rm", "-f", tag)
        raise ImageError(f"the environment built from {declaration!r} cannot run the verifier's roles "
                         f"(python3 -c '{PROBE_CHECK}': {(out.stderr or out.stdout).strip()[-600:]}): begin a "
                         "Dockerfile with 'ARG RSI_RUNTIME' and 'FROM ${RSI_RUNTIME}', and keep its pins "
                         "compatible with rsi-bot's")


def env_tag(declaration: str, tree: Path, on: str) -> str:
    """The tag of the target's environment image: a digest of the image it
    builds on (its id), the declaration's kind, name and content, and for a
    Dockerfile every file of its folder."""
    from harness.sections import environment_kind

    path = _within(tree, declaration)
    on_id = image_id(on)
    if on_id is None:
        raise ImageError(f"the image {on} the environment builds on is missing")
    kind = environment_kind(declaration)
    parts: list[str | bytes] = [on_id, str(kind), declaration]
    parts += _context_digest(path.parent) if kind == "dockerfile" else _requirements_digest(path.resolve(), Path(tree).resolve())
    return f"{ENV_REPO}:{_digest(*parts, ENV_DOCKERFILE)}"


def _requirements_digest(req: Path, tree: Path, seen: frozenset[Path] = frozenset()) -> list[str | bytes]:
    """A requirements file's content and, by content, every file of the tree
    it names (a local wheel, sdist or package folder, a ``-r``/``-c`` file:
    relative to its folder, as pip reads them there); a name outside the tree
    is an error. A requirement from an index is digested by its text: pin it
    (a lock file), or the image keeps its first resolution."""
    parts: list[str | bytes] = [str(req.relative_to(tree)), req.read_bytes()]
    root = tree.resolve()
    for line in req.read_text(errors="replace").splitlines():
        words = line.split(" #", 1)[0].split()
        if not words or words[0].startswith("#"):
            continue
        if words[0] in ("-r", "--requirement", "-c", "--constraint", "-e", "--editable") and len(words) > 1:
            words = words[1:]
        elif words[0].startswith(("-r", "-c", "-e")) and len(words[0]) > 2 and not words[0].startswith("--"):
            words = [words[0][2:]]
        name = words[0].removeprefix("file:")
        if not (name.startswith((".", "/")) or (req.parent / name).exists()):
            continue
        target = (req.parent / name).resolve()
        if target != root and root not in target.parents:
            raise ImageError(f"environment {req.relative_to(tree)}: {name!r} is outside the repository; "
                             "name files of the repository only")
        if target.is_dir():
            parts += [name, *_context_digest(target)]
        elif target.is_file():
            nested = target.suffix == ".txt" and target not in seen
            parts += _requirements_digest(target, tree, seen | {req}) if nested else [name, target.read_bytes()]
    return parts


def _env_wheels(req: Path, dest: Path, cache: Path, timeout: float) -> None:
    """A wheel of every requirement of ``req`` (and what they need) into
    ``dest``: ``pip wheel`` on this host, in the requirements file's folder
    (its relative paths are the repository's), kept in the cache."""
    wheels = cache / "env-wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    dest.mkdir()
    got = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check",
                          "--find-links", str(wheels), "-w", str(dest), "-r", str(req)],
                         cwd=req.parent, capture_output=True, text=True, timeout=timeout)
    if got.returncode != 0:
        raise ImageError(f"pip wheel of the environment's requirements ({req.name}) failed: "
                         f"{(got.stderr or got.stdout).strip()[-1500:]}")
    for w in dest.glob("*.whl"):
        if not (wheels / w.name).exists():
            shutil.copy2(w, wheels / w.name)


def target_image(declaration: str, tree: Path, on: str, *, timeout: float = 3600) -> str:
    """The image of a target's own environment, built unless its tag exists;
    its tag. ``declaration``: the runner profile's ``environment`` (a path in
    ``tree``, B0's tree); ``on``: the image it builds on (the runtime image,
    or a profile's own image). A requirements file is installed from wheels
    built on this host (the build has no network); a Dockerfile is built
    with its folder as context and ``RSI_RUNTIME`` = ``on`` (with the build
    network: the maintainers' file, at B0). Either must still run the
    verifier's roles (:data:`PROBE_CHECK`), else :class:`ImageError`."""
    from harness.sections import environment_kind

    tree = Path(tree)
    tag = env_tag(declaration, tree, on)
    path = _within(tree, declaration)
    with _locked(tag):
        if image_id(tag):
            return tag
        if environment_kind(declaration) == "dockerfile":
            out = subprocess.run(["docker", "build", "-q", "-f", str(path), "--build-arg", f"RSI_RUNTIME={on}",
                                  "-t", tag, str(path.parent)], capture_output=True, text=True, timeout=timeout,
                                 env={**os.environ, "DOCKER_BUILDKIT": "0"})
            if out.returncode != 0:
                raise ImageError(f"docker build of the environment {declaration!r} failed: "
                                 f"{(out.stderr or out.stdout)[-2000:]}")
        else:
            cache = cache_dir()
            cache.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(prefix="rsi-env-image-", dir=cache) as tmp:
                ctx = Path(tmp)
                _env_wheels(path, ctx / "wheels", cache, timeout)
                dockerfile = ENV_DOCKERFILE.format(on=on)
                if not any((ctx / "wheels").glob("*.whl")):  # nothing to install: the image it builds on, retagged
                    dockerfile = f"FROM {on}\n"
                (ctx / "Dockerfile").write_text(dockerfile)
                try:
                    _build(tag, ctx, timeout)
                except ImageError as exc:
                    raise ImageError(f"the environment {declaration!r}: {exc}") from None
        _check_probe(tag, declaration)
    return tag


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in (["build"], ["tag"]):
        print("usage: python -m harness.images build|tag", file=sys.stderr)
        return 2
    try:
        if args == ["build"]:
            python = build_python()
            try:
                build_agents(python)
            except ImageError as exc:  # an installed rsi-bot: no agent presets with venvs here
                print(f"images: no agents image: {exc}", file=sys.stderr)
        print(ensure_runtime())
    except ImageError as exc:
        print(f"images: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
