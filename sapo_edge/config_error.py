"""The one error a setting can raise, below config.py, its checks and its presets."""

from __future__ import annotations


class ConfigError(ValueError):
    """A config value a run cannot use; the message says what to change."""
