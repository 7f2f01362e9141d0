"""Adaptive I/J (sapo_edge/mix.py): the bandit's choices by hand, its checkpoint, and a node that
uses it (scripted policy): J in metrics.jsonl, exact resume, and a preference for helpful peers."""

import json
import math

import pytest
from scripted import ScriptedBackend, make_cfg, make_node

from sapo_edge.config import Config, ConfigError
from sapo_edge.mix import ARMS, AdaptiveMix, feasible_arms
from sapo_edge.swarm.transport import InProcessHub


def test_feasible_arms_keep_the_step_size_within_own_groups():
    assert feasible_arms(8, 8) == [0, 2, 4, 6]
    assert feasible_arms(4, 8) == [0, 2, 4]  # J <= I + J
    assert feasible_arms(8, 4) == [4, 6]  # I = 8 - J must be at most 4 own groups
    assert feasible_arms(10, 8) == [2, 4, 6]


def test_untried_arms_go_first_in_the_seeded_order_then_the_upper_bound_decides():
    mix = AdaptiveMix(seed=0)
    mix.order = [4, 0, 6, 2]
    # own mean reward each round; each J is credited with the next round's change
    assert mix.choose(0.20, 8, 8) == 4 and mix.last_progress is None
    assert mix.choose(0.30, 8, 8) == 0 and mix.last_progress == pytest.approx(0.10)  # J=4: +0.10
    assert mix.choose(0.25, 8, 8) == 6  # J=0: -0.05
    assert mix.choose(0.25, 8, 8) == 2  # J=6: 0
    # J=2: +0.10. Evidence discounted by 0.9 per update: weights 4: 0.729, 0: 0.81, 6: 0.9,
    # 2: 1 (N = 3.439, ln N = 1.235181); means 0.1, -0.05, 0, 0.1 (discounting keeps a mean).
    # UCB = mean + 0.1 * sqrt(ln N / weight):
    #   J=4: 0.1 + 0.1 * sqrt(1.235181 / 0.729) = 0.230168
    #   J=0: -0.05 + 0.1 * sqrt(1.235181 / 0.81) = 0.073488
    #   J=6: 0 + 0.1 * sqrt(1.235181 / 0.9) = 0.117151
    #   J=2: 0.1 + 0.1 * sqrt(1.235181) = 0.211139
    assert mix.choose(0.35, 8, 8) == 4  # as good as J=2 on less evidence
    assert mix.weight == pytest.approx({4: 0.729, 0: 0.81, 6: 0.9, 2: 1.0})
    assert mix.mean(0) == pytest.approx(-0.05) and mix.mean(2) == pytest.approx(0.1)
    assert mix.score(4) == pytest.approx(0.230168, abs=1e-6)
    assert mix.score(0) == pytest.approx(0.073488, abs=1e-6)
    assert mix.score(6) == pytest.approx(0.117151, abs=1e-6)
    assert mix.score(2) == pytest.approx(0.211139, abs=1e-6)
    assert math.log(3.439) == pytest.approx(1.235181, abs=1e-6)


def test_only_feasible_arms_are_chosen_and_none_is_a_clear_error():
    mix = AdaptiveMix(seed=0)
    mix.order = [0, 2, 4, 6]
    assert mix.choose(0.1, 8, 4) == 4  # J=0 and J=2 would need 8 or 6 own groups of 4
    with pytest.raises(ValueError, match="raise questions_per_round"):
        AdaptiveMix(seed=0).choose(0.1, 9, 2)


def test_the_order_comes_from_the_seed():
    orders = {tuple(AdaptiveMix(seed=s).order) for s in range(20)}
    assert all(sorted(o) == list(ARMS) for o in orders) and len(orders) > 1
    assert AdaptiveMix(seed=7).order == AdaptiveMix(seed=7).order


def test_saved_state_continues_exactly():
    a = AdaptiveMix(seed=3)
    rewards = [0.2, 0.3, 0.1, 0.4, 0.35, 0.2, 0.5, 0.45]
    for r in rewards[:5]:
        a.choose(r, 8, 8)
    b = AdaptiveMix(seed=99)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert [a.choose(r, 8, 8) for r in rewards[5:]] == [b.choose(r, 8, 8) for r in rewards[5:]]
    assert a.state_dict() == b.state_dict()
    with pytest.raises(ValueError, match="not one this version can read"):
        b.load_state_dict({"version": 2})


def test_config_takes_mix_adaptive_and_refuses_what_cannot_run(tmp_path):
    assert Config(mix="adaptive").mix == "adaptive" and Config().mix == "fixed"
    with pytest.raises(ConfigError, match="mix 'bandit' is unknown: use one of fixed, adaptive"):
        Config(mix="bandit")
    with pytest.raises(ConfigError, match="raise questions_per_round"):
        Config(mix="adaptive", local_samples=2, external_samples=8, questions_per_round=2)


class LearnsFromPeers(ScriptedBackend):
    """A scripted policy that gets better after a step with peer groups in it (3 of 4 right
    instead of 1): a world where sharing helps, so the bandit should learn to take J > 0."""

    def train_step(self, samples, progress=None):
        own = self.steps_own_prompts
        self.right = 3 if any(s.messages[-1]["content"] not in own for s in samples) else 1
        return super().train_step(samples, progress)

    def generate(self, prompts, n, **kw):
        self.steps_own_prompts = {p[-1]["content"] for p in prompts}
        return super().generate(prompts, n, **kw)


def _adaptive_run(tmp_path, rounds: int, stop_round: int | None = None, backend=ScriptedBackend):
    cfg = make_cfg(
        tmp_path,
        mix="adaptive",
        questions_per_round=4,
        local_samples=2,
        external_samples=2,
        checkpoint_every=1,
    )
    hub = InProcessHub()
    peer = make_node(make_cfg(tmp_path, questions_per_round=4), "p", hub.connect("id-p"), right=2)
    transport = hub.connect("id-n")
    node = make_node(cfg, "n", transport)
    node.backend = backend()
    node.backend.reset(0)
    for r in range(rounds):
        peer.run_round()
        if r == stop_round:  # a restarted process: resumes from the checkpoint after round r-1
            node = make_node(cfg, "n", transport)
            node.backend = backend()
            assert node.resume() and node.round == stop_round
        node.run_round()
    return node


def _lines(node):
    rows = [json.loads(ln) for ln in node.metrics_path.read_text().splitlines()]
    keep = ("round", "mix", "local_target", "external_target", "mix_progress", "external_used")
    return [{k: r[k] for k in keep} for r in rows]


def test_adaptive_node_records_its_choice_and_resumes_exactly(tmp_path):
    straight = _adaptive_run(tmp_path / "a", rounds=7)
    resumed = _adaptive_run(tmp_path / "b", rounds=7, stop_round=4)
    lines = _lines(straight)
    assert lines == _lines(resumed)
    assert resumed.backend.weights == straight.backend.weights
    assert resumed.mix.state_dict() == straight.mix.state_dict()
    assert all(m["mix"] == "adaptive" for m in lines)
    assert all(m["local_target"] + m["external_target"] == 4 for m in lines)
    # budget 4 of 4 own questions: J in {0, 2, 4}, each tried once first, in the seeded order
    assert sorted(m["external_target"] for m in lines[:3]) == [0, 2, 4]
    assert lines[0]["mix_progress"] is None and lines[1]["mix_progress"] == 0.0


def test_fixed_mix_reports_the_config_targets(tmp_path):
    node = make_node(make_cfg(tmp_path), "a", InProcessHub().connect("id-a"))
    report = node.run_round()
    assert (report.mix, report.local_target, report.external_target) == ("fixed", 2, 2)
    assert report.mix_progress is None


def test_the_bandit_learns_to_take_peer_groups_when_they_help(tmp_path):
    node = _adaptive_run(tmp_path, rounds=16, backend=LearnsFromPeers)
    chosen = [m["external_target"] for m in _lines(node)]
    assert chosen[3:].count(0) <= 1, chosen  # after trying each J once, J=0 is (nearly) dropped
    assert sum(chosen[3:]) >= 2 * 11, chosen


def test_the_printed_round_line_names_the_chosen_j(tmp_path):
    from sapo_edge.trainer import PrintCallback

    lines: list[str] = []
    cfg = make_cfg(tmp_path, mix="adaptive", questions_per_round=4)
    node = make_node(cfg, "a", InProcessHub().connect("id-a"))
    node.callback = PrintCallback(lines.append)
    report = node.run_round()
    assert f"(ext -, J={report.external_target} chosen)" in lines[-1]
