"""A few trials of the kill harness (bench/chaos_kill.py runs 100+): a real node process on the
tiny model is SIGKILLed inside generation, training and a checkpoint write, restarted with
--resume, and ends with the adapter of an uninterrupted run; a disk filling up during a
checkpoint write keeps the previous checkpoint and tells the user (root only: a tmpfs)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import chaos_kill  # noqa: E402


def test_a_kill_before_the_first_checkpoint_leaves_no_round_recorded_twice(tmp_path):
    """Found by the harness: rounds recorded before a kill that came before any checkpoint
    were kept, so the resumed run recorded them twice."""
    from scripted import make_cfg, make_node

    from sapo_edge.swarm.transport import NullTransport
    from sapo_edge.trainer import read_rewards

    node = make_node(make_cfg(tmp_path), "a", NullTransport())
    node.run_round()
    node.run_round()  # killed now: 2 rounds recorded, no checkpoint
    again = make_node(make_cfg(tmp_path, resume=True), "a", NullTransport())
    assert again.resume() is False and again.round == 0
    assert read_rewards(again.metrics_path) == []
    again.run_round()
    assert len(read_rewards(again.metrics_path)) == 1


@pytest.mark.slow
def test_killed_anywhere_a_node_resumes_to_the_uninterrupted_adapter(tiny_qwen, tmp_path):
    result = chaos_kill.run_kills(
        tiny_qwen, tmp_path, trials=4, rounds=3, seed=1, log=lambda _m: None
    )
    s = result["summary"]
    assert s["tried"] + s["not_killed"] == 4 and s["tried"] >= 3, result["trials"]
    assert s["survived"] == s["tried"], result["trials"]
    assert s["checkpoints_lost"] == 0 and s["max_rounds_lost"] <= 1
    assert s["same_adapter"] == 4


@pytest.mark.slow
def test_disk_full_during_a_checkpoint_keeps_the_previous_one_and_says_so(tiny_qwen, tmp_path):
    why = chaos_kill.can_mount()
    if why:
        pytest.skip(why)
    got = chaos_kill.disk_full_trial(tiny_qwen, tmp_path)
    assert got["ok"], repr(got)
