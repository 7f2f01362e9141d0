"""Completion rewards: strict binary verifier reward by default, with opt-in lenient and format modes."""

from __future__ import annotations

import time

import pytest
from task_configs import ONE_DIGIT_ADD

from sapo_edge.data.tasks import Task, TaskRef, regenerate, verifier_score
from sapo_edge.rl.rewards import RewardConfig, score_completion


@pytest.fixture(scope="module")
def task() -> Task:
    """A demo question whose answer is one of the digits 1..8."""
    for index in range(200):
        t = regenerate(TaskRef.make("basic_arithmetic", ONE_DIGIT_ADD, 0, index))
        if len(t.answer) == 1 and t.answer in "12345678":
            return t
    raise AssertionError("no single-digit answer in 200 demo questions")


def wrong(task: Task) -> str:
    return str(int(task.answer) + 1)


def test_correct_tagged_answer_scores_one_and_wrong_scores_zero(task: Task) -> None:
    assert (
        score_completion(task, f"Adding gives {task.answer}.\n<answer>{task.answer}</answer>")
        == 1.0
    )
    assert score_completion(task, f"<answer>{wrong(task)}</answer>") == 0.0


def test_padded_answers_get_nothing_unless_partial_credit_is_on(task: Task) -> None:
    padded = "1 2 3 4 5 6 7 8"
    raw = verifier_score(task, padded)
    assert 0.0 < raw < 1.0  # reasoning-gym's substring credit: len(oracle) / len(answer)
    assert score_completion(task, f"<answer>{padded}</answer>") == 0.0
    assert score_completion(
        task, f"<answer>{padded}</answer>", RewardConfig(partial_credit=True)
    ) == pytest.approx(raw)
    assert score_completion(task, f"<answer>{task.answer} {task.answer}</answer>") == 0.0


def test_the_last_complete_tag_is_the_answer(task: Task) -> None:
    assert (
        score_completion(
            task, f"<answer>{wrong(task)}</answer> no wait <answer>{task.answer}</answer>"
        )
        == 1.0
    )
    assert (
        score_completion(
            task, f"<answer>{task.answer}</answer> no wait <answer>{wrong(task)}</answer>"
        )
        == 0.0
    )
    assert (
        score_completion(task, f"<answer>{task.answer}</answer> or maybe <answer>{wrong(task)}")
        == 1.0
    )


def test_whitespace_inside_tags_is_ignored(task: Task) -> None:
    assert score_completion(task, f"<answer>\n   {task.answer}  \n</answer>") == 1.0


def test_untagged_answer_scores_zero_when_strict_and_partly_when_lenient(task: Task) -> None:
    text = f"The sum is {task.answer}"
    assert score_completion(task, text) == 0.0
    assert score_completion(task, text, RewardConfig(lenient=True)) == 0.5
    assert score_completion(task, text, RewardConfig(lenient=True, lenient_credit=0.25)) == 0.25
    assert score_completion(task, f"The sum is {wrong(task)}", RewardConfig(lenient=True)) == 0.0
    # a tag, even a wrong one, is the answer: lenient mode never overrides it
    assert (
        score_completion(
            task, f"<answer>{wrong(task)}</answer> {task.answer}", RewardConfig(lenient=True)
        )
        == 0.0
    )


def test_format_bonus_needs_exactly_one_wellformed_tag(task: Task) -> None:
    cfg = RewardConfig(format_reward=0.1)
    assert score_completion(task, f"<answer>{task.answer}</answer>", cfg) == pytest.approx(1.1)
    assert score_completion(task, f"<answer>{wrong(task)}</answer>", cfg) == pytest.approx(0.1)
    assert (
        score_completion(task, f"<answer>{wrong(task)}</answer><answer>{task.answer}</answer>", cfg)
        == 1.0
    )
    assert score_completion(task, "<answer> </answer>", cfg) == 0.0
    assert score_completion(task, f"<answer>{task.answer}</answer>") == 1.0  # off by default


def test_over_long_answers_score_zero() -> None:
    # decimal_arithmetic compares numbers, so trailing zeros keep an answer correct
    task = regenerate(TaskRef.make("decimal_arithmetic", None, 0, 0))
    padded = task.answer + ("" if "." in task.answer else ".") + "0" * 600
    assert verifier_score(task, padded) == 1.0
    assert score_completion(task, f"<answer>{padded}</answer>") == 0.0
    assert (
        score_completion(task, f"<answer>{padded}</answer>", RewardConfig(max_answer_chars=1000))
        == 1.0
    )


def test_megabyte_completions_are_scored_fast(task: Task) -> None:
    start = time.perf_counter()
    assert score_completion(task, "blah " * 200_000 + f"<answer>{task.answer}</answer>") == 1.0
    assert (
        score_completion(task, "<answer>" * 125_000, RewardConfig(lenient=True, format_reward=0.1))
        == 0.0
    )
    assert score_completion(task, f"<answer>{task.answer * 1_000_000}</answer>") == 0.0
    assert time.perf_counter() - start < 3.0  # linear work: ~0.1 s


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lenient_credit": 1.5}, "lenient_credit must be between 0 and 1"),
        ({"lenient_credit": float("nan")}, "lenient_credit must be between 0 and 1"),
        ({"format_reward": -0.1}, "format_reward must be between 0 and 1"),
        ({"max_answer_chars": 0}, "max_answer_chars must be a positive integer"),
        ({"max_answer_chars": 10.5}, "max_answer_chars must be a positive integer"),
        ({"lenient_credit": True}, "lenient_credit must be between 0 and 1"),  # a bool: no
        ({"lenient_credit": "0.5"}, "lenient_credit must be between 0 and 1"),
        ({"format_reward": True}, "format_reward must be between 0 and 1"),
        ({"format_reward": 1.5}, "format_reward must be between 0 and 1"),
        ({"format_reward": float("inf")}, "format_reward must be between 0 and 1"),
        ({"lenient": "yes"}, "lenient must be true or false"),
        ({"partial_credit": 1}, "partial_credit must be true or false"),
    ],
)
def test_reward_config_rejects_bad_values(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RewardConfig(**kwargs)


def test_reward_config_takes_the_ends_of_its_ranges() -> None:
    for lenient_credit, format_reward in ((0.0, 0.0), (1.0, 1.0), (0, 1)):
        cfg = RewardConfig(lenient_credit=lenient_credit, format_reward=format_reward)
        assert (cfg.lenient_credit, cfg.format_reward) == (lenient_credit, format_reward)
    assert RewardConfig(max_answer_chars=1).max_answer_chars == 1


def test_an_answer_exactly_max_answer_chars_long_is_scored(task: Task) -> None:
    cfg = RewardConfig(max_answer_chars=len(task.answer))
    assert score_completion(task, f"<answer>{task.answer}</answer>", cfg) == 1.0
    assert score_completion(task, f"<answer> {task.answer}0</answer>", cfg) == 0.0  # one over


def test_completion_must_be_text(task: Task) -> None:
    with pytest.raises(TypeError, match="got bytes; decode it"):
        score_completion(task, b"<answer>5</answer>")  # type: ignore[arg-type]
