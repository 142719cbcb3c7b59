"""A small TOML writer for config dicts: tables, arrays of tables, scalars.

Used for the merged config a verifier in its own process reads
(:meth:`harness.spec.TaskSpec.verifier_config_text`) and for the configs
``rsi demo`` writes: strings, numbers, booleans, lists and tables (no dates,
no None; a type it cannot write is a ``TypeError``).
"""

from __future__ import annotations

import re
from typing import Any


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _toml_value(k)


def dump_toml(data: dict[str, Any]) -> str:
    """A small TOML writer for config dicts (tables, arrays of tables, scalars)."""
    lines: list[str] = []

    def emit(d: dict[str, Any], prefix: str) -> None:
        scalars = {k: v for k, v in d.items() if not isinstance(v, dict) and not _is_aot(v)}
        tables = {k: v for k, v in d.items() if isinstance(v, dict)}
        aots = {k: v for k, v in d.items() if _is_aot(v)}
        for k, v in scalars.items():
            lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
        for k, v in tables.items():
            name = f"{prefix}.{_toml_key(k)}" if prefix else _toml_key(k)
            lines.append("")
            lines.append(f"[{name}]")
            emit(v, name)
        for k, v in aots.items():
            name = f"{prefix}.{_toml_key(k)}" if prefix else _toml_key(k)
            for item in v:
                lines.append("")
                lines.append(f"[[{name}]]")
                emit(item, name)

    emit(data, "")
    return "\n".join(lines).lstrip("\n") + "\n"


def _is_aot(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)
