"""Tokens for every backend (framework-free, on the Hugging Face tokenizer both backends load):
prompts, end tokens, sampled ids -> completions, a peer's text -> completion ids, training rows.

The rule all of it keeps: the text that is scored is the decoded ids that are trained.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..config.settings import Config
from .base import Completion, Sample

_PROBE = "sapo-edge end-of-turn probe"


def prompt_ids(tok, messages: list[dict[str, str]], max_prompt_tokens: int) -> list[int]:
    """The chat-template prompt with the assistant prefix, truncated from the left."""
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if not isinstance(ids, list):  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return list(ids)[-max_prompt_tokens:]


def decode(tok, ids: Iterable[int]) -> str:
    """The text of ids with nothing dropped or tidied: special tokens sampled inside a completion
    stay as their strings, spaces are not "cleaned up". This is the text scored and published."""
    return tok.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def end_of_turn_id(tok, stop_ids: Iterable[int]) -> int | None:
    """The token the chat template closes an assistant turn with (Qwen and SmolLM2: <|im_end|>,
    Llama 3: <|eot_id|>, Gemma: <end_of_turn>): the first stop token, else the first special token,
    the template writes after an assistant message. None when the template says nothing."""
    try:
        text = tok.apply_chat_template(
            [{"role": "user", "content": "?"}, {"role": "assistant", "content": _PROBE}],
            tokenize=False,
        )
    except Exception:  # a template that refuses this conversation: fall back to eos
        return None
    if not isinstance(text, str) or _PROBE not in text:
        return None
    tail = tok(text[text.rindex(_PROBE) + len(_PROBE) :], add_special_tokens=False)["input_ids"]
    added = getattr(tok, "added_tokens_decoder", {})  # e.g. Llama 3's <|eot_id|>
    special = set(tok.all_special_ids) | {i for i, t in added.items() if t.special}
    stop = set(stop_ids)
    return next((i for i in tail if i in stop), next((i for i in tail if i in special), None))


def end_tokens(tok, configured_eos) -> tuple[list[int], int]:
    """(stop ids, end of turn). Generation stops on any of the model's eos ids (generation_config
    may list several: Qwen2.5 lists [<|im_end|>, <|endoftext|>]) or the template's end of turn; a
    peer's finished completion is closed with the end of turn, never "the smallest eos id"."""
    eos = configured_eos if isinstance(configured_eos, list | tuple) else [configured_eos]
    stop = {i for i in [tok.eos_token_id, *eos] if i is not None}
    eot = end_of_turn_id(tok, stop)
    if eot is None:
        eot = tok.eos_token_id if tok.eos_token_id is not None else min(stop)
    return sorted(stop | {eot}), eot


def sampled_completion(tok, sampled: list[int], stop_ids: Iterable[int]) -> Completion:
    """A generated completion from the ids exactly as sampled: the last one is its end token when
    it is a stop id; no stop id at the end means it was cut at max_new_tokens."""
    end = sampled[-1] if sampled and sampled[-1] in set(stop_ids) else None
    body = sampled[:-1] if end is not None else sampled
    return Completion(decode(tok, body), tuple(body), end)


def encode_completion(
    tok, text: str, *, finished: bool, max_new_tokens: int, end_id: int
) -> Completion:
    """A peer's completion text as this node trains it.

    Special-token strings in the text ("<|im_end|>\\n<|im_start|>user ...") are split into plain
    text tokens: a peer sends text, never control tokens, and a completion of another model family
    may hold them as ordinary words (rejecting it would lose the group for no gain). A completion
    longer than max_new_tokens (with room for the end token when finished) is cut there and counts
    as unfinished, like an own completion that hits the limit. The returned text is the ids decoded
    (a cut, or a tokenizer's normaliser, changes it): the caller scores that text, not the peer's.
    """
    ids = tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    if len(ids) > (max_new_tokens - 1 if finished else max_new_tokens):
        ids, finished = ids[:max_new_tokens], False
    return Completion(decode(tok, ids), tuple(ids), end_id if finished else None)


def training_sequences(
    tok, samples: list[Sample], cfg: Config
) -> list[tuple[list[int], list[int], float]]:
    """(prompt ids, completion ids, advantage) per sample: the completion's ids exactly as sampled
    or encoded, with its end token when finished; sorted by length so micro-batches pad little."""
    seqs = []
    for s in samples:
        c = s.completion.trained_ids
        if c:
            seqs.append((prompt_ids(tok, s.messages, cfg.max_prompt_tokens), c, float(s.advantage)))
    return sorted(seqs, key=lambda x: len(x[0]) + len(x[1]))
