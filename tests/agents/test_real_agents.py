"""mini-swe-agent, aider, claude-code and codex, for real: each runs in the
sandbox through the ``command`` agent path, reads TASK.md, edits the target
through its own tools, and talks to the scripted model server only through the
model gateway (which holds the key and meters every call). Its edit goes
through the edit policy and the verifier like any candidate. claude-code
speaks Anthropic messages and codex OpenAI responses, both streamed; their
binaries come from npm (scripts/setup-agents.sh) into the agents image
(harness/images.py), like the other two's venvs: no image, they skip, or fail
where ``RSI_REQUIRE_DOCKER=1`` (CI; conftest.py)."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

import pytest

from harness.agents import make_agent
from harness.ledger import Ledger
from harness.loop import load_state, run_task
from harness.spec import load_task
from tests.fakemodel.fixture import HOST, PORT, FakeModel
from tests.fakemodel.server import upstream_billed
from tests.harness.target import CONFIG, make_target

from .scripts import FINISH, MINI_USAGE, NPM_USAGE, READ_TASK, SCRIPTS

pytestmark = pytest.mark.docker

# drawn per session: the key is in no file the agent could read (nothing of the host is mounted but the run's files)
API_KEY = "sk-rsi-test-" + secrets.token_hex(8)
REVERSED = API_KEY[::-1]
# the agent looks for the key everywhere it can read (its env, PID 1's env, the files of the run;
# /opt and /usr are image content, built before any key existed): the
# command holds the key only reversed, so that the search itself does not plant it
SNOOP = (
    "env | sort; tr '\\0' '\\n' < /proc/1/environ; "
    f"python -c \"import os,sys; k='{REVERSED}'[::-1]; "
    "hits=[os.path.join(d,f) for r in ('/rsi','/work','/tmp','/etc','/home','/run') for d,_,fs in os.walk(r) for f in fs "
    "if os.path.isfile(os.path.join(d,f)) and os.access(os.path.join(d,f), os.R_OK) and k.encode() in open(os.path.join(d,f),'rb').read(1<<22)]; "
    "print('FOUND:'+' '.join(hits) if hits else 'NOWHERE'); print('KEY-IN-ENV' if k in str(os.environ) else 'NOT-IN-ENV')\"; "
    "echo SNOOP-DONE"
)
# a prompt injection that knows the key: reversed into the hypothesis, base64 into a file. The
# model's answer carries it in a cipher of its own (each character shifted by one): the gateway
# redacts every disguise harness.leaks knows from the model's answers, halves of the key included,
# so only a form it cannot know gets the key to the agent (what this test needs: an agent that
# learned the key); what the agent then writes is a known disguise, found on the way out
SHIFTED = "".join(chr(ord(c) + 1) for c in API_KEY)
DISGUISE = (
    f"python -c \"import base64; k=''.join(chr(ord(c) - 1) for c in '{SHIFTED}'); "
    "open('app/notes.b64','w').write(base64.b64encode(('api_key = ' + repr(k)).encode()).decode()); "
    "open('/rsi/out/hypothesis.txt','w').write('tuned ' + k[::-1])\""
)
GATEWAY_SCRIPTS = {
    **SCRIPTS,
    "mini-snoop": [{"bash": SNOOP, "usage": {"prompt_tokens": 500, "completion_tokens": 30}}, FINISH],
    "mini-disguise": [READ_TASK, {"bash": DISGUISE}, FINISH],
    "mini-budget": [READ_TASK, {"bash": "echo should never run"}, FINISH],
}


def agent_config(kind: str, model: str, *, host: str = HOST, timeout_s: int = 120, extra: str = "",
                 base_env: str = "OPENAI_API_BASE", base_path: str = "/v1", prefix: str = "openai/") -> str:
    # the verifier's default guards (peak RSS within 2%...) only add noise to a sleep-bound target
    # and a loaded 2-core CI box must not refuse the task at calibration: the change is +47%,
    # so min_gain 20% with up to 12 pairs (a clear gain still stops at the first look, 6 pairs)
    base = (CONFIG.split("[agent]")[0].replace("[verifier]\n", "[verifier]\ndefault_guards = false\n")
            .replace("min_gain = 0.1\n", "min_gain = 0.2\n").replace("max_pairs = 8\n", "max_pairs = 12\n"))
    assert "min_gain = 0.2" in base and "max_pairs = 12" in base
    return base + f'''
[agent]
kind = "{kind}"
model = "{prefix}{model}"
rounds = 2
round_timeout_s = {timeout_s}
max_straight_rejections = 3
price_in_per_mtok = 2.0
price_out_per_mtok = 8.0
{extra}
[runner]
profile = "agent"

[runner.profiles.agent]
cpus = 1.0
memory = "2g"
allowed_hosts = ["{host}"]
env = {{ {base_env} = "http://{host}:{PORT}{base_path}" }}
'''


@pytest.fixture(scope="module")
def fakemodel():
    with FakeModel(GATEWAY_SCRIPTS, api_key=API_KEY) as fm:
        yield fm


def run_agent(tmp_path: Path, fm: FakeModel, kind: str, model: str, *, verifier: str = "inprocess",
              rounds: int = 1, **cfg):
    # 250 ms per request: a change the verifier's own clock sees through each run's start-up
    python = "python3" if verifier == "sandbox" else sys.executable  # in containers: the image's own
    repo = make_target(tmp_path, python=python, delay_ms=250, config=agent_config(kind, model, **cfg))
    spec = load_task(repo, None, f"t-{model}")
    agent = make_agent(spec)
    agent.environ = {"OPENAI_API_KEY": API_KEY, "ANTHROPIC_API_KEY": API_KEY}
    agent.upstream_networks = (fm.network_name,)
    events: list = []
    res = run_task(repo, spec, state_dir=tmp_path / "state", agent=agent, rounds=rounds,
                   verifier=verifier, on_event=events.append)
    assert res.status != "refused", res.reason  # B0's calibration: the machine too noisy right now
    return repo, res, Ledger(repo).records(), events


def keep_record(tmp_path: Path, name: str, rec, seen: list[dict] | None = None) -> None:
    """The round's ledger record, as JSON (into ``$RSI_AGENT_RECORDS`` when set),
    with what the upstream saw and billed (``seen``: its request log)."""
    import json

    out = Path(os.environ.get("RSI_AGENT_RECORDS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}-record.json").write_text(rec.model_dump_json(by_alias=True, indent=1))
    if seen is not None:
        routes = sorted({(r["route"], r["stream"]) for r in seen})
        (out / f"{name}-upstream.json").write_text(json.dumps({"routes": routes, **upstream_billed(seen)}))


def no_secret_anywhere(tmp_path: Path, repo: Path, events: list, *, disguised: bool = False) -> None:
    """The key is in no file of the state dir, no commit of any branch, no
    event (nor any disguise of it, with ``disguised``)."""
    from harness import leaks

    def clean(text: str) -> bool:
        return API_KEY not in text and not (disguised and leaks.found(text, [API_KEY]))

    for p in (tmp_path / "state").rglob("*"):
        if p.is_file() and not p.is_symlink():
            assert clean(p.read_text(errors="replace")), p
    import subprocess

    ledger = subprocess.run(["git", "log", "-p", "--all"], cwd=repo, capture_output=True, text=True).stdout
    assert clean(ledger)
    assert all(clean(e.model_dump_json()) for e in events)


def test_mini_swe_agent_makes_a_verified_candidate(tmp_path: Path, fakemodel: FakeModel):
    repo, res, recs, events = run_agent(tmp_path, fakemodel, "mini-swe-agent", "mini-ok", verifier="sandbox",
                                        extra="max_tokens = 3000\n", rounds=2)
    (c,) = res.candidates  # the token budget (3,000) is spent after round 1: no round 2
    assert c.decision == "accept", c.reason
    assert c.hypothesis.startswith("cut the per-request delay")
    assert res.status == "finished" and res.reason.startswith("token budget spent: 3,720 of 3,000")
    rec = recs[0]
    assert rec.files == ["app/settings.toml"] and rec.lines_added == 1 and rec.lines_removed == 1
    assert rec.usage.model_dump(include={"calls", "tokens_in", "tokens_out"}) == MINI_USAGE
    assert rec.usage.cost_usd == pytest.approx((3600 * 2.0 + 120 * 8.0) / 1e6)
    # metered by the gateway; the agent's own trajectory is kept as a cross-check only
    assert rec.usage.wall_s > 0 and rec.usage.source == "gateway" and rec.usage.reported == MINI_USAGE
    assert load_state(tmp_path / "state").spent.tokens == 3720
    seen = fakemodel.requests("mini-ok")
    assert len(seen) == 3 and all(r["key_ok"] for r in seen)
    assert upstream_billed(seen) == MINI_USAGE  # the ledger's usage is the upstream's, exactly
    # the agent read TASK.md with its own tool: the output of `cat` went back to the model
    assert any("make `speed` faster" in m for m in seen[1]["messages"])
    keep_record(tmp_path, "mini-swe-agent", rec, seen)


def test_aider_makes_a_verified_candidate(tmp_path: Path, fakemodel: FakeModel):
    repo, res, recs, events = run_agent(tmp_path, fakemodel, "aider", "aider-ok", verifier="sandbox")
    (c,) = res.candidates
    assert c.decision == "accept", c.reason
    assert c.hypothesis == "cut delay_ms in app/settings.toml (250 -> 170 ms per request)"
    rec = recs[0]
    assert rec.files == ["app/settings.toml"], rec.files  # no .aider* files in the candidate
    assert rec.usage.model_dump(include={"calls", "tokens_in", "tokens_out"}) == \
        {"calls": 1, "tokens_in": 900, "tokens_out": 40}
    # aider streams: its own report is its tokenizer's estimate; the gateway's meter is the upstream's count
    assert rec.usage.source == "gateway" and rec.usage.reported and rec.usage.reported["calls"] == 1
    seen = fakemodel.requests("aider-ok")
    assert len(seen) == 1 and seen[0]["key_ok"] and seen[0]["stream"]
    assert upstream_billed(seen) == {"calls": 1, "tokens_in": 900, "tokens_out": 40}
    assert any("make `speed` faster" in m for m in seen[0]["messages"])  # TASK.md is aider's message
    keep_record(tmp_path, "aider", rec, seen)


def test_protected_file_edit_is_rejected(tmp_path: Path, fakemodel: FakeModel):
    _, res, recs, _ = run_agent(tmp_path, fakemodel, "mini-swe-agent", "mini-protected")
    (c,) = res.candidates
    assert c.decision == "reject" and "tests/test_core.py" in c.reason and "edit policy" in c.reason
    assert recs[0].usage.calls == 3 and recs[0].verdict is None  # never measured


def test_too_many_changed_lines_is_rejected(tmp_path: Path, fakemodel: FakeModel):
    _, res, _, _ = run_agent(tmp_path, fakemodel, "mini-swe-agent", "mini-toobig")
    (c,) = res.candidates
    assert c.decision == "reject" and "80" in c.reason and "50" in c.reason, c.reason


def test_agent_that_never_finishes_is_an_error_round(tmp_path: Path, fakemodel: FakeModel):
    _, res, recs, _ = run_agent(tmp_path, fakemodel, "mini-swe-agent", "mini-forever", timeout_s=15)
    (c,) = res.candidates
    assert c.decision == "error" and "timed out after 15 s" in c.reason
    assert recs[0].usage.wall_s >= 15


def test_the_agent_never_holds_the_key(tmp_path: Path, fakemodel: FakeModel):
    """The agent looks for the model key in its environment, PID 1's, and every
    file it can read: it is nowhere; the upstream still got it (the gateway's
    injection), and the round's usage is the gateway's meter."""
    repo, res, recs, events = run_agent(tmp_path, fakemodel, "mini-swe-agent", "mini-snoop")
    seen = fakemodel.requests("mini-snoop")
    assert len(seen) == 2 and all(r["key_ok"] for r in seen)  # the upstream got the real key
    observed = "\n".join(seen[1]["messages"])  # what the agent's commands printed
    assert "SNOOP-DONE" in observed and "NOWHERE" in observed and "NOT-IN-ENV" in observed, observed[-2000:]
    assert "OPENAI_API_KEY=rsi-gw-" in observed and "OPENAI_API_BASE=http://rsi-model-gateway:4000/v1" in observed
    assert API_KEY not in observed and "FOUND:" not in observed
    assert recs[0].usage.source == "gateway" and recs[0].usage.calls == 2
    assert recs[0].usage.tokens_in == 500 + 1400 and recs[0].usage.tokens_out == 30 + 10
    no_secret_anywhere(tmp_path, repo, events)


def test_a_key_the_agent_learns_leaves_in_no_disguise(tmp_path: Path, fakemodel: FakeModel):
    """A prompt injection hands the agent the key: it writes it reversed in its
    hypothesis and base64-encoded in a file. Both are found, the round is an
    error that names where (never the key), and nothing of it is committed."""
    from harness import leaks

    repo, res, recs, events = run_agent(tmp_path, fakemodel, "mini-swe-agent", "mini-disguise")
    (c,) = res.candidates
    assert c.decision == "error", c.reason
    assert "carried a secret" in c.reason and "the hypothesis" in c.reason and "app/notes.b64" in c.reason
    assert not leaks.found(c.reason, [API_KEY]) and not leaks.found(c.hypothesis, [API_KEY])
    assert c.hypothesis == "tuned [REDACTED]"
    assert not c.sha and not recs[0].sha  # nothing committed
    import subprocess

    branches = subprocess.run(["git", "branch", "--list", "rsi/*"], cwd=repo, capture_output=True, text=True).stdout
    assert "rsi/t-mini-disguise/1" not in branches
    no_secret_anywhere(tmp_path, repo, events, disguised=True)


def test_the_gateway_holds_the_token_budget(tmp_path: Path, fakemodel: FakeModel):
    """1,000 tokens: the first call (1,050) is let through, every later one is
    refused by the gateway; the agent's own count does not matter."""
    _, res, recs, _ = run_agent(tmp_path, fakemodel, "mini-swe-agent", "mini-budget", extra="max_tokens = 1000\n",
                                rounds=2)
    (c,) = res.candidates
    assert c.decision == "error" and "the model gateway refused" in c.reason, c.reason
    assert "token budget spent: 1,050 tokens used this round, 1,000 were left" in c.reason
    assert len(fakemodel.requests("mini-budget")) == 1  # refused calls never reach the model
    assert recs[0].usage.source == "gateway" and recs[0].usage.tokens == 1050
    assert res.reason.startswith("token budget spent: 1,050 of 1,000")


def test_model_endpoint_down_is_an_error_round(tmp_path: Path, fakemodel: FakeModel):
    """The profile allows only a host that does not resolve: the proxy cannot
    connect, the agent gives up after its retries, and the round is an error."""
    before = len(fakemodel.requests())
    _, res, recs, _ = run_agent(tmp_path, fakemodel, "mini-swe-agent", "mini-ok", host="down.rsi.test")
    (c,) = res.candidates
    assert res.status == "finished"
    assert c.decision == "error" and "exited with code 1" in c.reason, c.reason
    assert recs[0].decision == "error" and recs[0].usage.calls == 0
    assert len(fakemodel.requests()) == before  # nothing reached any model


def test_aider_without_a_model_reply_is_an_error_round_not_a_no_change(tmp_path: Path, fakemodel: FakeModel):
    """aider exits 0 when its model refuses it; no reply at all is an error, not a reject."""
    _, res, recs, _ = run_agent(tmp_path, fakemodel, "aider", "aider-refused")
    (c,) = res.candidates
    assert c.decision == "error" and "no reply from its model API" in c.reason, c.reason
    assert len(fakemodel.requests("aider-refused")) == 1


# ---- the npm CLIs: claude-code (Anthropic messages) and codex (OpenAI responses) -------------

NPM = {"claude-code": {"base_env": "ANTHROPIC_BASE_URL", "base_path": "", "prefix": "", "model": "cc"},
       "codex": {"base_env": "OPENAI_BASE_URL", "base_path": "/v1", "prefix": "", "model": "codex"}}


def run_npm_agent(tmp_path: Path, fm: FakeModel, kind: str, script: str, **cfg):
    n = NPM[kind]
    return run_agent(tmp_path, fm, kind, f"{n['model']}-{script}", base_env=n["base_env"], base_path=n["base_path"],
                     prefix=n["prefix"], **cfg)


@pytest.mark.parametrize("kind", ["claude-code", "codex"])
def test_npm_agent_makes_a_verified_candidate_through_the_gateway(tmp_path: Path, fakemodel: FakeModel, kind: str):
    """The real CLI edits the checkout with its own shell tool; every call is a
    stream of its provider's wire format, metered by the gateway exactly as the
    upstream billed it (Anthropic's cached input included)."""
    repo, res, recs, events = run_npm_agent(tmp_path, fakemodel, kind, "ok", verifier="sandbox")
    (c,) = res.candidates
    seen = fakemodel.requests(f"{NPM[kind]['model']}-ok")
    route = "messages" if kind == "claude-code" else "responses"
    assert c.decision == "accept", c.reason
    assert c.hypothesis.startswith("cut the per-request delay")
    assert len(seen) >= 2 and all(r["key_ok"] and r["route"] == route and r["stream"] for r in seen), seen
    rec = recs[0]
    assert rec.files == ["app/settings.toml"], rec.files
    assert rec.usage.source == "gateway"
    billed = upstream_billed(fakemodel.requests(f"{NPM[kind]['model']}-ok"))
    assert rec.usage.model_dump(include={"calls", "tokens_in", "tokens_out"}) == billed
    assert billed["tokens_in"] >= NPM_USAGE["prompt_tokens"] + 1500
    no_secret_anywhere(tmp_path, repo, events)
    keep_record(tmp_path, kind, rec, fakemodel.requests(f"{NPM[kind]['model']}-ok"))


@pytest.mark.parametrize("kind", ["claude-code", "codex"])
def test_npm_agent_is_stopped_by_the_budget(tmp_path: Path, fakemodel: FakeModel, kind: str):
    """1,000 tokens: the first call (1,145 billed) goes through, the next is
    refused by the gateway, and the round is an error naming the budget."""
    _, res, recs, _ = run_npm_agent(tmp_path, fakemodel, kind, "budget", extra="max_tokens = 1000\n", rounds=2)
    (c,) = res.candidates
    assert c.decision == "error" and "the model gateway refused" in c.reason, c.reason
    assert "token budget spent: 1,145 tokens used this round, 1,000 were left" in c.reason, c.reason
    billed = upstream_billed(fakemodel.requests(f"{NPM[kind]['model']}-budget"))
    assert recs[0].usage.source == "gateway" and recs[0].usage.tokens == billed["tokens_in"] + billed["tokens_out"]
    assert billed["calls"] == 1
