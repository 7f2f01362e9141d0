"""The one error a model name can end in, below both `models.py`, which resolves names, and
`backends/gguf_convert.py`, which reads GGUF files."""

from __future__ import annotations


class ModelNotFound(ValueError):
    """The model cannot be found or loaded offline; the message names the fix."""
