"""The scripted model's replies for the agent tests, by model name.

mini-swe-agent gets ``bash`` tool calls (one per step, its v2 tool-calling
format) and finishes with ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``;
aider gets one reply with a SEARCH/REPLACE block (its ``diff`` edit format).
Every step carries its own ``usage``, so the ledger's counts can be checked.
"""

from __future__ import annotations

FINISH = {"bash": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "usage": {"prompt_tokens": 1400, "completion_tokens": 10}}
READ_TASK = {"content": "Reading the task first.", "bash": "cat /rsi/TASK.md",
             "usage": {"prompt_tokens": 1000, "completion_tokens": 50}}
FASTER = ("sed -i 's/^delay_ms = 250$/delay_ms = 170/' app/settings.toml && "
          "echo 'cut the per-request delay (250 ms -> 170 ms): the benchmark sleeps it per request' "
          "> \"$RSI_HYPOTHESIS_FILE\"")

MINI_USAGE = {"calls": 3, "tokens_in": 3600, "tokens_out": 120}

SCRIPTS: dict[str, list[dict]] = {
    "mini-ok": [READ_TASK, {"bash": FASTER, "usage": {"prompt_tokens": 1200, "completion_tokens": 60}}, FINISH],
    "aider-ok": [{
        "content": (
            "The benchmark sleeps `delay_ms` per request; cutting it raises throughput.\n\n"
            "app/settings.toml\n```\n<<<<<<< SEARCH\ndelay_ms = 250\n=======\ndelay_ms = 170\n"
            ">>>>>>> REPLACE\n```\n\nRSI-HYPOTHESIS: cut delay_ms in app/settings.toml (250 -> 170 ms per request)\n"
        ),
        "usage": {"prompt_tokens": 900, "completion_tokens": 40},
    }],
    "aider-refused": [{"status": 401}],
    "mini-protected": [READ_TASK, {"bash": "echo 'def test_fast():\n    assert True' >> tests/test_core.py && "
                                           "echo 'skip the slow test' > \"$RSI_HYPOTHESIS_FILE\""}, FINISH],
    "mini-toobig": [READ_TASK, {"bash": "for i in $(seq 1 80); do echo \"X$i = $i\" >> app/core.py; done && "
                                        "echo 'precompute a table' > \"$RSI_HYPOTHESIS_FILE\""}, FINISH],
    "mini-forever": [READ_TASK, {"bash": "sleep 2; echo still thinking"}],
}

# claude-code (Anthropic messages, streamed) and codex (OpenAI responses,
# streamed) get the same edit as a call of their own shell tool (``Bash``;
# codex's ``shell``/``shell_command``/``exec_command``), then a final text
DONE = {"content": "Done: cut delay_ms from 250 to 170.", "usage": {"prompt_tokens": 1500, "completion_tokens": 25}}
NPM_USAGE = {"prompt_tokens": 1100, "completion_tokens": 45, "cached": 600}
SCRIPTS.update({
    "cc-ok": [{"content": "I will lower the delay.", "bash": FASTER, "usage": NPM_USAGE}, DONE],
    "codex-ok": [{"bash": FASTER, "usage": NPM_USAGE}, DONE],
    "cc-budget": [{"bash": "echo should never run", "usage": NPM_USAGE}, DONE],
    "codex-budget": [{"bash": "echo should never run", "usage": NPM_USAGE}, DONE],
})
