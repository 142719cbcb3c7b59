"""Real bare git repositories behind the fake GitHub: seed, read, merge, serve.

Everything shells out to the `git` on PATH; nothing here touches /work/main.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

IDENTITY = {
    "GIT_AUTHOR_NAME": "Fake GitHub", "GIT_AUTHOR_EMAIL": "noreply@fake.github.test",
    "GIT_COMMITTER_NAME": "Fake GitHub", "GIT_COMMITTER_EMAIL": "noreply@fake.github.test",
}


class GitError(RuntimeError):
    pass


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(IDENTITY)
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env["GIT_CONFIG_GLOBAL"] = os.devnull
    env.update(extra or {})
    return env


def git(bare: Path, *args: str, input: bytes | None = None, check: bool = True,
        env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    p = subprocess.run(["git", "--git-dir", str(bare), *args], input=input, capture_output=True,
                       env=_env(env), cwd=cwd, check=False)
    if check and p.returncode != 0:
        raise GitError(f"git {' '.join(args)}: {p.stderr.decode(errors='replace').strip()}")
    return p


def out(bare: Path, *args: str) -> str:
    return git(bare, *args).stdout.decode().strip()


def init_bare(bare: Path, default_branch: str) -> None:
    bare.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "--bare", f"--initial-branch={default_branch}", str(bare)],
                   check=True, capture_output=True, env=_env())
    git(bare, "config", "http.receivepack", "true")
    git(bare, "config", "uploadpack.allowAnySHA1InWant", "true")


def commit_dir(bare: Path, branch: str, source: Path, message: str) -> str:
    """Commit the whole tree of `source` as the new tip of `branch` (parent: its old tip)."""
    index = bare / f"seed-index-{os.getpid()}"
    env = {"GIT_INDEX_FILE": str(index), "GIT_WORK_TREE": str(source)}
    try:
        git(bare, "add", "-A", ".", env=env, cwd=source)
        tree = git(bare, "write-tree", env=env, cwd=source).stdout.decode().strip()
    finally:
        index.unlink(missing_ok=True)
    parent = resolve(bare, f"refs/heads/{branch}")
    args = ["commit-tree", tree, "-m", message] + (["-p", parent] if parent else [])
    sha = out(bare, *args)
    git(bare, "update-ref", f"refs/heads/{branch}", sha)
    return sha


def resolve(bare: Path, ref: str) -> str | None:
    """Commit SHA of a ref, branch name or SHA; None when it does not resolve."""
    for cand in (ref, f"refs/heads/{ref}", f"refs/tags/{ref}"):
        p = git(bare, "rev-parse", "--verify", "--quiet", f"{cand}^{{commit}}", check=False)
        if p.returncode == 0:
            return p.stdout.decode().strip()
    return None


def branches(bare: Path) -> dict[str, str]:
    lines = out(bare, "for-each-ref", "--format=%(refname:strip=2) %(objectname)", "refs/heads")
    return dict(line.split(" ", 1) for line in lines.splitlines() if line)


def refs(bare: Path) -> dict[str, str]:
    lines = out(bare, "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split(" ", 1) for line in lines.splitlines() if line)


def object_type(bare: Path, spec: str) -> str | None:
    p = git(bare, "cat-file", "-t", spec, check=False)
    return p.stdout.decode().strip() if p.returncode == 0 else None


def read_blob(bare: Path, spec: str) -> bytes:
    return git(bare, "cat-file", "blob", spec).stdout


def ls_tree(bare: Path, commit: str, path: str) -> list[tuple[str, str, str, int, str]]:
    """(mode, type, sha, size, name) of the entries of a directory."""
    spec = f"{commit}:{path}" if path else commit
    lines = out(bare, "ls-tree", "-l", spec)
    rows = []
    for line in lines.splitlines():
        meta, name = line.split("\t", 1)
        mode, typ, sha, size = meta.split()
        rows.append((mode, typ, sha, int(size) if size != "-" else 0, name))
    return rows


def is_ancestor(bare: Path, a: str, b: str) -> bool:
    return git(bare, "merge-base", "--is-ancestor", a, b, check=False).returncode == 0


def merge(bare: Path, base: str, head: str, message: str, *, squash: bool = False) -> str:
    """Merge commit (or squash commit) of head into base, without a work tree."""
    p = git(bare, "merge-tree", "--write-tree", base, head, check=False)
    if p.returncode != 0:
        raise GitError(f"merge conflict between {base[:12]} and {head[:12]}:\n"
                       + p.stdout.decode(errors="replace"))
    tree = p.stdout.decode().split("\n", 1)[0].strip()
    parents = ["-p", base] if squash else ["-p", base, "-p", head]
    return out(bare, "commit-tree", tree, *parents, "-m", message)


def update_ref(bare: Path, ref: str, new: str, old: str | None = None) -> None:
    git(bare, "update-ref", ref, new, *([old] if old else []))


def http_backend(project_root: Path, path_info: str, method: str, query: str,
                 content_type: str, body: bytes, remote_user: str,
                 headers: dict[str, str]) -> tuple[int, list[tuple[str, str]], bytes]:
    """Run `git http-backend` as a CGI; returns (status, headers, body)."""
    env = _env({
        "GIT_PROJECT_ROOT": str(project_root),
        "GIT_HTTP_EXPORT_ALL": "1",
        "PATH_INFO": path_info,
        "REQUEST_METHOD": method,
        "QUERY_STRING": query,
        "CONTENT_TYPE": content_type,
        "CONTENT_LENGTH": str(len(body)),
        "REMOTE_USER": remote_user,
        "REMOTE_ADDR": "127.0.0.1",
        "GATEWAY_INTERFACE": "CGI/1.1",
        "SERVER_PROTOCOL": "HTTP/1.1",
    })
    for name, var in (("Content-Encoding", "HTTP_CONTENT_ENCODING"),
                      ("Git-Protocol", "GIT_PROTOCOL")):
        if headers.get(name):
            env[var] = headers[name]
    p = subprocess.run(["git", "http-backend"], input=body, capture_output=True, env=env,
                       check=False)
    raw = p.stdout
    sep = raw.find(b"\r\n\r\n")
    sep_len = 4
    if sep < 0 or (raw.find(b"\n\n") >= 0 and raw.find(b"\n\n") < sep):
        sep, sep_len = raw.find(b"\n\n"), 2
    if sep < 0:
        return 500, [("Content-Type", "text/plain")], p.stderr or b"git http-backend failed"
    head, payload = raw[:sep].decode("latin-1"), raw[sep + sep_len:]
    status, out_headers = 200, []
    for line in head.splitlines():
        if not line.strip():
            continue
        name, _, value = line.partition(":")
        if name.lower() == "status":
            status = int(value.strip().split()[0])
        else:
            out_headers.append((name.strip(), value.strip()))
    return status, out_headers, payload
