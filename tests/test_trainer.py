"""The SAPO round with a scripted policy: the I/J mix, re-verification of peers, filters, resume.

The scripted backend answers "Calculate a + b." with a fixed pattern of right and wrong tagged
answers, so every reward and advantage below is known in advance; the real torch backend is
exercised in test_torch_backend.py and test_sim.py.
"""

import json
import time

import pytest
from scripted import Quiet, ScriptedBackend, make_cfg, make_node
from task_configs import ONE_DIGIT_ADD

from sapo_edge.rollout import RolloutGroup, encode_batch
from sapo_edge.swarm.transport import InProcessHub
from sapo_edge.tasks import TaskRef
from sapo_edge.trainer import Node


def test_round_trains_on_own_and_external_groups(tmp_path):
    cfg = make_cfg(tmp_path)
    hub = InProcessHub()
    a, b = make_node(cfg, "a", hub.connect("id-a")), make_node(cfg, "b", hub.connect("id-b"))
    ra = a.run_round()
    rb = b.run_round()
    assert ra.reward_mean == pytest.approx(0.25) and ra.external_used == 0  # nothing published yet
    assert rb.received == 2 and rb.external_used == 2 and rb.external_from == {"id-a": 2}
    step = b.backend.steps[-1]
    assert len(step) == 4 * 4  # 2 own + 2 external groups, 4 completions each, none zero-advantage
    own_questions = {m.messages[-1]["content"] for m in step[:8]}
    ext_questions = {m.messages[-1]["content"] for m in step[8:]}
    assert own_questions.isdisjoint(ext_questions)  # nodes draw different questions
    # every group: one right (positive advantage), three wrong (negative)
    assert sorted(s.advantage > 0 for s in step).count(True) == 4
    lines = (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["external_from"] == {"id-a": 2}


def test_isolated_node_ignores_peers_when_j_is_zero(tmp_path):
    cfg = make_cfg(tmp_path, external_samples=0)
    hub = InProcessHub()
    a, b = make_node(cfg, "a", hub.connect("id-a")), make_node(cfg, "b", hub.connect("id-b"))
    a.run_round()
    rb = b.run_round()
    assert rb.external_used == 0 and len(b.backend.steps[-1]) == 8


def test_zero_advantage_groups_are_never_trained_on(tmp_path):
    cfg = make_cfg(tmp_path)
    hub = InProcessHub()
    node = make_node(cfg, "a", hub.connect("id-a"), right=4)  # every completion right
    report = node.run_round()
    assert report.reward_mean == 1.0 and report.zero_adv_fraction == 1.0
    assert node.backend.steps == []  # nothing to learn from: no step at all


def _forged_group(task_ref: TaskRef, completions: list[str]) -> RolloutGroup:
    return RolloutGroup(
        task_ref,
        "Calculate 1 + 1.",
        "999",
        tuple(completions),
        tuple([1.0, 0.0, 0.0, 0.0]),
        "id-liar",
        "scripted",
        0,
        time.time(),
    )


def test_forged_answer_and_rewards_are_replaced_by_local_verification(tmp_path):
    cfg = make_cfg(tmp_path, local_samples=0, external_samples=1)
    hub = InProcessHub()
    node = make_node(cfg, "a", hub.connect("id-a"))
    liar = hub.connect("id-liar")
    ref = TaskRef.make("basic_arithmetic", ONE_DIGIT_ADD, seed=12345, index=3)
    from sapo_edge.tasks import regenerate

    truth = regenerate(ref).answer
    # the liar claims its first (wrong) completion is right and sends a bogus question text
    liar.publish(
        encode_batch(
            [_forged_group(ref, ["<answer>999</answer>"] + [f"<answer>{truth}</answer>"] * 3)]
        )
    )
    node.run_round()
    (step,) = node.backend.steps
    assert [s.advantage > 0 for s in step] == [False, True, True, True]  # re-scored here
    assert all(
        s.messages[-1]["content"] == regenerate(ref).question for s in step
    )  # regenerated prompt


def test_bad_payloads_and_foreign_tasks_are_counted_not_fatal(tmp_path):
    cfg = make_cfg(tmp_path, local_samples=1, external_samples=1)
    hub = InProcessHub()
    node = make_node(cfg, "a", hub.connect("id-a"))
    peer = hub.connect("id-peer")
    peer.publish(b"{not json")
    peer.publish(b'{"version": 99, "groups": []}')
    other_config = TaskRef.make(
        "basic_arithmetic", {**ONE_DIGIT_ADD, "max_digits": 9}, seed=1, index=0
    )
    peer.publish(encode_batch([_forged_group(other_config, ["<answer>1</answer>", "2", "3", "4"])]))
    report = node.run_round()
    assert report.pool["bad_json"] == 1
    assert report.pool["unknown_version"] == 1
    assert report.pool["foreign_task"] == 1
    assert report.external_used == 0 and report.local_used == 1


def test_resume_continues_the_same_question_stream(tmp_path):
    cfg = make_cfg(tmp_path / "x", checkpoint_every=2)
    straight = make_node(cfg, "n", InProcessHub().connect("id-n"))
    for _ in range(3):
        straight.run_round()

    cfg2 = make_cfg(tmp_path / "y", checkpoint_every=2)
    first = make_node(cfg2, "n", InProcessHub().connect("id-n"))
    for _ in range(
        3
    ):  # checkpoint after round 1 (round counter 2), then one more round, then "killed"
        first.run_round()
    resumed = make_node(cfg2, "n", InProcessHub().connect("id-n"))
    assert resumed.resume() is True
    assert resumed.round == 2 and resumed.backend.weights == 2
    metrics = (tmp_path / "y" / "n" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(m)["round"] for m in metrics] == [0, 1]  # the lost round's line is dropped
    resumed.run_round()
    q_straight = [s.messages[-1]["content"] for s in straight.backend.steps[2]]
    q_resumed = [s.messages[-1]["content"] for s in resumed.backend.steps[0]]
    assert q_resumed == q_straight


def test_resume_without_checkpoint_starts_fresh_and_other_model_is_refused(tmp_path):
    cfg = make_cfg(tmp_path, checkpoint_every=1)
    node = make_node(cfg, "n", InProcessHub().connect("id-n"))
    assert node.resume() is False
    node.run_round()
    other = Node(
        cfg,
        ScriptedBackend(),
        InProcessHub().connect("id-n"),
        node_id="id-n",
        name="n",
        model_id="another-model",
        out_dir=tmp_path / "n",
        callback=Quiet(),
    )
    with pytest.raises(ValueError, match="another-model"):
        other.resume()
