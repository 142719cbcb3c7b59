"""Serving settings, read once from ``settings.toml`` next to this file."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

PATH = Path(__file__).with_name("settings.toml")


@dataclass(frozen=True)
class Settings:
    threads: int = 1          # torch intra-op threads
    rope_variant: str = ""    # a kernels.rope variant; "" lets kernels choose


def load(path: Path = PATH) -> Settings:
    data = tomllib.loads(path.read_text()) if path.exists() else {}
    unknown = set(data) - set(Settings.__dataclass_fields__)
    if unknown:
        raise ValueError(f"{path}: unknown settings {sorted(unknown)}")
    return Settings(**data)


SETTINGS = load()
