"""A peer's completions as this node trains and scores them (trainer.Node._rescore).

Each text is first cut after its answer when the node's external_after_answer is "drop" (the
default): the verifier reads only the answer (its last complete <answer>...</answer> pair, or
with lenient scoring its last number), so words after it would be rewarded for an answer they are
no part of, and a classmate could teach the whole class any phrase by writing it after right
answers (docs/results.md, Prank). What is cut off after an answer is followed by the end of turn,
as a finished completion is, so a node keeps learning to stop once it has answered. The kept text
is then tokenised as it will be trained (cut at max_new_tokens, the end of turn when finished)
and the caller scores the text of those tokens: the reward and the advantage belong to what is
trained, cut or not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from ..backends.base import Completion
from .prompts import answer_span


def to_answer(text: str, finished: bool, lenient: bool) -> tuple[str, bool]:
    """(the text up to the end of its answer, finished): a text that went on after its answer
    ends there and is finished (its end of turn is trained); one with no answer, or nothing
    after it, is kept as it came."""
    span = answer_span(text, lenient)
    if span is None or span[1] == len(text):
        return text, finished
    return text[: span[1]], True


def peer_completions(
    backend: Any,
    sent: Iterable[tuple[str, bool]],
    cfg: Any,
    count: Callable[[str, int], None],
) -> list[Completion]:
    """Each (text, finished) a peer sent as this node trains it; `count(reason, n)` hears how
    many were cut after their answer (peer_after_answer), cut at this node's max_new_tokens
    (peer_cut: longer than it, unfinished) and changed by the tokenizer's normaliser
    (peer_text_changed): all of them scored on the text they train."""
    comps, tally = [], Counter()
    for text, finished in sent:
        kept = text
        if cfg.external_after_answer == "drop":
            kept, finished = to_answer(text, finished, cfg.lenient)
        c = backend.encode_completion(kept, finished=finished, max_new_tokens=cfg.max_new_tokens)
        whole = backend.encode_completion(kept, finished=finished, max_new_tokens=2**31)
        comps.append(c)
        tally["peer_after_answer"] += kept != text
        tally["peer_cut"] += c != whole
        tally["peer_text_changed"] += whole.text != kept
    for reason, n in tally.items():
        if n:
            count(reason, n)
    return comps
