"""Issue 57: the teacher's laptop lost the format. A node whose own groups all scored alike
trains no own group; it trains its peers' groups alone only when it failed every question (the
Aha case), never when it answered its questions right: the hinted laptop, saturated, was pulled
off its format by steps of students' groups alone (rl/peers_alone.py)."""

from __future__ import annotations

import pytest
from scripted import ScriptedBackend, cut, encode, make_cfg, make_node

from sapo_edge.data.rollout import RolloutGroup
from sapo_edge.data.task_sampler import TaskSampler
from sapo_edge.data.tasks import regenerate
from sapo_edge.rl.trainer import Node
from sapo_edge.swarm.transport import InProcessHub


def _peer_group(cfg, seed: int) -> RolloutGroup:
    """A student's group of tagged answers to one of its questions: two right, two wrong."""
    ref = TaskSampler(cfg.domains, cfg.domain_configs, seed=seed).sample_batch(1)[0]
    task = regenerate(ref)
    answers = tuple(f"<answer>{a}</answer>" for a in (task.answer, "-1", task.answer, "-1"))
    return RolloutGroup(ref, task.question, task.answer, answers, (0.0,) * 4, "id-p", "m", 0, 0.0)


def _hinted(tmp_path, backend=None, right: int = 4, **kw) -> Node:
    cfg = make_cfg(tmp_path, lenient=False, format_example=True, **kw)
    transport = InProcessHub().connect("id-n")
    if backend is None:
        node = make_node(cfg, "n", transport, right=right)
    else:
        node = Node(
            cfg,
            backend,
            transport,
            node_id="id-n",
            name="n",
            model_id="scripted",
            out_dir=tmp_path / "n",
        )
    for seed in (5, 6, 7):
        node.pool.add(_peer_group(cfg, seed), 0)
    return node


@pytest.mark.parametrize("mix", ["fixed", "adaptive"])
def test_a_hinted_node_that_answered_everything_right_trains_no_peers_groups_alone(tmp_path, mix):
    node = _hinted(tmp_path, mix=mix)  # every own answer right and tagged: all alike
    report = node.run_round()
    assert report.strict_reward == 1.0 and report.local_used == 0
    assert report.external_used == 0 and report.held_back and report.external_target == 2
    assert node.backend.steps == []  # no step at all: nothing pulls it off its format
    assert len(node.pool) == 3  # the students' groups wait for a round that can use them


class _OneRightOneWrong(ScriptedBackend):
    """The first question of a round answered right four times, the second wrong four times:
    every group alike, one solved and one failed (the hinted laptop at 88% tagged)."""

    def generate(self, prompts, n, **kw):
        groups = super().generate(prompts, n, **kw)
        wrong = [t.replace("<answer>", "<answer>1") for t in (c.text for c in groups[1])]
        groups[1] = [cut(encode(t), True, kw["max_new_tokens"]) for t in wrong]
        return groups


def test_a_node_with_a_solved_and_a_failed_group_trains_no_peers_groups_alone(tmp_path):
    node = _hinted(tmp_path, backend=_OneRightOneWrong(right=4))
    report = node.run_round()
    assert report.reward_mean == 0.5 and report.local_used == 0
    assert report.external_used == 0 and node.backend.steps == []


def test_the_aha_case_still_trains_on_peers_alone_and_so_does_a_node_told_to(tmp_path):
    failing = _hinted(tmp_path / "a", right=0)  # every own answer wrong: the Aha path
    assert failing.run_round().external_used == 2
    assert {s.advantage > 0 for s in failing.backend.steps[-1]} == {True, False}
    told = _hinted(tmp_path / "b", local_samples=0, external_samples=2)  # I = 0: peers only
    assert told.run_round().external_used == 2


def test_with_an_informative_own_group_the_peers_groups_train_beside_it(tmp_path):
    node = _hinted(tmp_path, right=2)  # half right: every own group informative
    report = node.run_round()
    assert report.local_used == 2 and report.external_used == 2


def test_a_node_without_the_example_keeps_sapo_s_rule_and_learns_its_failed_kind(tmp_path):
    """Only a laptop that sees the worked example is held back: any other node that solved one
    question and failed another still trains its peers' groups (SAPO's rule, every experiment's)."""
    cfg = make_cfg(tmp_path, lenient=False, format_example=False)
    node = Node(
        cfg,
        _OneRightOneWrong(right=4),
        InProcessHub().connect("id-n"),
        node_id="id-n",
        name="n",
        model_id="scripted",
        out_dir=tmp_path / "n",
    )
    for seed in (5, 6, 7):
        node.pool.add(_peer_group(cfg, seed), 0)
    report = node.run_round()
    assert report.local_used == 0 and report.external_used == 2


def test_a_held_back_round_neither_credits_nor_pauses_the_adaptive_mix_s_j(tmp_path):
    """The review's case: the bandit asked J, the hold-back trained 0. Crediting that round to
    J=0 (its reward decided by the round itself) and pausing the J asked as if the pool fell
    short broke the mix's accounting: the block ends uncredited, nothing paused."""
    node = _hinted(tmp_path, mix="adaptive")
    report = node.run_round()
    assert report.held_back and node.backend.steps == []
    assert node.mix.block["withheld"] and node.mix.block["trained"] == []
    node.run_round()  # the next choice closes the block: no credit, no pause
    assert node.mix.paused == {} and node.mix.last_credited is None
    assert not any(node.mix.weight.values())
