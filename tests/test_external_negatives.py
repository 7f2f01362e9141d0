"""external_negatives = false: peers teach by their right answers only. The step keeps every
completion (so the token normaliser is unchanged), own ones at their advantage, the peers' at
theirs when it is not negative and at 0 when it is; the default (the paper's) trains the peers'
wrong answers at their negative advantage."""

from __future__ import annotations

import pytest
from scripted import make_cfg, make_node

from sapo_edge.data.rollout import RolloutGroup
from sapo_edge.data.task_sampler import TaskSampler
from sapo_edge.data.tasks import regenerate
from sapo_edge.swarm.transport import InProcessHub


def _node(tmp_path, external_negatives: bool):
    cfg = make_cfg(
        tmp_path, local_samples=2, external_samples=2, external_negatives=external_negatives
    )
    node = make_node(cfg, "n", InProcessHub().connect("id-n"), right=1)  # 1 of 4 own right
    theirs = TaskSampler(cfg.domains, cfg.domain_configs, seed=77)  # a peer's own questions
    for ref in theirs.sample_batch(3):
        task = regenerate(ref)  # a peer's group: two right answers, a wrong one, a right one
        answers = tuple(
            f"<answer>{a}</answer>" for a in (task.answer, task.answer, "-1", task.answer)
        )
        node.pool.add(
            RolloutGroup(ref, task.question, task.answer, answers, (1.0,) * 4, "id-p", "m", 0, 0.0),
            0,
        )
    return node


def _step(node):
    return sorted(
        [
            (s.messages[-1]["content"], s.completion.trained_ids, s.advantage)
            for s in node.backend.steps[-1]
        ],
        key=repr,
    )


def _expected(groups, advantage):
    return [
        (g.question, c.trained_ids, advantage(adv))
        for g in groups
        for c, adv in zip(g.tokens, g.advantages, strict=True)
    ]


@pytest.mark.parametrize("external_negatives", [True, False])
def test_the_step_trains_own_groups_as_scored_and_peers_by_the_setting(
    tmp_path, external_negatives
):
    node = _node(tmp_path, external_negatives)
    report = node.run_round()
    own, peers = node.last_groups.own, node.last_groups.external
    own_trained = [g for g in own if any(a != 0 for a in g.advantages)]
    assert own_trained and len(peers) == 2
    assert all(any(a < 0 for a in g.advantages) for g in own_trained + peers)  # both have wrong
    expected = _expected(own_trained, lambda a: a) + _expected(
        peers, lambda a: a if external_negatives else max(a, 0.0)
    )
    assert _step(node) == sorted(expected, key=repr)
    assert len(_step(node)) == 4 * (len(own_trained) + 2)  # every completion: same normaliser
    negative = [s.advantage for s in node.backend.steps[-1] if s.advantage < 0]
    own_negative = sum(a < 0 for g in own_trained for a in g.advantages)
    assert len(negative) == own_negative + (
        2 if external_negatives else 0
    )  # a wrong one a peer group
    assert report.external_zeroed == (0 if external_negatives else 2)  # and it says how many
