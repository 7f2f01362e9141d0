"""The presets shipped inside the package (sapo_edge/presets/*.toml) behind --preset: their names,
one-line summaries and settings."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from .errors import ConfigError

PRESET_DIR = Path(__file__).parents[1] / "presets"  # sapo_edge/presets/


def preset_names() -> list[str]:
    """The presets shipped inside the package (sapo_edge/presets/*.toml)."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.toml"))


def preset_summary(name: str) -> str:
    """The first comment line of a preset file: what it is for."""
    text = (PRESET_DIR / f"{name}.toml").read_text(encoding="utf-8")
    first = next((ln for ln in text.splitlines() if ln.startswith("#")), "# ")
    return first.lstrip("# ").strip()


def load_preset(name: str) -> dict[str, Any]:
    """A preset's settings as a dict (validated when a Config is built from it)."""
    if name not in preset_names():
        raise ConfigError(f"preset {name!r} is unknown: use one of {', '.join(preset_names())}.")
    data = tomllib.loads((PRESET_DIR / f"{name}.toml").read_text(encoding="utf-8"))
    data.pop("preset", None)
    return data
