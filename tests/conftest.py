"""Shared pytest fixtures: a tiny random Qwen2 model directory, built offline once per session."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_model import build_tiny_qwen  # pytest's default import mode puts tests/ on sys.path


@pytest.fixture(scope="session")
def tiny_qwen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory loadable by AutoModelForCausalLM / AutoTokenizer.from_pretrained (2 layers, ~770 tokens)."""
    return build_tiny_qwen(tmp_path_factory.mktemp("tiny-qwen"))
