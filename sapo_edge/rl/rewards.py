"""Completion rewards: the task's verifier on the extracted answer, binary by default as in SAPO."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..data.tasks import Task, verifier_score
from .prompts import extract_last_number, extract_tagged, has_one_wellformed_tag


@dataclass(frozen=True)
class RewardConfig:
    """How a completion is turned into a reward; the defaults are the SAPO paper's binary reward."""

    lenient: bool = False  # no <answer> tag -> fall back to the last number in the text
    lenient_credit: float = 0.5  # ...worth this fraction of a tagged answer's reward
    format_reward: float = 0.0  # bonus for exactly one well-formed <answer> tag (0 = off, as SAPO)
    partial_credit: bool = False  # pass reasoning-gym's fractional scores through (off = binary)
    max_answer_chars: int = 512  # a longer extracted answer scores 0 (padding, slow verifiers)

    def __post_init__(self) -> None:
        for name in ("lenient", "partial_credit"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"RewardConfig.{name} must be true or false, got {getattr(self, name)!r}."
                )
        if not _number(self.lenient_credit) or not 0.0 <= self.lenient_credit <= 1.0:
            raise ValueError(
                f"RewardConfig.lenient_credit must be between 0 and 1, got {self.lenient_credit!r}."
            )
        if not _number(self.format_reward) or not 0.0 <= self.format_reward <= 1.0:
            raise ValueError(
                f"RewardConfig.format_reward must be between 0 and 1 (0 turns it off), got {self.format_reward!r}."
            )
        m = self.max_answer_chars
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise ValueError(
                f"RewardConfig.max_answer_chars must be a positive integer, got {m!r}."
            )


def _number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def score_completion(task: Task, completion: str, cfg: RewardConfig = RewardConfig()) -> float:
    """Reward of one completion: correctness of its answer (tagged, or lenient fallback) + format bonus."""
    if not isinstance(completion, str):
        raise TypeError(
            f"a completion is text, got {type(completion).__name__}; decode it before scoring."
        )
    answer, weight = extract_tagged(completion), 1.0
    if answer is None and cfg.lenient:
        answer, weight = extract_last_number(completion), cfg.lenient_credit
    correctness = 0.0
    if answer is not None and len(answer) <= cfg.max_answer_chars:
        score = verifier_score(task, answer)
        correctness = score if cfg.partial_credit else float(score >= 1.0 - 1e-9)
    bonus = cfg.format_reward if cfg.format_reward and has_one_wellformed_tag(completion) else 0.0
    return weight * correctness + bonus
