"""The JSON Schema of ``.rsi/config.toml``, generated from the pydantic models.

``docs/schema/rsi-config.schema.json`` is this module's output, checked in so
that TOML editors (Taplo, Even Better TOML) can validate and complete the
config; a test fails when it is stale. Regenerate it with
``rsi config schema --out docs/schema/rsi-config.schema.json``.

The models are the verifier's (``benchmarks`` ... ``hidden``) and the
harness's (``knobs``, ``policy``, ``agent``, ``runner``). Field descriptions
come from their attribute docstrings, read from the source with ``ast``.
"""

from __future__ import annotations

import ast
import inspect
import json
import textwrap
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_ID = "https://raw.githubusercontent.com/rsi-bot/rsi-bot/main/docs/schema/rsi-config.schema.json"
SCHEMA_PATH = "docs/schema/rsi-config.schema.json"
_MORE_DOCS: dict[str, dict[str, str]] = {
    # fields whose models carry no docstring; the models' own docstrings win
    "Objective": {"benchmark": "The benchmark (a name under [benchmarks]).",
                  "metric": "The metric to improve; its direction is the benchmark's."},
    "Guard": {"metric": "The guarded metric (declared, derived like latency_p95_s, or measured).",
              "benchmark": "Default: the objective's benchmark.",
              "max_ratio": "candidate / reference <= this (lower-is-better metrics).",
              "min_ratio": "candidate / reference >= this (higher-is-better metrics).",
              "max_delta": "candidate - reference <= this, in the metric's unit.",
              "min_delta": "candidate - reference >= this, in the metric's unit."},
    "QualityGuard": {"kind": "wer, output_length, allclose, waveform or tensor.",
                     "benchmark": "Default: the objective's benchmark.",
                     "rtol": "allclose/tensor: relative tolerance (default: the dtype's row).",
                     "atol": "allclose/tensor: absolute tolerance (default: the dtype's row)."},
    "BenchmarkConfig": {"env": "Environment variables for every run of this benchmark."},
    "AgentSettings": {"rounds": "Agent rounds of a task (the budget; `/rsi budget N` changes it)."},
    "Knob": {"name": "The knob's name (unique).",
             "file": "The file holding the setting (a path in the repository)."},
    "RunnerProfile": {"image": "Container image of agent and verifier runs.",
                      "device": "cpu, cuda or npu.", "cpus": "CPU limit of a container.",
                      "memory": "Memory limit of a container (docker syntax: 4g).",
                      "pids": "Process limit of a container.",
                      "env": "Environment variables of the profile's containers."},
    "RunnerSettings": {"profile": "The profile tasks use (a name under profiles).",
                       "profiles": "Runner profiles by name ([runner.profiles.<name>])."},
    "VerifierSettings": {"max_pairs": "Most pairs before the verdict is inconclusive.",
                         "seed": "Seed of the run order and the bootstrap.",
                         "default_guards": "Add the default guards (tail latency, peak memory)."},
}
_INTERNAL = {"BenchmarkConfig": ("name",), "Guard": ("default",), "EditPolicy": ("narrow",),
             "Hidden": ("seed",)}
"""Fields the program fills in, never written in a config."""


def _repo_config_model() -> type[BaseModel]:
    from harness.policy import EditPolicy
    from harness.sections import AgentSettings, BotSettings, Knob, RunnerSettings
    from verifier.config import (
        BenchmarkConfig,
        Guard,
        Hidden,
        Objective,
        QualityGuard,
        VerifierSettings,
    )

    class RepoConfig(BaseModel):
        """rsi-bot's repo config, `.rsi/config.toml` (read from the default branch)."""

        model_config = ConfigDict(extra="forbid", title="rsi-bot repo config")
        benchmarks: dict[str, BenchmarkConfig] = Field(
            description="Benchmarks by name: a command that writes $RSI_RESULT, or serve + client.")
        objective: Objective = Field(description="What to improve, and the smallest gain worth a PR.")
        guards: list[Guard] = Field(default_factory=list,
                                    description="Bounds on how much worse a metric may get.")
        quality: list[QualityGuard] = Field(default_factory=list,
                                            description="Checks on what the benchmark outputs.")
        verifier: VerifierSettings = Field(default_factory=VerifierSettings,
                                           description="The verifier's statistics and run counts.")
        hidden: Hidden = Field(default_factory=Hidden,
                               description="Inputs only the verifier sees.")
        knobs: list[Knob] = Field(default_factory=list,
                                  description="Settings the tuner agent may change.")
        policy: EditPolicy = Field(default_factory=EditPolicy,
                                   description="What an agent may edit.")
        agent: AgentSettings = Field(default_factory=AgentSettings,
                                     description="Who proposes candidates, and the round budget.")
        runner: RunnerSettings = Field(default_factory=RunnerSettings,
                                       description="Where agents and benchmarks run.")
        bot: BotSettings = Field(default_factory=BotSettings,
                                 description="What the bot does for this repository.")

    return RepoConfig


def attribute_docs(cls: type) -> dict[str, str]:
    """``{field: docstring}`` for ``field: T = ...`` followed by a string literal."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for a, b in zip(body, body[1:], strict=False):
            if (isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name)
                    and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant)
                    and isinstance(b.value.value, str)):
                out[a.target.id] = " ".join(b.value.value.split())
    return out


def _models(model: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """Every model reachable from ``model``'s fields, by class name."""
    seen: dict[str, type[BaseModel]] = {}

    def walk(tp: Any) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if tp.__name__ in seen:
                return
            seen[tp.__name__] = tp
            for f in tp.model_fields.values():
                walk(f.annotation)
        for arg in getattr(tp, "__args__", ()) or ():
            walk(arg)

    walk(model)
    return seen


def config_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the repo config."""
    model = _repo_config_model()
    schema = model.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = SCHEMA_ID
    defs = schema.get("$defs", {})
    for name, cls in _models(model).items():
        d = defs.get(name)
        if d is None:
            continue
        docs = {**_MORE_DOCS.get(name, {}), **attribute_docs(cls)}
        for field, prop in d.get("properties", {}).items():
            if "description" not in prop and docs.get(field):
                prop["description"] = docs[field]
        for field in _INTERNAL.get(name, ()):
            d.get("properties", {}).pop(field, None)
            if field in d.get("required", []):
                d["required"].remove(field)
    return schema


def schema_text() -> str:
    return json.dumps(config_schema(), indent=2, sort_keys=True) + "\n"


# ------------------------------------------------ docs/configuration.md tables

DOC_TABLES = {
    "benchmarks": "BenchmarkConfig", "objective": "Objective", "guards": "Guard",
    "quality": "QualityGuard", "verifier": "VerifierSettings", "hidden": "Hidden",
    "knobs": "Knob", "policy": "EditPolicy", "agent": "AgentSettings",
    "runner": "RunnerSettings", "runner.profiles": "RunnerProfile", "bot": "BotSettings",
}
"""Which model documents which table of docs/configuration.md."""
DOCS_PATH = "docs/configuration.md"


def _type(prop: dict[str, Any]) -> str:
    if "enum" in prop:
        return " | ".join(json.dumps(v) for v in prop["enum"])
    if "const" in prop:
        return json.dumps(prop["const"])
    if "$ref" in prop:
        return "table"
    if "anyOf" in prop:
        return " or ".join(t for t in (_type(p) for p in prop["anyOf"]) if t != "null")
    t = prop.get("type", "any")
    if t == "array":
        return f"list of {_type(prop.get('items', {}))}"
    if t == "object":
        extra = prop.get("additionalProperties")
        return f"table of {_type(extra)}" if isinstance(extra, dict) else "table"
    return {"number": "float", "integer": "int", "boolean": "bool", "string": "string"}.get(t, t)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").replace("``", "`")


def key_table(model: str, schema: dict[str, Any] | None = None) -> str:
    """A markdown table of a model's keys: key, type, default, what."""
    d = (schema or config_schema())["$defs"][model]
    required = set(d.get("required", []))
    rows = ["| key | type | default | what |", "|---|---|---|---|"]
    for key, prop in d.get("properties", {}).items():
        default = ("required" if key in required else
                   f"`{json.dumps(prop['default'])}`" if prop.get("default") is not None else "")
        rows.append(f"| `{key}` | {_cell(_type(prop))} | {default} | "
                    f"{_cell(prop.get('description', ''))} |")
    return "\n".join(rows)


def render_doc_tables(doc: str) -> str:
    """``doc`` with every ``<!-- keys:SECTION -->...<!-- /keys -->`` block
    replaced by the current table of that section."""
    import re

    schema = config_schema()

    def fill(m: re.Match) -> str:
        return f"{m.group(1)}\n{key_table(DOC_TABLES[m.group(2)], schema)}\n<!-- /keys -->"

    return re.sub(r"(<!-- keys:([\w.]+) -->)\n.*?<!-- /keys -->", fill, doc, flags=re.S)
