"""The files rsi-bot ships under .github/: the issue form the harness parses,
the reusable runner workflow, the App manifest (least privilege)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness.proposal import parse_proposal

ROOT = Path(__file__).resolve().parents[2]
GH = ROOT / ".github"


def form_labels() -> list[str]:
    text = (GH / "ISSUE_TEMPLATE" / "rsi-proposal.yml").read_text()
    return re.findall(r"^\s+label:\s*(.+?)\s*$", text, re.M)


def render_form(values: dict[str, str]) -> str:
    """An issue body as GitHub renders a submitted form: ### <label>, blank line, value."""
    parts = []
    for label in form_labels():
        parts.append(f"### {label}\n\n{values.get(label, '_No response_')}\n")
    return "\n".join(parts)


def test_issue_form_sections_are_what_the_parser_reads():
    assert form_labels()[:2] == ["Idea", "Benchmark"]
    body = render_form({
        "Idea": "Batch the vocoder frames.",
        "Benchmark": "tts",
        "Objective metric": "throughput",
        "Minimum gain": "5%",
        "Guards": "latency_p95_s <= 1.05x\nstartup_s <= 1.2x",
        "Agent": "replay",
        "Budget (rounds)": "3",
        "Editable paths": "tiny_tts/vocoder.py, tiny_tts/ops.py",
        "Runner profile": "cpu",
        "Configuration": "```toml\n[verifier]\nmax_pairs = 20\n```",
    })
    prop = parse_proposal(body)
    assert prop.errors == []
    o = prop.overrides
    assert o["objective"] == {"benchmark": "tts", "metric": "throughput", "min_gain": 0.05}
    assert [g["metric"] for g in o["guards"]] == ["latency_p95_s", "startup_s"]
    assert o["agent"] == {"kind": "replay", "rounds": 3}
    assert o["policy"]["editable"] == ["tiny_tts/vocoder.py", "tiny_tts/ops.py"]
    assert o["runner"]["profile"] == "cpu"
    assert o["verifier"]["max_pairs"] == 20
    assert "Batch the vocoder frames." in prop.notes


def test_empty_form_fields_are_skipped():
    prop = parse_proposal(render_form({"Idea": "Anything faster."}))
    assert prop.errors == [] and prop.overrides == {}


def test_issue_form_does_not_apply_the_trigger_label():
    text = (GH / "ISSUE_TEMPLATE" / "rsi-proposal.yml").read_text()
    assert not re.search(r"^labels:.*rsi", text, re.M)


def test_reusable_workflow():
    text = (GH / "workflows" / "rsi-job.yml").read_text()
    assert "workflow_call:" in text
    triggers = text.split("\non:\n", 1)[1].split("\npermissions:", 1)[0]
    assert "pull_request" not in triggers  # fork PRs never reach the runners
    assert "github.event_name == 'workflow_dispatch'" in text
    assert "!github.event.repository.fork" in text
    assert "runs-on: ${{ fromJSON(inputs.runner_labels) }}" in text
    assert "rsi worker --job" in text and "name: rsi-result" in text
    assert "\npermissions:\n  contents: read\n" in text
    # inputs reach shell steps through env, never pasted into scripts
    for line in text.splitlines():
        if line.strip().startswith(("run:", "rsi ", "python")):
            assert "${{" not in line, line


def test_app_manifest_is_least_privilege():
    m = json.loads((GH / "app-manifest.json").read_text())
    assert m["default_permissions"] == {
        "metadata": "read", "contents": "write", "issues": "write", "pull_requests": "write",
        "checks": "write", "actions": "write"}
    assert sorted(m["default_events"]) == ["check_run", "issue_comment", "issues", "pull_request",
                                           "workflow_run"]
    assert m["public"] is False
