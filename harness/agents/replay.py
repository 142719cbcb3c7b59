"""``replay``: applies given patch files, one per round, in order.

For reproducing a human's patch under the verifier, and for tests and the
demo. The hypothesis is the patch's ``Subject:`` (``git format-patch``), else
its first ``#`` comment line, else its file name. A patch that does not apply
on Bk is an ``error`` candidate with git's message.

The patch is applied by ``git apply`` in the agent's tree (a plain export, no
``.git``) as a plain patch tool: discovery of a repository above the tree is
cut off (``GIT_CEILING_DIRECTORIES``), so git's own guards hold: no path
outside the tree, none through a symlink, none into ``.git``. Hardened config
and a clean environment as every host git call (``harness.gitutil``).
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from harness.agents.base import AgentContext, AgentOutcome
from harness.gitutil import HARDENING, bot_env


def patch_hypothesis(text: str, name: str) -> str:
    m = re.search(r"^Subject:\s*(?:\[PATCH[^\]]*\]\s*)?(.+(?:\n[ \t].+)*)", text, re.MULTILINE)
    if m:
        return " ".join(m.group(1).split())
    for line in text.splitlines():
        if line.startswith(("diff ", "--- ", "Index:")):
            break
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return Path(name).stem.replace("-", " ").replace("_", " ")


class ReplayAgent:
    name = "replay"

    def __init__(self, patches: list[Path | str]):
        self.patches = [Path(p) for p in patches]

    def for_worker(self, k: int, n: int) -> ReplayAgent:
        """Worker ``k``'s share of ``n`` parallel agents: patches k, k+n, ...
        (``harness.parallel``), so no patch is replayed twice."""
        return ReplayAgent(list[Path | str](self.patches[k::n]))

    def run(self, ctx: AgentContext) -> AgentOutcome:
        t0 = time.monotonic()
        i = int(ctx.state.get("next", 0))
        if i >= len(self.patches):
            return AgentOutcome(done=True, hypothesis="replay: every patch has been applied")
        ctx.state["next"] = i + 1
        path = self.patches[i]
        try:
            text = path.read_text()
        except OSError as exc:
            return AgentOutcome(error=f"patch {path}: {exc}", duration_s=time.monotonic() - t0)
        hyp = patch_hypothesis(text, path.name)
        change = {"kind": "patch", "file": path.name, "index": i}
        proc = apply_patch(Path(ctx.worktree), text)
        if proc.returncode != 0:
            return AgentOutcome(
                hypothesis=hyp,
                error=f"patch {path.name} does not apply on Bk: {proc.stderr.strip()[-800:]}",
                change=change,
                raw_patch=text,
                duration_s=time.monotonic() - t0,
            )
        return AgentOutcome(hypothesis=hyp, change=change, raw_patch=text, duration_s=time.monotonic() - t0)


def apply_patch(tree: Path, text: str) -> subprocess.CompletedProcess:
    """``git apply`` of ``text`` inside ``tree`` and nowhere else."""
    tree = tree.resolve()
    env = bot_env({"GIT_CEILING_DIRECTORIES": str(tree.parent)})
    return subprocess.run(  # noqa: PLW1510 - the caller reads the return code
        ["git", *HARDENING, "apply", "--whitespace=nowarn", "-"],
        cwd=tree,
        input=text,
        capture_output=True,
        text=True,
        env=env,
    )
