"""The SAPO round with a scripted policy: the I/J mix, re-verification of peers, filters, resume.

The scripted backend answers "Calculate a + b." with a fixed pattern of right and wrong tagged
answers, so every reward and advantage below is known in advance; the real torch backend is
exercised in test_torch_backend.py and test_sim.py.
"""

import json
import time

import pytest
from scripted import END, Quiet, ScriptedBackend, decode, encode, make_cfg, make_node, stop_at_check
from task_configs import ONE_DIGIT_ADD

from sapo_edge.data.rollout import RolloutGroup, encode_batch
from sapo_edge.data.tasks import TaskRef, regenerate
from sapo_edge.rl.metrics import MEASURED
from sapo_edge.rl.trainer import Node, RoundStopped
from sapo_edge.run.control import change_settings
from sapo_edge.swarm.transport import InProcessHub


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


def _forged_group(task_ref: TaskRef, completions: list[str], question: str | None = None):
    return RolloutGroup(
        task_ref,
        regenerate(task_ref).question if question is None else question,
        "999",
        tuple(completions),
        tuple([1.0, 0.0, 0.0, 0.0][: len(completions)]),
        "id-liar",
        "scripted",
        0,
        time.time(),
        finished=(True,) * len(completions),
    )


REF = TaskRef.make("basic_arithmetic", ONE_DIGIT_ADD, seed=12345, index=3)


def test_forged_answer_and_rewards_are_replaced_by_local_verification(tmp_path):
    cfg = make_cfg(tmp_path, local_samples=0, external_samples=1)
    hub = InProcessHub()
    node = make_node(cfg, "a", hub.connect("id-a"))
    liar = hub.connect("id-liar")
    truth = regenerate(REF).answer
    # the liar claims its first (wrong) completion is right and its answer is 999
    liar.publish(
        encode_batch(
            [_forged_group(REF, ["<answer>999</answer>"] + [f"<answer>{truth}</answer>"] * 3)]
        )
    )
    node.run_round()
    (step,) = node.backend.steps
    assert [s.advantage > 0 for s in step] == [False, True, True, True]  # re-scored here
    assert all(s.messages[-1]["content"] == regenerate(REF).question for s in step)


def test_a_peer_group_for_another_question_is_rejected_with_its_reason(tmp_path):
    """A peer whose reasoning-gym builds another question from the same TaskRef (version skew):
    its answers would be trained under our prompt, so the group is refused and counted."""
    cfg = make_cfg(tmp_path, local_samples=1, external_samples=1)
    hub = InProcessHub()
    node = make_node(cfg, "a", hub.connect("id-a"))
    truth = regenerate(REF).answer
    group = _forged_group(
        REF, [f"<answer>{truth}</answer>", "<answer>0</answer>"], "Calculate 1 + 1."
    )
    hub.connect("id-liar").publish(encode_batch([group]))
    report = node.run_round()
    assert report.received == 1 and report.pool["question_mismatch"] == 1
    assert report.external_used == 0 and report.pool["used"] == 0
    assert all(s.messages[-1]["content"] != "Calculate 1 + 1." for s in node.backend.steps[0])


def test_an_old_format_batch_is_rejected_with_its_reason_not_a_crash(tmp_path):
    """Format version 1 had no `finished` flags: a receiver could not tell a cut completion from
    a finished one. A node of this version counts such a batch as old_version and runs on."""
    cfg = make_cfg(tmp_path, local_samples=1, external_samples=1)
    hub = InProcessHub()
    node = make_node(cfg, "a", hub.connect("id-a"))
    old = _forged_group(REF, ["<answer>1</answer>", "<answer>2</answer>"]).to_dict()
    del old["finished"]
    old["version"] = 1
    hub.connect("id-old").publish(json.dumps({"version": 1, "groups": [old]}).encode())
    report = node.run_round()
    assert report.pool["old_version"] == 1 and report.received == 0
    assert report.local_used == 1
    (row,) = node.peer_tally.snapshot()
    assert row.node_id == "id-old" and row.rejected == 1 and "old_version" in row.top_rejection


def test_own_completions_cut_at_max_new_tokens_are_trained_and_published_unfinished(tmp_path):
    """Fails if the trainer forced finished=True: a completion cut by the length limit must be
    trained without an end token (no lesson to stop mid-sentence), here and on every peer."""
    cfg = make_cfg(tmp_path, max_new_tokens=24, local_samples=2, external_samples=2)
    hub = InProcessHub()
    a = make_node(cfg, "a", hub.connect("id-a"), ramble=10)  # wrong answers ramble: cut at 24
    b = make_node(make_cfg(tmp_path, max_new_tokens=64), "b", hub.connect("id-b"))  # room for 64
    a.run_round()
    assert a.backend.calls[0]["max_new_tokens"] == 24
    own = a.backend.steps[0]
    right = [s for s in own if s.advantage > 0]
    cut = [s for s in own if s.advantage < 0]
    assert len(right) == 2 and len(cut) == 6
    assert all(s.completion.end_id == END and s.completion.finished for s in right)
    for s in cut:  # exactly the ids emitted: the first 24 characters, no end token
        assert s.completion.end_id is None and not s.completion.finished
        assert len(s.completion.trained_ids) == 24
        assert s.completion.text == ("so " * 10)[:24] == decode(s.completion.ids)
    b.run_round()  # b receives a's groups with their finished flags and trains on them
    external = [s for s in b.backend.steps[0] if s.messages[-1]["content"] not in _questions(b)]
    assert len(external) == 8
    assert sorted(s.completion.finished for s in external) == [False] * 6 + [True] * 2
    for s in external:  # b's limit is 64: only the flag says a's 24 characters were cut
        assert s.completion.finished == (s.advantage > 0)
        want = [*encode(s.completion.text), END] if s.advantage > 0 else encode(("so " * 10)[:24])
        assert s.completion.trained_ids == want


def _questions(node) -> set[str]:
    return {s.messages[-1]["content"] for s in node.backend.steps[-1][: 4 * node.cfg.local_samples]}


def test_a_peer_completion_longer_than_max_new_tokens_is_cut_and_rescored_on_the_cut_text(
    tmp_path,
):
    """The peer's long completion reaches the right answer after 20 words; cut at 24 tokens here
    it never does: scored on the cut text (reward 0, negative advantage), trained unfinished."""
    cfg = make_cfg(tmp_path, max_new_tokens=24, local_samples=0, external_samples=1)
    hub = InProcessHub()
    node = make_node(cfg, "a", hub.connect("id-a"))
    truth = regenerate(REF).answer
    long_right = "so " * 20 + f"<answer>{truth}</answer>"
    texts = [long_right, f"<answer>{truth}</answer>", "<answer>99</answer>", "<answer>98</answer>"]
    hub.connect("id-liar").publish(encode_batch([_forged_group(REF, texts)]))
    report = node.run_round()
    assert report.pool["peer_cut"] == 1 and report.pool["used"] == 1
    (step,) = node.backend.steps
    cut = step[0].completion
    assert cut.text == long_right[:24] and not cut.finished and step[0].advantage < 0
    assert [s.advantage > 0 for s in step] == [False, True, False, False]
    assert [s.completion.finished for s in step] == [False, True, True, True]
    (group,) = node.last_groups.external
    assert group.completions[0] == long_right[:24] and group.rewards == [0.0, 1.0, 0.0, 0.0]


def test_zero_advantage_completions_stay_in_the_training_step(tmp_path):
    """With lenient rewards (1 tagged, 0.5 untagged, 0 wrong) the middle completion of a group of
    three has advantage exactly 0: it is still trained (token normaliser, KL term)."""
    cfg = make_cfg(
        tmp_path,
        group_size=3,
        local_samples=0,
        external_samples=1,
        lenient=True,
        lenient_credit=0.5,
    )
    hub = InProcessHub()
    node = make_node(cfg, "a", hub.connect("id-a"))
    truth = regenerate(REF).answer
    texts = [f"<answer>{truth}</answer>", f"it is {truth}", "<answer>99</answer>"]
    hub.connect("id-liar").publish(encode_batch([_forged_group(REF, texts)]))
    node.run_round()
    (step,) = node.backend.steps
    assert [s.completion.text for s in step] == texts
    assert step[1].advantage == 0.0 and step[0].advantage > 0 > step[2].advantage


def test_a_peer_group_larger_than_group_size_trains_only_its_first_group_size(tmp_path):
    """A peer may send up to 64 completions per group; a node trains at most its own group_size
    of them (the first ones), scored and normalised among themselves."""
    cfg = make_cfg(tmp_path, group_size=4, local_samples=0, external_samples=1)
    hub = InProcessHub()
    node = make_node(cfg, "a", hub.connect("id-a"))
    truth = regenerate(REF).answer
    texts = ["<answer>99</answer>", f"<answer>{truth}</answer>", "<answer>98</answer>", "no"]
    texts += [f"<answer>{truth}</answer>"] * 60  # right answers past the cap: never seen here
    big = RolloutGroup(
        REF,
        regenerate(REF).question,
        truth,
        tuple(texts),
        (0.0,) * 64,
        "id-big",
        "scripted",
        0,
        time.time(),
        finished=(True,) * 64,
    )
    hub.connect("id-big").publish(encode_batch([big]))
    report = node.run_round()
    assert report.external_used == 1
    (step,) = node.backend.steps
    assert [s.completion.text for s in step] == texts[:4]
    # rewards 0 1 0 0 among these four only: mean 0.25, sample std 0.5
    assert [s.advantage for s in step] == pytest.approx([-0.5, 1.5, -0.5, -0.5], abs=1e-3)


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
    for _ in range(2):
        straight.run_round()
    straight_after_two = straight.backend.weights
    straight.run_round()

    cfg2 = make_cfg(tmp_path / "y", checkpoint_every=2)
    first = make_node(cfg2, "n", InProcessHub().connect("id-n"))
    for _ in range(
        3
    ):  # checkpoint after round 1 (round counter 2), then one more round, then "killed"
        first.run_round()
    resumed = make_node(cfg2, "n", InProcessHub().connect("id-n"))
    assert resumed.resume() is True
    assert resumed.round == 2 and resumed.backend.weights == straight_after_two
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


def _metrics(node) -> list[dict]:
    rows = [json.loads(line) for line in node.metrics_path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in MEASURED} for r in rows]


# the node's stop checks in a round: 1 before generating, 2-6 at the scripted backend's five
# decode steps, 7 before scoring, 8 before sharing, 9 before training, 10 in the train step
STOP_CHECKS = pytest.mark.parametrize(
    "stop_before",
    [1, 4, 7, 8, 9, 10],
    ids=["generating", "decoding", "scoring", "sharing", "training", "train-step"],
)


def _swarm_run(tmp_path, stop_before: int | None, rounds: int = 4, stop_round: int = 2, **kw):
    """Node n trains 4 rounds beside a scripted peer that publishes every round. With
    stop_before=k, round 2 is stopped at the k-th stop check (STOP_CHECKS), checkpointed, and a new node (a restarted process) resumes from the checkpoint."""
    cfg = make_cfg(
        tmp_path, **{"local_samples": 1, "external_samples": 2, "max_peer_share": 0.5, **kw}
    )
    hub = InProcessHub()
    peer = make_node(make_cfg(tmp_path, questions_per_round=3), "p", hub.connect("id-p"), right=2)
    transport = hub.connect("id-n")
    node = make_node(cfg, "n", transport)
    for r in range(rounds):
        peer.run_round()
        if r == stop_round and stop_before is not None:
            node.stop_check = stop_at_check(stop_before)
            with pytest.raises(RoundStopped):
                node.run_round()
            node.save()
            node = make_node(cfg, "n", transport)
            assert node.resume() and node.round == stop_round
        node.run_round()
    return node


@STOP_CHECKS
def test_a_run_stopped_mid_round_and_resumed_is_the_uninterrupted_run(tmp_path, stop_before):
    straight = _swarm_run(tmp_path / "straight", None)
    resumed = _swarm_run(tmp_path / "stopped", stop_before)
    assert resumed.backend.weights == straight.backend.weights  # every step trained the same
    assert _metrics(resumed) == _metrics(straight)  # rewards, groups used, pool counters...
    assert resumed.pool.stats() == straight.pool.stats()
    # one group per round from the one peer (max_peer_share), the rest waiting in the pool
    assert [m["external_used"] for m in _metrics(straight)] == [1, 1, 1, 1]
    assert straight.pool.stats()["size"] == 8
    assert resumed.sampler.state_dict() == straight.sampler.state_dict()
    assert resumed.rng.getstate() == straight.rng.getstate()


@STOP_CHECKS
def test_an_adaptive_run_stopped_mid_round_and_resumed_chooses_as_the_uninterrupted_run(
    tmp_path, stop_before
):
    # budget I + J = 3 of 3 own questions: J in {0, 2} (the one peer may fill both J = 2 slots);
    # the stopped round is inside the first block of 4 rounds, and its choice is given back
    kw = dict(mix="adaptive", questions_per_round=3, max_peer_share=1.0)
    straight = _swarm_run(tmp_path / "straight", None, rounds=6, stop_round=3, **kw)
    resumed = _swarm_run(tmp_path / "stopped", stop_before, rounds=6, stop_round=3, **kw)
    assert resumed.mix.state_dict() == straight.mix.state_dict()
    assert resumed.backend.weights == straight.backend.weights
    assert _metrics(resumed) == _metrics(straight)
    chosen = [m["external_target"] for m in _metrics(straight)]
    assert set(chosen) == {0, 2} and all(m["mix"] == "adaptive" for m in _metrics(straight))


def test_two_fresh_nodes_with_the_same_settings_start_from_the_same_weights(tmp_path):
    cfg = make_cfg(tmp_path)
    a = make_node(cfg, "n", InProcessHub().connect("id-n"))
    b = make_node(make_cfg(tmp_path / "b"), "n", InProcessHub().connect("id-n"))
    c = make_node(make_cfg(tmp_path / "c", seed=1), "n", InProcessHub().connect("id-n"))
    assert a.backend.weights == b.backend.weights != c.backend.weights


def test_settings_changed_at_run_time_reach_the_backend_or_are_refused(tmp_path):
    node = make_node(make_cfg(tmp_path), "a", InProcessHub().connect("id-a"))
    logs: list[str] = []
    change_settings(
        node, {"temperature": 0.01, "learning_rate": 1e-3, "lenient": True}, logs.append
    )
    assert node.backend.configured[-1] is node.cfg and node.cfg.learning_rate == 1e-3
    assert node.rewards.lenient is True
    node.run_round()
    assert node.backend.calls[-1]["temperature"] == 0.01  # greedy now: the group is all alike
    assert node.backend.steps == []
    for refused in ({"lora_r": 8}, {"domains": {"bf": 1.0}}, {"seed": 3, "learning_rate": 1.0}):
        change_settings(node, refused, logs.append)
        assert logs[-1].startswith("settings not applied") and "restart" in logs[-1]
    assert node.cfg.lora_r == 16 and node.cfg.learning_rate == 1e-3  # nothing of it applied
    assert len(node.backend.configured) == 1
