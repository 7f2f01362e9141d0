"""A node's random streams (issue 56): one seed per purpose, all from (node id, run seed), so the
question stream, the trainer's choices, the mix's bandit, the LoRA start and the sampling seeds
never share one generator; a checkpoint from before keeps the question stream it had."""

from __future__ import annotations

import dataclasses
import random

import pytest
from scripted import make_cfg, make_node

from sapo_edge.data.seeds import NodeSeeds, node_seeds, stream_seed
from sapo_edge.data.task_sampler import node_seed
from sapo_edge.data.tasks import TaskError
from sapo_edge.rl import node_state
from sapo_edge.swarm.transport import InProcessHub


def test_each_purpose_has_its_own_stable_seed():
    s = node_seeds("alice", 0)
    values = dataclasses.astuple(s)
    assert len(set(values)) == len(dataclasses.fields(NodeSeeds))  # five purposes, five seeds
    assert all(0 <= v < 2**31 for v in values)
    assert s == node_seeds("alice", 0)  # the same in every process (sha256, not hash())
    assert s.questions == stream_seed("alice", 0, "questions") == 1172900001
    assert node_seeds("alice", 1) != s != node_seeds("bob", 0)
    assert node_seed("alice") not in values  # none is the old shared seed


def test_a_node_draws_each_purpose_from_its_own_stream(tmp_path):
    cfg = make_cfg(tmp_path, mix="adaptive")
    node = make_node(cfg, "n", InProcessHub().connect("id-n"))
    seeds = node_seeds("id-n", cfg.seed)
    assert node.seeds == seeds and node.sampler.seed == seeds.questions
    assert node.rng.getstate() == random.Random(seeds.choices).getstate()
    first = random.Random(seeds.mix)
    first.shuffle([0, 2, 4, 6])  # the bandit's first draw: the order it tries J in
    assert node.mix.rng.getstate() == first.getstate()
    assert node._round_seed() == (seeds.generation * 1_000_003) % 2**31
    # the three generators no longer move together: their next draws differ
    draws = {node.rng.random(), node.mix.rng.random(), node.sampler._rng.random()}
    assert len(draws) == 3


def test_a_checkpoint_from_before_keeps_its_question_stream(tmp_path):
    cfg = make_cfg(tmp_path)
    node = make_node(cfg, "n", InProcessHub().connect("id-n"))
    state = node_state.snapshot(node)
    legacy = node_seed("id-n", cfg.seed)  # what the sampler was seeded with before issue 56
    old = {**state, "sampler": {**state["sampler"], "seed": legacy}}
    node_state.restore(node, old, node_state.never)
    assert node.sampler.seed == legacy
    again = make_node(cfg, "n", InProcessHub().connect("id-n"))
    other = {**state, "sampler": {**state["sampler"], "seed": legacy + 1}}
    with pytest.raises(TaskError, match="resume with the same seed"):
        node_state.restore(again, other, node_state.never)
