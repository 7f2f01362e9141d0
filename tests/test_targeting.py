"""Targeted external samples (sapo_edge/rl/targeting.py, ExternalPool.sample's prefer): the ranking
of peer groups, the limits (J, the targeted share, own groups, re-scoring work), the fall back to
the uniform draw, determinism, and a node that trains exactly the groups it chose."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from scripted import make_cfg, make_node
from task_configs import ONE_DIGIT_ADD

from sapo_edge.data.rollout import RolloutGroup
from sapo_edge.data.task_sampler import TaskSampler
from sapo_edge.data.tasks import TaskRef, regenerate
from sapo_edge.rl.pool import ExternalPool
from sapo_edge.rl.sampling import ScoredGroup, scored
from sapo_edge.rl.targeting import Success, targeted_limit, wanted
from sapo_edge.swarm.transport import InProcessHub


def peer(i: int, dataset: str, right: bool = True, producer: str = "p1") -> RolloutGroup:
    """A peer's group; the stand-in verifier finds a right answer in it when `right`."""
    return RolloutGroup(
        task_ref=TaskRef.make(dataset, {}, seed=1, index=i),
        question=f"{dataset} q{i}",
        reference_answer="1",
        completions=(f"{dataset} {i}.{0 if right else 1}", f"{dataset} {i}.1"),
        rewards=(0.0, 0.0),  # the producer's claim: never read
        producer=producer,
        model="m",
        round=0,
        created_at=0.0,
    )


def verify(g: RolloutGroup) -> ScoredGroup:
    rewards = [1.0 if c.endswith(".0") else 0.0 for c in g.completions]
    return scored(g.group_id, g.task_ref, g.question, list(g.completions), rewards, g.producer)


def own(i: int, dataset: str, rewards: list[float]) -> ScoredGroup:
    ref = TaskRef.make(dataset, {}, 0, i)
    return scored(f"own{dataset}{i}", ref, f"q{i}", [str(r) for r in rewards], rewards, "self")


def test_wanted_ranks_failed_questions_then_failed_domains_then_weak_domains():
    mine = [own(0, "a", [0, 0]), own(1, "b", [1, 0]), own(2, "b", [0, 0]), own(3, "c", [1, 1])]
    success = Success()
    success.update(mine)  # a: 0, b: 0.25, c: 1; the average 0.4167
    rank = wanted(mine, success)
    same_question = RolloutGroup(**{**peer(9, "b").__dict__, "task_ref": mine[2].task_ref})
    assert rank(same_question) == (0, 0.0)  # this node drew it and failed it
    assert rank(peer(1, "a")) == (1, 0.0)  # every own completion in domain a failed
    assert rank(peer(2, "b")) == (2, 0.25)  # b is below the node's average
    assert rank(peer(3, "c")) is None and rank(peer(4, "d")) is None  # strong, unseen
    # the moving average: this round weighs 0.3
    success.update([own(5, "c", [0, 0])])
    assert success.by_domain["c"] == pytest.approx(0.7)
    restored = Success()
    restored.load_state_dict(success.state_dict())
    assert restored.by_domain == success.by_domain


def test_the_limit_is_a_share_of_j_and_never_more_than_the_own_groups_trained():
    assert targeted_limit(0.5, 4, 4) == 2
    assert targeted_limit(0.5, 3, 4) == 1  # rounded down
    assert targeted_limit(1.0, 6, 2) == 2  # never more peer groups for teaching than own ones
    # no own group trained (every own completion failed alike: the Aha case): the share alone,
    # since no own group is crowded out and the wanted peer groups are all it can learn from
    assert targeted_limit(1.0, 4, 0) == 4
    assert targeted_limit(0.5, 4, 0) == 2
    assert targeted_limit(0.5, 0, 4) == 0


def _pool(wanted_n: int = 6, other_n: int = 6, useless: int = 0) -> ExternalPool:
    pool = ExternalPool("me")
    for i in range(other_n):
        pool.add(peer(i, "c"), 0)
    for i in range(wanted_n):
        pool.add(peer(100 + i, "a"), 0)
    for i in range(useless):  # wanted domain, but our verifier finds no right answer
        pool.add(peer(200 + i, "a", right=False), 0)
    return pool


def prefer_a(g: RolloutGroup):
    return (1, 0.0) if g.task_ref.dataset == "a" else None


def test_it_takes_wanted_groups_first_up_to_the_limit_and_respects_j():
    for seed in range(30):
        pool = _pool()
        got = pool.sample(4, 0, verify, random.Random(seed), prefer=prefer_a, prefer_max=2)
        assert len(got) == 4 and pool.last_targeted == 2  # J respected, limit reached
        assert [g.task_ref.dataset for g in got[:2]] == ["a", "a"]  # the targeted ones first
        assert pool.stats()["targeted"] == 2 and pool.stats()["used"] == 4
    pool = _pool(wanted_n=2)
    got = pool.sample(3, 0, verify, random.Random(0), prefer=prefer_a, prefer_max=9)
    assert len(got) == 3 and pool.last_targeted == 2  # never more than J, nor than wanted
    # over seeds, the untargeted rest is the uniform draw over what is left: 'a' groups in it
    # 4 of 10, so 2 + 2 x 0.4 = 2.8 of 4 picks are 'a' on average
    share = Counter()
    for seed in range(400):
        got = _pool().sample(4, 0, verify, random.Random(seed), prefer=prefer_a, prefer_max=2)
        share.update(g.task_ref.dataset for g in got)
    assert 2.7 <= share["a"] / 400 <= 2.9, share


def test_nothing_wanted_is_exactly_the_uniform_draw():
    for seed in range(10):
        a, b, c = _pool(), _pool(), _pool()
        ra, rb, rc = random.Random(seed), random.Random(seed), random.Random(seed)
        plain = [g.group_id for g in a.sample(4, 0, verify, ra)]
        none = [g.group_id for g in b.sample(4, 0, verify, rb, lambda g: None, prefer_max=2)]
        zero = [g.group_id for g in c.sample(4, 0, verify, rc, prefer_a, prefer_max=0)]
        assert plain == none == zero and b.last_targeted == c.last_targeted == 0
        assert ra.getstate() == rb.getstate() == rc.getstate()
        assert a.stats() == b.stats() == c.stats()


def test_the_draw_is_deterministic_under_the_seed():
    def ids(seed):
        pool = _pool()
        return [g.group_id for g in pool.sample(4, 0, verify, random.Random(seed), prefer_a, 2)]

    assert ids(3) == ids(3)
    assert len({tuple(ids(s)) for s in range(10)}) > 1


def test_a_flood_of_useless_wanted_groups_costs_bounded_rescoring():
    pool = _pool(wanted_n=0, useless=50)
    calls = []

    def counting(g):
        calls.append(g.task_ref.dataset)
        return verify(g)

    got = pool.sample(4, 0, counting, random.Random(0), prefer=prefer_a, prefer_max=2)
    assert len(got) == 4 and pool.last_targeted == 0  # the uniform draw filled J
    assert calls[:8] == ["a"] * 8  # PREFER_TRIES (4) per wanted slot, then the uniform draw
    assert calls[8:].count("c") == 4 and calls.count("a") < 50 and len(pool) == 50 + 6 - len(calls)


# ------------------------------------------------------------------------------ a node
CHAIN3 = {"min_terms": 3, "max_terms": 3, "min_digits": 2, "max_digits": 2}


def _targeted_node(tmp_path, right: int):
    """Node n answers one-digit sums (1 of 4 right when right=1) and always fails chain_sum
    (the scripted policy adds the first two two-digit terms of three, never the right sum):
    chain_sum is its failed domain."""
    cfg = make_cfg(
        tmp_path,
        domains={"basic_arithmetic": 1.0, "chain_sum": 1.0},
        domain_configs={"basic_arithmetic": ONE_DIGIT_ADD, "chain_sum": CHAIN3},
        questions_per_round=2,
        local_samples=2,
        external_samples=2,
        external_sampling="targeted",
        targeted_share=0.5,
    )
    node = make_node(cfg, "n", InProcessHub().connect("id-n"), right=right)
    theirs = TaskSampler(cfg.domains, cfg.domain_configs, seed=77)  # a peer's own questions
    for _ in range(4):
        for ref in theirs.sample_batch(2):
            task = regenerate(ref)
            answers = (f"<answer>{task.answer}</answer>", "<answer>0.5</answer>")
            g = RolloutGroup(
                ref, task.question, task.answer, answers, (1.0, 0.0), "id-p", "m", 0, 0.0
            )
            node.pool.add(g, 0)
    return node


def test_a_targeted_node_trains_exactly_the_groups_it_chose(tmp_path):
    node = _targeted_node(tmp_path, right=1)
    report = node.run_round()
    chosen = node.last_groups.external
    assert report.external_targeted == 1 and report.external_used == 2  # floor(0.5 x J=2)
    assert chosen[0].task_ref.dataset == "chain_sum"  # the Aha domain's group, picked first
    own_trained = [g for g in node.last_groups.own if any(a != 0 for a in g.advantages)]
    assert [g.task_ref.dataset for g in own_trained] == ["basic_arithmetic"]
    expected = [
        (g.question, c.trained_ids, adv)
        for g in own_trained + chosen
        for c, adv in zip(g.tokens, g.advantages, strict=True)
    ]
    step = node.backend.steps[-1]
    got = [(s.messages[-1]["content"], s.completion.trained_ids, s.advantage) for s in step]
    assert sorted(got, key=repr) == sorted(expected, key=repr)
    assert node.success.by_domain == {"basic_arithmetic": 0.25, "chain_sum": 0.0}


def test_a_node_whose_own_groups_teach_nothing_still_takes_its_wanted_share(tmp_path):
    """The Aha case (issue 45): no own group trains, so 'never more than the own groups the
    step trains' would shut targeting out exactly where a peer's right answer teaches most."""
    node = _targeted_node(tmp_path, right=0)  # every own completion wrong: no own group trained
    report = node.run_round()
    assert report.external_targeted == 1 and report.local_used == 0  # floor(0.5 * 2)
    assert report.external_used == 2  # the other one from the uniform draw
