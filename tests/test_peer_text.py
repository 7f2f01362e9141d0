"""external_after_answer (sapo_edge/rl/peer_text.py): a peer's text after its answer is not
trained (drop, the default) or all of it is (train, the paper's). What is trained stays what was
scored: the reward and the advantage belong to the cut text, and the verifier's answer is the
same with or without what followed it.

The references here share no code with sapo_edge's answer parsing: the end of the answer is found
with one regular expression per rule, the reward by reading the tagged answer with another, and
the advantages by the GRPO formula written out."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scripted import END, decode, make_cfg, make_node

from sapo_edge.config.settings import Config, ConfigError
from sapo_edge.data.rollout import RolloutGroup
from sapo_edge.data.task_sampler import TaskSampler
from sapo_edge.data.tasks import regenerate
from sapo_edge.rl.peer_text import to_answer
from sapo_edge.rl.rewards import RewardConfig, score_completion
from sapo_edge.swarm.transport import InProcessHub

PIECES = st.sampled_from(
    ["<answer>", "</answer>", "<answer>7</answer>", "7", "12", "1,000", "-3", "4.5", " ", "\n"]
    + ["Tom smells", "so the answer is", "<|im_end|>", "<", ">", "answer", "/", ".", "x-1"]
)
TEXTS = st.lists(st.one_of(PIECES, st.text(max_size=6)), max_size=12).map("".join)


def ref_end(text: str, lenient: bool) -> int | None:
    """Where the answer ends: after the last </answer> that has an <answer> before it; else,
    lenient, after the last digit (every number ends in one); else nowhere."""
    m = re.fullmatch(r"(.*<answer>.*</answer>).*", text, re.S)
    if m:
        return m.end(1)
    m = re.fullmatch(r"(.*\d).*", text, re.S) if lenient else None
    return m.end(1) if m else None


@settings(max_examples=400, deadline=None)
@given(text=TEXTS, finished=st.booleans(), lenient=st.booleans())
def test_a_text_is_cut_where_its_answer_ends_and_then_finishes(text, finished, lenient):
    end = ref_end(text, lenient)
    kept, done = to_answer(text, finished, lenient)
    if end is None or end == len(text):
        assert (kept, done) == (text, finished)
    else:
        assert (kept, done) == (text[:end], True)  # its end of turn is trained: it stops there


@settings(max_examples=300, deadline=None)
@given(text=TEXTS, lenient=st.booleans(), right=st.booleans())
def test_the_verifier_finds_the_same_answer_in_the_cut_text(text, lenient, right):
    """The verifier reads only the answer: cutting what follows it never changes a reward (no
    format bonus), so the reward the cut text earns is the one the whole text earned."""
    task = regenerate(TaskSampler({"basic_arithmetic": 1.0}, {}, seed=3).sample_batch(1)[0])
    if right:
        text = text.replace("7", str(task.answer))
    cfg = RewardConfig(lenient=lenient)
    kept, _ = to_answer(text, False, lenient)
    assert score_completion(task, kept, cfg) == score_completion(task, text, cfg)


def test_the_setting_is_checked_and_drop_is_the_default():
    assert Config().external_after_answer == "drop"
    with pytest.raises(ConfigError, match="use drop .* or train"):
        Config(external_after_answer="keep")


def _ref_reward(text: str, answer: str) -> float:
    """Strict: the last complete pair's content, stripped, is the answer."""
    m = re.fullmatch(r".*<answer>(.*)</answer>.*", text, re.S)
    return float(m is not None and m.group(1).strip() == answer)


def _ref_advantages(rs: list[float]) -> list[float]:
    """GRPO: (r - mean) / (max(sample std, 0.1) + 1e-4)."""
    mean = sum(rs) / len(rs)
    std = math.sqrt(sum((r - mean) ** 2 for r in rs) / (len(rs) - 1))
    return [(r - mean) / (max(std, 0.1) + 1e-4) for r in rs]


TAILS = ["", " Tom smells", "\nTom smells. <answer>", " and 5 more", "</answer>"]


@pytest.mark.parametrize("after", ["drop", "train"])
def test_a_peer_group_trains_what_was_scored_with_its_advantages(tmp_path, after):
    """A peer's group whose answers carry text after them (one right, three wrong, each with a
    tail): with drop the step trains each text up to its closing tag and then the end of turn,
    scored and advantaged as cut; with train, the whole texts as sent."""
    cfg = make_cfg(tmp_path, local_samples=0, external_samples=1, external_after_answer=after)
    node = make_node(cfg, "n", InProcessHub().connect("id-n"), right=0)  # own groups all fail
    ref = TaskSampler(cfg.domains, cfg.domain_configs, seed=77).sample_batch(1)[0]
    task = regenerate(ref)
    answers = (task.answer, "-1", "-2", "-3")
    texts = tuple(f"so <answer>{a}</answer>{t}" for a, t in zip(answers, TAILS[1:], strict=True))
    group = RolloutGroup(
        ref, task.question, task.answer, texts, (1.0,) * 4, "id-p", "m", 0, 0.0, (True,) * 4
    )
    assert node.pool.add(group, 0)
    node.run_round()
    step = node.backend.steps[-1]
    sent = {s.completion.text: s for s in step}
    assert len(step) == 4
    expect = [
        t[: t.rindex("</answer>") + len("</answer>")] if after == "drop" else t for t in texts
    ]
    rewards = [_ref_reward(t, task.answer) for t in expect]
    assert rewards == [1.0, 0.0, 0.0, 0.0]
    for t, adv in zip(expect, _ref_advantages(rewards), strict=True):
        s = sent[t]  # trained as scored: the decoded ids are the text, then the end of turn
        assert decode(s.completion.ids) == t and s.completion.trained_ids[-1] == END
        assert s.advantage == pytest.approx(adv)
    (g,) = node.last_groups.external
    assert g.rewards == rewards and g.completions == expect
    counted = node.pool.stats().get("peer_after_answer", 0)
    assert counted == (3 if after == "drop" else 0)  # the last had nothing after its answer


def test_an_unfinished_peer_text_cut_after_its_answer_learns_to_stop(tmp_path):
    """A completion the peer's limit cut (no end of turn) that had answered already: with drop
    it ends at its answer and is closed with the end of turn; with nothing after its answer it
    stays unfinished."""
    cfg = make_cfg(tmp_path, local_samples=0, external_samples=1)
    node = make_node(cfg, "n", InProcessHub().connect("id-n"), right=0)
    ref = TaskSampler(cfg.domains, cfg.domain_configs, seed=78).sample_batch(1)[0]
    task = regenerate(ref)
    texts = (f"<answer>{task.answer}</answer> and then", "<answer>-1</answer>", "so", "hm")
    group = RolloutGroup(
        ref, task.question, task.answer, texts, (0.0,) * 4, "id-p", "m", 0, 0.0, (False,) * 4
    )
    node.pool.add(group, 0)
    node.run_round()
    ends = {s.completion.text: s.completion.end_id for s in node.backend.steps[-1]}
    right = f"<answer>{task.answer}</answer>"
    assert ends == {right: END, "<answer>-1</answer>": None, "so": None, "hm": None}
    assert node.last_groups.external[0].rewards == [1.0, 0.0, 0.0, 0.0]
