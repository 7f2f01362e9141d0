"""Chat prompt and answer extraction: pure string functions, linear-time on any input."""

from __future__ import annotations

import re

OPEN, CLOSE = "<answer>", "</answer>"

# Short on purpose: every prompt token is re-processed for each of the G completions in training.
SYSTEM_PROMPT = (
    "Think briefly, then end with the final answer alone in tags, e.g. <answer>42</answer>."
)

# A number: optional minus (not when it follows a word or ")" as in "x-1" or "(3)-2"), digits with
# optional thousands separators ("1,000" is one number, "1,2" two), optional decimal part.
_NUMBER = re.compile(r"(?:(?<![\w)])-)?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?")


# One worked exchange shown before the question when the config's format_example is on: a model
# too small to follow the system prompt's format copies it from an example (SmolLM2-135M tags a
# third of its answers with it, none without: experiments/v4.toml). What it teaches is the
# format, the answer alone in tags at the end; its answer, 42 (the system prompt's), lies outside
# the one-digit tasks' answers, so copying the example's number never earns a reward there.
EXAMPLE = (
    {"role": "user", "content": "Calculate 12 + 30."},
    {"role": "assistant", "content": "12 + 30 = 42. <answer>42</answer>"},
)


# The format instruction said again in the user's turn, after each question, when the config's
# format_instruction is on (experiments/aha_speedup.toml): SmolLM2-135M all but ignores it in the
# system prompt (1 tagged answer in 6,912 without the example), and a node that can find the
# format alone, rarely, is what asks whether sharing speeds up what it could learn by itself.
# Its base rate under this wording is in docs/results.md (experiments/base_rate.py); a wording
# with "your answer" in the tags was copied literally.
INSTRUCTION = "End your reply with <answer>N</answer>, where N is the answer."


def build_messages(
    question: str,
    system_prompt: str = SYSTEM_PROMPT,
    example: bool = False,
    instruction: bool = False,
) -> list[dict[str, str]]:
    """System + user chat messages for one question, with the worked EXAMPLE between them when
    example is true, and every user turn (the example's too) followed by INSTRUCTION when
    instruction is true. Sampling, training and evaluation build a node's prompts with this one
    function and the same flags, so a completion is trained on the prompt it was sampled from."""
    shown = [dict(m) for m in EXAMPLE] if example else []
    if instruction:
        for m in shown:
            m["content"] = _instructed(m["content"]) if m["role"] == "user" else m["content"]
        question = _instructed(question)
    return [
        {"role": "system", "content": system_prompt},
        *shown,
        {"role": "user", "content": question},
    ]


def _instructed(text: str) -> str:
    return f"{text}\n{INSTRUCTION}"


def node_messages(question: str, cfg) -> list[dict[str, str]]:
    """build_messages with a node's settings (cfg.format_example, cfg.format_instruction)."""
    return build_messages(question, example=cfg.format_example, instruction=cfg.format_instruction)


def extract_tagged(text: str) -> str | None:
    """Content of the last complete <answer>...</answer> pair, stripped; None if there is none.

    Tags are matched exactly (lower case, no spaces inside the brackets); an opening tag left
    unclosed at the end does not count, so the last closed pair before it wins.
    """
    pair = _last_pair(text)
    return None if pair is None else text[pair[0] + len(OPEN) : pair[1]].strip()


def _last_pair(text: str) -> tuple[int, int] | None:
    """(where <answer> starts, where </answer> starts) of the last complete pair; None if none."""
    close = text.rfind(CLOSE)
    start = text.rfind(OPEN, 0, close) if close >= 0 else -1
    return None if start < 0 else (start, close)


def extract_last_number(text: str) -> str | None:
    """The last number in the text, thousands separators removed ("1,000" -> "1000"); None if none."""
    last = _last_number(text)
    return None if last is None else last.group().replace(",", "")


def _last_number(text: str) -> re.Match | None:
    last = None
    for last in _NUMBER.finditer(text):  # noqa: B007 - we want the final match
        pass
    return last


def answer_span(text: str, lenient: bool = False) -> tuple[int, int] | None:
    """Where the answer score_completion reads lies in the text, as [start, end): its last
    complete <answer>...</answer> pair, tags included; with lenient and no such pair, its last
    number; None when it has no answer (it scores 0). Text after `end` is never checked."""
    pair = _last_pair(text)
    if pair is not None:
        return pair[0], pair[1] + len(CLOSE)
    last = _last_number(text) if lenient else None
    return None if last is None else last.span()


def has_one_wellformed_tag(text: str) -> bool:
    """Exactly one <answer> and one </answer>, in that order, with non-blank content between."""
    if text.count(OPEN) != 1 or text.count(CLOSE) != 1:
        return False
    start, close = text.find(OPEN), text.find(CLOSE)
    return start < close and text[start + len(OPEN) : close].strip() != ""
