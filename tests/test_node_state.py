"""A node's round state declared once (sapo_edge/rl/node_state.py, issue 46): the rollback of a
stopped round, the checkpoint and the resume all go through node_state.PARTS, and a node that
holds a stateful object the list does not name fails here (not, silently, an exact resume)."""

from __future__ import annotations

import json

import pytest
from scripted import make_cfg, make_node, stop_at_check

from sapo_edge.rl import node_state
from sapo_edge.rl.trainer import RoundStopped
from sapo_edge.swarm.transport import InProcessHub

NOT_ROUND_STATE = {"pool", "backend"}  # the pool has its own file (pool.json); the model, its own


def _node(tmp_path, **kw):
    cfg = make_cfg(tmp_path, mix="adaptive", external_sampling="targeted", **kw)
    hub = InProcessHub()
    peer, node = make_node(cfg, "p", hub.connect("id-p")), make_node(cfg, "n", hub.connect("id-n"))
    return peer, node


def test_every_stateful_part_of_a_node_is_declared(tmp_path):
    _peer, node = _node(tmp_path)
    stateful = {
        k
        for k, v in vars(node).items()
        if hasattr(v, "state_dict") and hasattr(v, "load_state_dict") and k not in NOT_ROUND_STATE
    }
    assert stateful == set(node_state.STATEFUL)
    assert set(node_state.STATEFUL) <= {p.name for p in node_state.PARTS}
    assert "rng" in {p.name for p in node_state.PARTS}  # random.Random has no state_dict


@pytest.mark.parametrize("stop_before", [1, 2, 3, 4])
def test_a_stopped_round_leaves_every_declared_part_as_it_was(tmp_path, stop_before):
    peer, node = _node(tmp_path)
    for _ in range(2):
        peer.run_round()
        node.run_round()
    peer.run_round()
    before = json.dumps(node_state.snapshot(node), sort_keys=True)
    node.stop_check = stop_at_check(stop_before)
    with pytest.raises(RoundStopped):
        node.run_round()
    assert json.dumps(node_state.snapshot(node), sort_keys=True) == before


def test_the_checkpoint_holds_every_part_and_the_resume_puts_each_back(tmp_path):
    peer, node = _node(tmp_path)
    for _ in range(3):
        peer.run_round()
        node.run_round()
    path = node.save()
    saved = json.loads((path / "state.json").read_text())
    state = saved.get("state", saved)
    assert {p.name for p in node_state.PARTS} <= set(state)
    _peer, again = _node(tmp_path)
    assert again.resume()
    assert node_state.snapshot(again) == node_state.snapshot(node)


def test_an_older_checkpoint_without_a_part_or_with_an_unreadable_one_still_resumes(tmp_path):
    _peer, node = _node(tmp_path)
    state = node_state.snapshot(node)
    fresh = node_state.snapshot(node)["success"]
    told: list[str] = []
    node_state.restore(node, {k: v for k, v in state.items() if k != "success"}, told.append)
    assert node_state.snapshot(node)["success"] == fresh and told == []
    node_state.restore(node, {**state, "mix": {"version": -1}}, lambda w, _e: told.append(w))
    assert told == ["adaptive mix"]
    with pytest.raises(KeyError):
        node_state.restore(node, {k: v for k, v in state.items() if k != "sampler"}, print)
