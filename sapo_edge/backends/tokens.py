"""Tokenising prompts and completions the same way for every backend (framework-free)."""

from __future__ import annotations

from ..config import Config
from .base import Sample


def prompt_ids(tok, messages: list[dict[str, str]], max_prompt_tokens: int) -> list[int]:
    """The chat-template prompt with the assistant prefix, truncated from the left."""
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if not isinstance(ids, list):  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return list(ids)[-max_prompt_tokens:]


def training_sequences(
    tok, samples: list[Sample], cfg: Config, eos_id: int
) -> list[tuple[list[int], list[int], float]]:
    """(prompt ids, completion ids, advantage) per sample, completions re-tokenised locally (EOS
    appended when the completion finished), sorted by length so micro-batches pad little."""
    seqs = []
    max_new_tokens, max_prompt_tokens = cfg.max_new_tokens, cfg.max_prompt_tokens
    for s in samples:
        c = tok(s.completion, add_special_tokens=False)["input_ids"]
        c = (c[: max_new_tokens - 1] + [eos_id]) if s.finished else c[:max_new_tokens]
        if c:
            seqs.append((prompt_ids(tok, s.messages, max_prompt_tokens), c, float(s.advantage)))
    return sorted(seqs, key=lambda x: len(x[0]) + len(x[1]))
