"""Prompt building and answer extraction: the text a model sees and what we read back from it."""

from __future__ import annotations

import time

import pytest

from sapo_edge.rl.prompts import (
    SYSTEM_PROMPT,
    build_messages,
    extract_last_number,
    extract_tagged,
    has_one_wellformed_tag,
)


def test_build_messages_is_system_then_user() -> None:
    msgs = build_messages("Calculate 2 + 3.")
    assert msgs == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "Calculate 2 + 3."},
    ]
    assert "<answer>" in SYSTEM_PROMPT and "</answer>" in SYSTEM_PROMPT
    assert build_messages("q", system_prompt="be brief")[0]["content"] == "be brief"


def test_the_format_example_comes_between_the_system_prompt_and_the_question() -> None:
    msgs = build_messages("Calculate 7 + 1.", example=True)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[0]["content"] == SYSTEM_PROMPT and msgs[-1]["content"] == "Calculate 7 + 1."
    assert extract_tagged(msgs[2]["content"]) == "42"  # it shows the format it asks for
    assert has_one_wellformed_tag(msgs[2]["content"])
    msgs[1]["content"] = "changed"  # a caller's edit stays in its own list
    assert build_messages("q", example=True)[1]["content"] == "Calculate 12 + 30."


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so the sum is 5. <answer>5</answer>", "5"),
        ("<answer>3</answer> wait, no: <answer>4</answer>", "4"),  # the last pair wins
        ("<answer>3</answer> hmm, maybe <answer>4", "3"),  # an unclosed last tag does not count
        ("<answer>\n  Monday \t</answer>", "Monday"),  # content is stripped
        ("<answer>1 2\n3 4</answer>", "1 2\n3 4"),  # inner whitespace is kept (matrices)
        ("<answer></answer>", ""),
        ("<answer>a <answer>b</answer>", "b"),
        ("the answer is 5", None),
        ("</answer>5<answer>", None),
        ("<Answer>5</Answer>", None),  # tags are matched exactly
        ("", None),
    ],
)
def test_extract_tagged(text: str, expected: str | None) -> None:
    assert extract_tagged(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2 + 3 = 5", "5"),
        ("it drops to -12 degrees", "-12"),
        ("x-1", "1"),  # a minus after a word is subtraction, not a sign
        ("pi is about 3.14.", "3.14"),
        ("we need 1,000 apples", "1000"),  # thousands separators are removed
        ("total 1,234,567.5", "1234567.5"),
        ("the list 1,2,3", "3"),  # a comma not followed by exactly three digits separates numbers
        ("no digits here", None),
    ],
)
def test_extract_last_number(text: str, expected: str | None) -> None:
    assert extract_last_number(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("reasoning... <answer>42</answer>", True),
        ("<answer> 42 </answer>", True),
        ("<answer>   </answer>", False),
        ("<answer>1</answer><answer>2</answer>", False),
        ("<answer>1<answer>2</answer>", False),  # two openings, one closing
        ("<answer>1</answer>2</answer>", False),  # one opening, two closings
        ("</answer>42<answer>", False),
        ("<answer>42", False),
        ("42", False),
    ],
)
def test_has_one_wellformed_tag(text: str, expected: bool) -> None:
    assert has_one_wellformed_tag(text) is expected


def test_extraction_is_linear_on_megabytes_of_hostile_text() -> None:
    hostile = [
        "<answer>" * 125_000,
        "</answer>" * 110_000,
        "1,111" * 200_000 + "1",
        "-" * 1_000_000,
        "9" * 1_000_000,
    ]
    start = time.perf_counter()
    for text in hostile:
        extract_tagged(text), extract_last_number(text), has_one_wellformed_tag(text)
    assert extract_tagged("x" * 1_000_000 + "<answer>7</answer>") == "7"
    assert time.perf_counter() - start < 3.0  # linear: ~0.3 s; a backtracking regex takes hours
