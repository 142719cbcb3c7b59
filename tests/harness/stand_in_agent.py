"""A stand-in coding-agent CLI: reads TASK.md, edits a file, states a hypothesis.

Run by the ``command`` adapter inside the agent container, like Claude Code
would be. It also prints its API key, so tests can check the log is redacted.
"""

import os
import re
import sys
from pathlib import Path

task = Path(os.environ["RSI_TASK_FILE"]).read_text()
assert "## Objective" in task and "## Edit policy" in task, "TASK.md is incomplete"
print("stand-in agent: read TASK.md,", len(task), "chars; key", os.environ.get("FAKE_API_KEY", "<none>"))
mode = sys.argv[1] if len(sys.argv) > 1 else "faster"
settings = Path("app/settings.toml")
if mode == "faster":
    text = settings.read_text()
    cur = int(re.search(r"delay_ms = (\d+)", text).group(1))
    settings.write_text(text.replace(f"delay_ms = {cur}", f"delay_ms = {cur * 2 // 3}"))
    hyp = f"cut the per-request delay from {cur} to {cur * 2 // 3} ms"
elif mode == "protected":
    Path(".rsi/config.toml").write_text("hacked = true\n")
    hyp = "relax the config"
elif mode == "fail":
    print("giving up", file=sys.stderr)
    sys.exit(3)
Path(os.environ["RSI_HYPOTHESIS_FILE"]).write_text(hyp + "\n")
