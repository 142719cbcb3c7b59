"""Merging a proposal's overrides into the repo config.

Proposals only tighten. The repo config (default branch, maintainers) sets
every rule; a proposal may make a rule stricter, within hard upper bounds
(so a proposal cannot make a task unboundedly costly either), and may pick
an agent kind or a runner profile only from the lists the repo config allows.
Every refusal names the field, the repo's bound and what to write instead.

What a proposal may change, and how:

Proposals only tighten, in every field (a looser value is an error saying
the repo's bound), and every number must be a real number of the right kind:

=================  ==========================================================
``objective``      benchmark, metric; ``min_gain`` only raised (<= 10)
``guards``         added; one on the same benchmark+metric as a repo guard, or
                   as a verifier default guard, replaces it only when at least
                   as tight on every bound. Guards are never dropped.
``quality``        added (within hard caps); same rule (kind+output) as guards;
                   ``min_snr_db`` only raised; ``max_samples`` (the CPU
                   per output file) only lowered; ``files``, ``dtype`` and
                   ``reference`` never changed
``verifier``       ``alpha`` only lowered, ``level``, margins, warm-ups, pair
                   counts and bootstrap sizes only raised, all within hard
                   bounds (``VERIFIER_RULES``); the wild-run rule's
                   ``accept_confidence`` and ``accept_max_runs`` only
                   raised, its ``accept_wild_rate`` never (0 is off);
                   ``default_guards``, ``require_external``,
                   ``cross_check`` only turned on; ``seed`` never
``agent``          ``kind`` from ``[agent] allowed_kinds``; ``rounds`` up to
                   ``max_rounds``; ``round_timeout_s``,
                   ``max_straight_rejections``, ``max_tokens`` and
                   ``max_cost_usd`` only lowered
``policy``         only tighter: ``editable`` narrows (a path must match both
                   lists), ``protected`` adds, ``max_changed_lines`` a whole
                   number lowered
``runner``         ``profile``: one of ``[runner] allowed_profiles``
=================  ==========================================================

Guards of every kind follow one registry (:data:`GUARD_FIELDS`,
:data:`QUALITY_FIELDS`): each field's tightening direction; a field of the
guard's model without one is fixed; a field the model lacks is refused.

Everything else (benchmark commands, hidden inputs, knobs, agent commands,
runner profiles) comes from the repo config only. Each section has its merger
(:data:`_TABLES`, :data:`_WHOLE`); errors are collected, never raised.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from harness.policy import EditPolicy
from harness.sections import AgentSettings
from verifier.config import (
    MEASURED,
    PERCENTILES,
    Guard,
    QualityGuard,
    VerifierSettings,
    default_bound,
    percentile_name,
)
from verifier.outfiles import DEFAULT_MAX_SAMPLES
from verifier.qualitykinds import SPECTRAL_MAX_DB

SAFE_AGENT_KINDS = ("tuner", "replay")
"""Kinds a proposal may pick without the repo's ``allowed_kinds``: no external
agent, no API key, no network."""


_ALLOWED = {
    "objective": {"benchmark", "metric", "min_gain"},
    "agent": {"kind", "rounds", "round_timeout_s", "max_straight_rejections", "max_tokens",
              "max_cost_usd"},
    "policy": {"editable", "protected", "max_changed_lines"},
    "runner": {"profile"},
}
_FROM_REPO_ONLY = {
    "benchmarks": "benchmark commands come from .rsi/config.toml on the default branch",
    "hidden": "hidden inputs come from .rsi/config.toml on the default branch",
    "knobs": "knobs come from .rsi/config.toml on the default branch",
    "bot": "what the bot does after a merge is set in .rsi/config.toml on the default branch",
}
#: [verifier] fields a proposal may set: (stricter direction, hard bound). "down":
#: only lower (a stricter test), never below the bound; "up": only raise (more
#: evidence), never above the bound (or the repo's own value, if higher).
VERIFIER_RULES: dict[str, tuple[str, float]] = {
    "alpha": ("down", 1e-4),
    "level": ("up", 0.999),
    "min_noise_margin": ("up", 0.5),
    "warmup": ("up", 10),
    "initial_pairs": ("up", 100),
    "step": ("up", 100),
    "max_pairs": ("up", 200),
    "calibration_pairs": ("up", 50),
    "bootstrap": ("up", 100_000),
    # issue 29's wild-run rule: more confidence, more room to confirm; its
    # accept_wild_rate is not settable (0 turns the rule off, so "lower" is
    # not "stricter")
    "accept_confidence": ("up", 0.9999),
    "accept_max_runs": ("up", 400),
}
_VERIFIER_FLAGS = {"default_guards": True, "require_external": True, "cross_check": True}
"""Boolean [verifier] settings a proposal may only turn to the strict value."""
_INT_FIELDS = {"warmup", "initial_pairs", "step", "max_pairs", "calibration_pairs", "bootstrap",
               "accept_max_runs",
               "rounds", "max_straight_rejections", "max_changed_lines"}
#: How a proposal may change each field of a guard: the registry of guard
#: fields. ``key`` names the guard (a proposal guard with the same key replaces
#: or amends the repo's); ``lower``: an upper bound, only lowered; ``raise``: a
#: lower bound, only raised; ``true``: only set to true; ``verifier``: set by the
#: verifier, never by a proposal. A field of the guard's model without an entry
#: is **fixed**: a proposal may not change it (it may set it on a guard it adds).
#: A field the model does not have is refused.
KEY, LOWER, RAISE, ONLY_TRUE, VERIFIER_ONLY = "key", "lower", "raise", "true", "verifier"
GUARD_FIELDS: dict[str, str] = {
    "metric": KEY, "benchmark": KEY,
    "max_ratio": LOWER, "max_delta": LOWER, "min_ratio": RAISE, "min_delta": RAISE,
    "required": ONLY_TRUE, "default": VERIFIER_ONLY,
}
"""``[[guards]]`` (:class:`verifier.config.Guard`)."""
QUALITY_FIELDS: dict[str, str] = {
    "kind": KEY, "output": KEY, "benchmark": KEY,
    "max": LOWER, "max_delta": LOWER, "max_change": LOWER, "rtol": LOWER, "atol": LOWER,
    "min_snr_db": RAISE, "max_db": LOWER, "max_samples": LOWER,
}
"""``[[quality]]`` (:class:`verifier.config.QualityGuard`); ``files``, ``dtype`` and
``reference`` have no entry: fixed."""
#: Hard caps on the bounds of a quality guard a proposal adds.
_QUALITY_CAPS = {"max": 1.0, "max_delta": 1.0, "max_change": 0.5, "rtol": 1.0, "atol": 1.0,
                 "max_samples": DEFAULT_MAX_SAMPLES,
                 "max_db": 3.0}
_QUALITY_DEFAULTS: dict[str, dict[str, float]] = {
    "output_length": {"max_change": 0.02},
    "spectral": {"max_db": SPECTRAL_MAX_DB, "max_samples": DEFAULT_MAX_SAMPLES},
    "waveform": {"max_samples": DEFAULT_MAX_SAMPLES}}
MAX_MIN_GAIN = 10.0


def _number(v: Any, field: str) -> str | None:
    """Why ``v`` is not a strict number for ``field`` (bools and strings refused)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return f"must be a number, not {type(v).__name__} {reprlib.repr(v)}"
    if field in _INT_FIELDS and not isinstance(v, int):
        return f"must be a whole number, not {reprlib.repr(v)}"
    if v != v or v in (float("inf"), float("-inf")):
        return f"must be a finite number, not {v!r}"
    return None


def _defaults(model: type[BaseModel]) -> dict[str, Any]:
    return model().model_dump()


def _verifier_defaults() -> dict[str, Any]:
    return _defaults(VerifierSettings)


def _agent_defaults() -> dict[str, Any]:
    return _defaults(AgentSettings)


def _bounded(label: str, value: Any, repo: Any, direction: str, cap: float) -> str | None:
    """Check one numeric override against the repo's value and a hard bound."""
    why = _number(value, label.rsplit(" ", 1)[-1])
    if why:
        return f"proposal {label}: {why}"
    if repo is None:
        return None
    if direction == "down":
        if value > repo:
            return (f"proposal {label} = {value} would loosen the repo's {repo}; a proposal "
                    f"may only lower it (between {cap:g} and {repo})")
        if value < cap:
            return f"proposal {label} = {value} is below the lowest allowed, {cap:g}"
    else:
        top = max(cap, repo)
        if value < repo:
            return (f"proposal {label} = {value} would loosen the repo's {repo}; a proposal "
                    f"may only raise it (between {repo} and {top:g})")
        if value > top:
            return f"proposal {label} = {value} is above the highest allowed, {top:g}"
    return None


def _guard_key(g: dict[str, Any], objective_bench: str) -> tuple[str, str]:
    return (str(g.get("benchmark", objective_bench)), str(g.get("metric", "")))


def _bounds(registry: dict[str, str]) -> tuple[tuple[str, bool], ...]:
    """The registry's bounds as (field, is an upper bound)."""
    return tuple((f, rule == LOWER) for f, rule in registry.items() if rule in (LOWER, RAISE))


def _field_problems(g: dict[str, Any], registry: dict[str, str], model: type[BaseModel]
                    ) -> list[str]:
    """What a proposal guard may not carry at all: a field its model does not
    have, a field only the verifier sets, ``required`` other than true, a bound
    that is not a number."""
    out = []
    for k, v in g.items():
        rule = registry.get(k)
        if k not in model.model_fields:
            out.append(f"{str(k)[:40]!r} is not a field of this guard; it has "
                       f"{', '.join(model.model_fields)}")
        elif rule == VERIFIER_ONLY:
            out.append(f"'{k}' is set by the verifier, not by a proposal")
        elif rule == ONLY_TRUE and v is not True:
            out.append(f"a proposal may only set {k} = true")
        elif rule in (LOWER, RAISE) and _number(v, k):
            out.append(f"{k} {_number(v, k)}")
    return out


def _looser(new: dict[str, Any], old: dict[str, Any],
            bounds: tuple[tuple[str, bool], ...] = _bounds(GUARD_FIELDS)) -> str | None:
    """Why ``new`` is looser than ``old`` on some bound (None when not)."""
    for bound, upper in bounds:
        if bound in new and _number(new[bound], bound):
            return f"{bound} {_number(new[bound], bound)}"
        if bound in old:
            if bound not in new:
                return f"drops its {bound} = {old[bound]}"
            a, b = float(new[bound]), float(old[bound])
            if (a > b) if upper else (a < b):
                verb = "raises" if upper else "lowers"
                return f"{verb} {bound} from {old[bound]} to {new[bound]}"
    return None


def _fixed_changed(given: dict[str, Any], old: dict[str, Any], registry: dict[str, str],
                   model: type[BaseModel]) -> str | None:
    """Why ``given`` changes a fixed field of ``old`` (a model field without a
    registry entry), or None."""
    for k, v in given.items():
        if k in model.model_fields and k not in registry:
            was = old.get(k, model.model_fields[k].default)
            if v != was:
                return (f"changes {k} from {was!r} to {v!r} ({k} is fixed: a proposal may not "
                        "change it)")
    return None


def _metric_direction(repo: dict[str, Any], bench: str, metric: str) -> str | None:
    b = (repo.get("benchmarks") or {}).get(bench) or {}
    if not isinstance(b, dict):
        return None
    for key in ("metrics", "samples"):
        d = (b.get(key) or {})
        if isinstance(d, dict) and metric in d:
            return d[metric]
    for series, d in (b.get("samples") or {}).items():
        if metric in {percentile_name(series, q) for q in PERCENTILES}:
            return d
    return MEASURED.get(metric)


def _default_guard(repo: dict[str, Any], bench: str, metric: str) -> dict[str, Any] | None:
    """The guard the verifier adds by default for this metric, if any."""
    if not (repo.get("verifier") or {}).get("default_guards", True):
        return None
    d = _metric_direction(repo, bench, metric)
    bound = default_bound(metric, d) if d else None
    return {"metric": metric, "max_ratio": bound} if bound is not None else None


def _merge_guards(repo: dict[str, Any], merged: dict[str, Any], value: Any,
                  obj_bench: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(g, dict) for g in value):
        return ["proposal [[guards]]: must be an array of tables"]
    errors: list[str] = []
    current = [dict(g) for g in merged.get("guards", [])]
    for i, g in enumerate(value, start=1):
        key = _guard_key(g, obj_bench)
        where = f"proposal guard {i} ({key[1]})"
        bad = _field_problems(g, GUARD_FIELDS, Guard)
        if bad:
            errors.append(f"{where}: {'; '.join(bad)}")
            continue
        same = [j for j, c in enumerate(current) if _guard_key(c, obj_bench) == key]
        old = current[same[0]] if same else _default_guard(repo, *key)
        why = (_looser(g, old) or _fixed_changed(g, old, GUARD_FIELDS, Guard)) if old else None
        if why:
            whose = ("the repo config's guard" if same else "the verifier's default guard")
            have = ", ".join(f"{k} = {v}" for k, v in (old or {}).items()
                             if k not in ("metric", "benchmark", "required", "default"))
            errors.append(f"{where}: {why}; {whose} says {have or 'nothing'}, and a proposal "
                          "may only tighten it")
            continue
        new = dict(g)
        if same:
            if current[same[0]].get("required"):
                new["required"] = True
            current[same[0]] = new
        else:
            current.append(new)
    merged["guards"] = current
    return errors


def _quality_key(q: dict[str, Any], obj_bench: str) -> tuple[str, str, str]:
    return (str(q.get("kind")), str(q.get("output")), str(q.get("benchmark", obj_bench)))


def _merge_quality(merged: dict[str, Any], value: Any, obj_bench: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(g, dict) for g in value):
        return ["proposal [[quality]]: must be an array of tables"]
    errors: list[str] = []
    current = [dict(q) for q in merged.get("quality", [])]
    for i, q in enumerate(value, start=1):
        key = _quality_key(q, obj_bench)
        where = f"proposal quality guard {i} ({key[0]} on {key[1] or q.get('files')})"
        bad = _field_problems(q, QUALITY_FIELDS, QualityGuard)
        if bad:
            errors.append(f"{where}: {'; '.join(bad)}")
            continue
        same = [j for j, c in enumerate(current) if _quality_key(c, obj_bench) == key]
        if not same:
            over = [f"{b} = {q[b]} is above the highest allowed, {cap:,}"
                    for b, cap in _QUALITY_CAPS.items() if b in q and q[b] > cap]
            if over:
                errors.append(f"{where}: {'; '.join(over)}")
            else:
                current.append(dict(q))
            continue
        old = {**_QUALITY_DEFAULTS.get(key[0], {}), **current[same[0]]}
        new = {**_QUALITY_DEFAULTS.get(key[0], {}), **q}
        why = (_looser(new, old, _bounds(QUALITY_FIELDS))
               or _fixed_changed(q, old, QUALITY_FIELDS, QualityGuard))
        if why:
            errors.append(f"{where}: {why}; the repo config's quality guard is "
                          f"{current[same[0]]}, and a proposal may only tighten it")
            continue
        current[same[0]] = {**current[same[0]], **q}
    merged["quality"] = current
    return errors


def _merge_verifier(repo: dict[str, Any], merged: dict[str, Any], value: Any) -> list[str]:
    if not isinstance(value, dict):
        return ["proposal [verifier]: must be a table"]
    base = {**_verifier_defaults(), **(repo.get("verifier") or {})}
    errors: list[str] = []
    ok: dict[str, Any] = {}
    for k, v in value.items():
        if k in VERIFIER_RULES:
            direction, cap = VERIFIER_RULES[k]
            why = _bounded(f"[verifier] {k}", v, base.get(k), direction, cap)
        elif k in _VERIFIER_FLAGS:
            why = None if v is _VERIFIER_FLAGS[k] or v == base.get(k) and isinstance(v, bool) \
                else (f"proposal [verifier] {k}: a proposal may only set it to "
                      f"{str(_VERIFIER_FLAGS[k]).lower()}")
        else:
            why = (f"proposal [verifier] {k}: not settable by a proposal; it may set "
                   f"{', '.join(sorted([*VERIFIER_RULES, *_VERIFIER_FLAGS]))}, each only "
                   "stricter than .rsi/config.toml")
        if why:
            errors.append(why)
        else:
            ok[k] = v
    merged["verifier"] = {**merged.get("verifier", {}), **ok}
    return errors


def _merge_agent(repo: dict[str, Any], merged: dict[str, Any], ok: dict[str, Any]) -> list[str]:
    base = {**_agent_defaults(), **(repo.get("agent") or {})}
    errors: list[str] = []
    allowed = base.get("allowed_kinds") or [base["kind"], *(k for k in SAFE_AGENT_KINDS
                                                            if k != base["kind"])]
    if "kind" in ok and ok["kind"] not in allowed:
        errors.append(f"proposal [agent] kind = {ok['kind']!r}: the repo config allows "
                      f"{', '.join(map(repr, allowed))}; add it to [agent] allowed_kinds in "
                      ".rsi/config.toml to allow it")
    checks = {"rounds": (base.get("max_rounds"), 1), "round_timeout_s": (base["round_timeout_s"], 1),
              "max_straight_rejections": (base["max_straight_rejections"], 1)}
    for k, (top, low) in checks.items():
        if k not in ok:
            continue
        why = _number(ok[k], k)
        if why is None and not low <= ok[k] <= top:
            why = f"= {ok[k]} is outside {low}..{top}, the bounds the repo config sets"
        if why:
            errors.append(f"proposal [agent] {k} {why}")
    for k in ("max_tokens", "max_cost_usd"):  # spending budgets: a proposal only lowers them
        if k in ok and (_number(ok[k], k) or (base.get(k) is not None and ok[k] > base[k])):
            errors.append(f"proposal [agent] {k} = {ok[k]!r}: must be a number no higher than "
                          f"the repo config's ({base.get(k)})")
    merged["agent"] = {**merged.get("agent", {}), **ok}
    return errors


def _merge_runner(repo: dict[str, Any], merged: dict[str, Any], ok: dict[str, Any]) -> list[str]:
    base = repo.get("runner") or {}
    allowed = base.get("allowed_profiles") or [base.get("profile", "cpu")]
    declared = list(base.get("profiles") or {"cpu": {}})
    if "profile" in ok and ok["profile"] not in declared:
        return [f"proposal [runner] profile '{ok['profile']}' is not declared; declared: "
                f"{', '.join(declared)}"]
    if "profile" in ok and ok["profile"] not in allowed:
        return [f"proposal [runner] profile = {ok['profile']!r}: the repo config allows "
                f"{', '.join(map(repr, allowed))}; add it to [runner] allowed_profiles in "
                ".rsi/config.toml to allow it"]
    merged["runner"] = {**merged.get("runner", {}), **ok}
    return []


def _strings(v: Any) -> list[str] | None:
    v = [v] if isinstance(v, str) else v
    return v if isinstance(v, list) and all(isinstance(x, str) for x in v) else None


def _merge_policy(repo: dict[str, Any], merged: dict[str, Any], ok: dict[str, Any]) -> list[str]:
    pol = dict(merged.get("policy", {}))
    errors: list[str] = []
    for k in ("editable", "protected"):
        if k in ok and _strings(ok[k]) is None:
            errors.append(f"proposal [policy] {k}: must be a list of path globs (strings)")
    if "editable" in ok and _strings(ok["editable"]) is not None:
        pol["narrow"] = _strings(ok["editable"])
    if any(g.lstrip().startswith("!") for g in _strings(ok.get("protected")) or []):
        errors.append("proposal [policy] protected: a '!' glob would un-protect paths; a "
                      "proposal may only add protected paths")
    elif "protected" in ok and (added := _strings(ok["protected"])) is not None:
        have = list(pol.get("protected", []))
        pol["protected"] = have + [p for p in added if p not in have]
    if "max_changed_lines" in ok:
        cap = pol.get("max_changed_lines", EditPolicy().max_changed_lines)
        v = ok["max_changed_lines"]
        why = _number(v, "max_changed_lines")
        if why is None and not 1 <= v <= cap:
            why = (f"= {v} is outside 1..{cap}: the repo's cap is {cap} and a proposal may "
                   "only lower it")
        if why:
            errors.append(f"proposal [policy] max_changed_lines {why}")
        else:
            pol["max_changed_lines"] = v
    merged["policy"] = pol
    return errors


def _merge_objective(repo: dict[str, Any], merged: dict[str, Any], ok: dict[str, Any]
                     ) -> list[str]:
    errors = []
    for k in ("benchmark", "metric"):
        if k in ok and not isinstance(ok[k], str):
            errors.append(f"proposal [objective] {k}: must be a name (a string)")
    if "min_gain" in ok:
        floor = float((repo.get("objective") or {}).get("min_gain", 0.0) or 0.0)
        why = _number(ok["min_gain"], "min_gain")
        if why is None and not floor <= ok["min_gain"] <= MAX_MIN_GAIN:
            why = (f"= {ok['min_gain']} is outside {floor:g}..{MAX_MIN_GAIN:g}: the repo "
                   f"config asks for at least {floor:g} and a proposal may only raise it")
        if why:
            errors.append(f"proposal [objective] min_gain {why}")
    if not errors:
        merged["objective"] = {**merged.get("objective", {}), **ok}
    return errors


def _merge_table(section: str, repo: dict[str, Any], merged: dict[str, Any], value: Any
                 ) -> list[str]:
    """A table section (objective, agent, policy, runner): only the keys of
    :data:`_ALLOWED`, then the section's own rules."""
    if not isinstance(value, dict):
        return [f"proposal [{section}]: must be a table"]
    allowed = _ALLOWED[section]
    bad = sorted(set(value) - allowed)
    errors = [f"proposal [{section}] {k}: a proposal may only set {', '.join(sorted(allowed))} "
              f"here; '{k}' comes from .rsi/config.toml" for k in bad]
    ok = {k: v for k, v in value.items() if k not in bad}
    return errors + _TABLES[section](repo, merged, ok)


_TABLES: dict[str, Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], list[str]]] = {
    "objective": _merge_objective, "agent": _merge_agent, "policy": _merge_policy,
    "runner": _merge_runner,
}
"""Table section -> its merger ``(repo, merged, allowed keys) -> errors``."""

_WHOLE: dict[str, Callable[[dict[str, Any], dict[str, Any], Any, str], list[str]]] = {
    "guards": _merge_guards,
    "quality": lambda repo, merged, value, obj_bench: _merge_quality(merged, value, obj_bench),
    "verifier": lambda repo, merged, value, obj_bench: _merge_verifier(repo, merged, value),
}
"""The sections merged whole (guards and quality, arrays of tables; verifier)
-> their merger ``(repo, merged, value, objective benchmark) -> errors``."""


def _merge_section(repo: dict[str, Any], merged: dict[str, Any], section: str, value: Any,
                   obj_bench: str) -> list[str]:
    if section in _FROM_REPO_ONLY:
        return [f"proposal [{section}]: not allowed in a proposal; {_FROM_REPO_ONLY[section]}"]
    if section in _TABLES:
        return _merge_table(section, repo, merged, value)
    if section in _WHOLE:
        return _WHOLE[section](repo, merged, value, obj_bench)
    return [f"proposal [{section}]: unknown section; a proposal may set objective, guards, quality, "
            "verifier, agent, policy and runner"]


def merge_proposal(repo: dict[str, Any], over: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Apply a proposal's overrides to the repo config; return (merged, errors).
    Proposals only tighten (see this module's docstring)."""
    merged = {k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v)
              for k, v in repo.items()}
    ob_over = over.get("objective")
    ob: dict[str, Any] = ob_over if isinstance(ob_over, dict) else {}
    obj_bench = str(ob.get("benchmark") or (repo.get("objective") or {}).get("benchmark", ""))
    errors: list[str] = []
    for section, value in over.items():
        errors += _merge_section(repo, merged, section, value, obj_bench)
    return merged, errors
