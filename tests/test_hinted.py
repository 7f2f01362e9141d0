"""Hinted nodes (issue 45): only some nodes see the worked example, scoring is strict, and a node
whose own answers all fail learns from a peer's tagged right answers under its own prompt."""

from __future__ import annotations

import json

import pytest
from scripted import ScriptedBackend, cut, encode, make_cfg, make_node

from sapo_edge.config.settings import Config, ConfigError
from sapo_edge.data.rollout import RolloutGroup
from sapo_edge.data.task_sampler import TaskSampler
from sapo_edge.data.tasks import regenerate
from sapo_edge.rl.prompts import build_messages
from sapo_edge.rl.trainer import Node
from sapo_edge.run.build import hint_over, node_config
from sapo_edge.swarm.transport import InProcessHub


def test_only_the_hinted_nodes_see_the_example(tmp_path):
    cfg = make_cfg(tmp_path, nodes=3, hinted_nodes=[1], format_example=False)
    assert [node_config(cfg, i).format_example for i in range(3)] == [False, True, False]
    plain = make_cfg(tmp_path, nodes=3, format_example=True)  # no hint: the setting for all
    assert all(node_config(plain, i) is plain for i in range(3))


def test_a_hinted_node_stops_after_hint_rounds_and_the_others_go_on(tmp_path):
    cfg = make_cfg(tmp_path, nodes=3, hinted_nodes=[0, 2], hint_rounds=3)
    assert [hint_over(cfg, i, 2) for i in range(3)] == [False, False, False]
    assert [hint_over(cfg, i, 3) for i in range(3)] == [True, False, True]
    forever = make_cfg(tmp_path, nodes=3, hinted_nodes=[0])
    assert not hint_over(forever, 0, 10_000)


@pytest.mark.parametrize(
    ("hinted", "why"),
    [([3], "from 0 to 2"), ([0, 0], "different"), ([True], "node numbers"), (["x"], "numbers")],
)
def test_bad_hinted_nodes_are_refused_with_the_fix(tmp_path, hinted, why):
    with pytest.raises(ConfigError, match=why):
        make_cfg(tmp_path, nodes=3, hinted_nodes=hinted)


def test_the_flag_form_gives_node_numbers():
    assert Config(nodes=4, hinted_nodes=["0", "3"]).hinted_nodes == [0, 3]


def _peer_group(cfg, seed: int) -> RolloutGroup:
    """A peer's group of tagged answers to one of its questions: two right, two wrong."""
    ref = TaskSampler(cfg.domains, cfg.domain_configs, seed=seed).sample_batch(1)[0]
    task = regenerate(ref)
    answers = tuple(f"<answer>{a}</answer>" for a in (task.answer, "-1", task.answer, "-1"))
    return RolloutGroup(ref, task.question, task.answer, answers, (0.0,) * 4, "id-p", "m", 0, 0.0)


@pytest.mark.parametrize("sampling", ["uniform", "targeted"])
def test_a_node_whose_own_answers_all_fail_trains_on_its_peers_groups(tmp_path, sampling):
    """The Aha case: every own group scores 0 alike, so the step trains no own group; the peer
    groups still train (their right answers re-scored by this node), under this node's own
    prompt without the example, and targeting is not shut out by 'no more than the own groups'."""
    cfg = make_cfg(
        tmp_path,
        lenient=False,
        format_example=False,
        local_samples=2,
        external_samples=2,
        targeted_share=1.0,
        external_sampling=sampling,
    )
    node = make_node(cfg, "n", InProcessHub().connect("id-n"), right=0)  # every own answer wrong
    for seed in (5, 6, 7):
        node.pool.add(_peer_group(cfg, seed), 0)
    report = node.run_round()
    assert report.reward_mean == 0.0 and report.local_used == 0
    assert report.external_used == 2 and report.external_from == {"id-p": 2}
    trained = node.backend.steps[-1]
    assert len(trained) == 8 and {s.advantage > 0 for s in trained} == {True, False}
    assert all(s.messages == build_messages(s.messages[-1]["content"]) for s in trained)
    if sampling == "targeted":  # every peer group is in a domain this node failed entirely
        assert report.external_targeted == 2


class _HalfTagged(ScriptedBackend):
    """Right answers, the first half of each group in tags and the rest as a bare number."""

    def generate(self, prompts, n, **kw):
        groups = super().generate(prompts, n, **kw)
        out = []
        for group in groups:
            bare = [c.text.replace("<answer>", "").replace("</answer>", "") for c in group]
            texts = [c.text if i < n // 2 else bare[i] for i, c in enumerate(group)]
            out.append([cut(encode(t), True, kw["max_new_tokens"]) for t in texts])
        return out


def test_a_round_reports_its_share_of_tagged_answers_and_its_strict_reward(tmp_path):
    cfg = make_cfg(tmp_path, lenient=True, lenient_credit=0.5)
    node = Node(
        cfg,
        _HalfTagged(right=4),
        InProcessHub().connect("id-n"),
        node_id="id-n",
        name="n",
        model_id="scripted",
        out_dir=tmp_path / "n",
    )
    report = node.run_round()
    assert report.tagged_share == 0.5
    assert report.strict_reward == 0.5  # the bare right answers count nothing strictly...
    assert report.reward_mean == 0.75  # ...and half under this node's lenient reward
    line = json.loads((tmp_path / "n" / "metrics.jsonl").read_text().splitlines()[0])
    assert (line["tagged_share"], line["strict_reward"]) == (0.5, 0.5)


@pytest.mark.slow
def test_a_sim_hints_only_its_hinted_node_and_stops_it_after_hint_rounds(
    tiny_qwen, tmp_path, monkeypatch
):
    from sapo_edge.run.runner import run_sim

    seen: dict[str, set[bool]] = {}
    original = Node._messages

    def spy(self, question):
        messages = original(self, question)
        seen.setdefault(self.name, set()).add(len(messages) == 4)  # system, example x2, user
        return messages

    monkeypatch.setattr(Node, "_messages", spy)
    cfg = Config(
        model=str(tiny_qwen),
        domains={"basic_arithmetic": 1.0},
        questions_per_round=2,
        group_size=2,
        max_new_tokens=6,
        local_samples=1,
        external_samples=1,
        nodes=3,
        rounds=2,
        hinted_nodes=[1],
        hint_rounds=1,
        out_dir=str(tmp_path),
        checkpoint_every=1,
    )
    run_sim(cfg, log=lambda m: None)
    assert seen == {"node-0": {False}, "node-1": {True}, "node-2": {False}}
    rounds = {
        n: len((tmp_path / n / "metrics.jsonl").read_text().splitlines())
        for n in ("node-0", "node-1", "node-2")
    }
    assert rounds == {"node-0": 2, "node-1": 1, "node-2": 2}
    saved = {n: json.loads((tmp_path / n / "config.json").read_text()) for n in rounds}
    assert [saved[n]["format_example"] for n in sorted(saved)] == [False, True, False]
