"""Reading settings: a config file (TOML, or JSON as saved), a preset under it and the flags over
it (`read_settings`), then the table checked against Config's fields, names and types
(`config_from_dict`), with a clear error for each mistake. Config.load and Config.from_dict
call these.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import tomllib
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .presets import load_preset, preset_names


def read_settings(
    path: str | Path, overrides: dict[str, Any] | None = None
) -> tuple[dict[str, Any], str]:
    """(the settings table, where it came from): defaults < preset < file < overrides."""
    data: dict[str, Any] = {}
    if path:
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(
                f"cannot read config file {p}: {e.strerror or e}; check the --config path."
            ) from None
        except UnicodeDecodeError:
            raise ConfigError(
                f"config file {p} is not UTF-8 text: pass a TOML (or .json) settings file."
            ) from None
        try:
            data = tomllib.loads(text) if p.suffix != ".json" else json.loads(text)
        except (tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
            raise ConfigError(
                f"config file {p} is not valid {'JSON' if p.suffix == '.json' else 'TOML'}: {e}."
            ) from None
        if not isinstance(data, dict):
            raise ConfigError(f"config file {p} must hold a table of settings.")
    data.update(overrides or {})
    preset = data.get("preset", "")
    if preset:  # defaults < preset < file < flags
        if not isinstance(preset, str) or preset not in preset_names():
            raise ConfigError(
                f"preset {preset!r} is unknown: use one of {', '.join(preset_names())}."
            )
        data = {**load_preset(preset), **data}
    return data, str(path) if path else "flags"


def write_settings(path: Path, data: dict[str, Any]) -> None:
    """A settings table as JSON (config.json beside a node's checkpoints)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def fields_where(cls: Any, key: str, *values: str) -> frozenset[str]:
    """The names of `cls`'s (Config's) fields whose metadata `key` is one of `values`: `when`
    (load: fixed when the model loads; restart: a running node cannot take it; network: the
    transport owns it; else it may change between rounds) and `scope` (local: each laptop's
    own in a class; both: the class's, and a student's flag wins; never: not sent to a class;
    else the class's)."""
    return frozenset(f.name for f in dataclasses.fields(cls) if f.metadata.get(key) in values)


def config_from_dict(cls: Any, data: dict[str, Any], source: str) -> Any:
    """`cls` (Config) from a table: an unknown name says the closest known one."""
    known = {f.name: f for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = (
                f" Did you mean {close[0]!r}?"
                if close
                else " Remove it; `sapo-edge run --help` lists every setting."
            )
            raise ConfigError(f"{source}: unknown setting {key!r}.{hint}")
        values[key] = _coerce(key, value, known[key].type, source)
    return cls(**values)


_TYPES = {"int": int, "float": float, "bool": bool, "str": str, "dict": dict, "list": list}


def _coerce(key: str, value: Any, type_name: Any, source: str) -> Any:
    want = _TYPES[type_name if isinstance(type_name, str) else type_name.__name__]
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if want is int and isinstance(value, bool) or not isinstance(value, want):
        raise ConfigError(
            f"{source}: {key} should be {want.__name__}, got {type(value).__name__} {value!r}."
        )
    return value
