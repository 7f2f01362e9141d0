"""The errors a user fixes by changing what they typed: a setting (ConfigError) or a model name
(ModelNotFound). Here, below the settings, their checks and presets, the model resolver and
`backends/gguf_convert.py` (which reads GGUF files), so all of them can raise one."""

from __future__ import annotations


class ConfigError(ValueError):
    """A config value a run cannot use; the message says what to change."""


class ModelNotFound(ValueError):
    """The model cannot be found or loaded offline; the message names the fix."""
