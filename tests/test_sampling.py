"""The SAPO I/J mix: publishing, own and external sampling, the peer pool's filters and counters."""

from __future__ import annotations

import json
import random
import sys
import threading
from collections import Counter

import pytest

from sapo_edge.data.rollout import RolloutGroup
from sapo_edge.data.tasks import TaskError, TaskRef
from sapo_edge.rl.pool import ExternalPool
from sapo_edge.rl.sampling import ScoredGroup, sample_self, scored, select_subset


def rg(i: int, producer: str = "peer-1", rewards: tuple[float, ...] = (1.0, 0.0)) -> RolloutGroup:
    return RolloutGroup(
        task_ref=TaskRef.make("basic_arithmetic", {}, seed=1, index=i),
        question=f"q{i}",
        reference_answer="1",
        completions=tuple(f"answer {i}.{k}" for k in range(len(rewards))),
        rewards=rewards,
        producer=producer,
        model="m",
        round=0,
        created_at=0.0,
    )


def verify(g: RolloutGroup) -> ScoredGroup:
    """Stand-in verifier: a completion is right when it ends in .0 (ignores the producer's rewards)."""
    rewards = [1.0 if c.endswith(".0") else 0.0 for c in g.completions]
    return scored(g.group_id, g.task_ref, g.question, list(g.completions), rewards, g.producer)


def own(i: int, rewards: list[float]) -> ScoredGroup:
    return scored(
        f"own{i}", TaskRef.make("bf", {}, 0, i), f"q{i}", [str(k) for k in rewards], rewards, "self"
    )


# --- helpers for this node's own groups -------------------------------------------------------


def test_scored_fills_advantages():
    sg = own(0, [1, 0, 0, 0])
    assert sg.advantages == pytest.approx([1.4997, -0.4999, -0.4999, -0.4999], abs=1e-4)
    assert scored("g", sg.task_ref, "q", ["a", "b"], [1, 0], "self", scale=False).advantages == [
        0.5,
        -0.5,
    ]
    with pytest.raises(ValueError, match="rewards"):
        scored("g", sg.task_ref, "q", ["a", "b"], [1], "self")


def test_select_subset_policies():
    groups = [rg(0), rg(1, rewards=(0.0, 0.0)), rg(2), rg(3, rewards=(1.0, 1.0))]
    rng = random.Random(0)
    assert select_subset(groups, "all", 0, rng) == groups
    assert select_subset(groups, "informative", 0, rng) == [groups[0], groups[2]]
    assert select_subset(groups, "none", 0, rng) == []
    capped = select_subset(groups, "all", 2, rng)
    assert len(capped) == 2 and set(capped) <= set(groups)
    assert capped == sorted(capped, key=groups.index)  # original order kept
    assert (
        len(
            {
                tuple(g.question for g in select_subset(groups, "all", 2, random.Random(s)))
                for s in range(30)
            }
        )
        > 1
    )
    with pytest.raises(ValueError, match="policy"):
        select_subset(groups, "best", 0, rng)


def test_sample_self_drops_zero_advantage_and_never_repeats():
    groups = [own(i, [1, 0] if i % 2 else [1, 1]) for i in range(10)]
    picked = sample_self(groups, 3, random.Random(1))
    assert len(picked) == 3 and len({g.group_id for g in picked}) == 3
    assert all(g.rewards == [1.0, 0.0] for g in picked)
    assert len(sample_self(groups, 100, random.Random(1))) == 5  # only the informative ones
    assert sample_self(groups, 0, random.Random(1)) == []


# --- the external pool ------------------------------------------------------------------------


def test_i_j_mix_counts():
    own_groups = [own(i, [1, 0, 0]) for i in range(8)]
    pool = ExternalPool("me")
    for i in range(10):
        pool.add(rg(i, producer=f"peer-{i % 3}"), local_round=1)
    rng = random.Random(0)
    batch = sample_self(own_groups, 4, rng) + pool.sample(4, 1, verify, rng)
    assert Counter(g.origin == "self" for g in batch) == {True: 4, False: 4}
    assert len(pool) == 6 and pool.stats()["used"] == 4
    assert pool.sample(0, 1, verify, rng) == [] and len(pool) == 6  # J = 0 leaves the pool alone


def test_own_and_duplicate_groups_are_refused():
    pool = ExternalPool("me", capacity=2, max_producer_share=1.0)
    assert not pool.add(rg(0, producer="me"), 0)
    assert pool.add(rg(1), 0)
    assert not pool.add(rg(1, producer="relay"), 0)  # same content relayed: same group id
    assert pool.sample(1, 0, verify, random.Random(0))[0].question == "q1"
    assert not pool.add(rg(1), 1)  # still refused after it was used
    assert pool.add(rg(2), 1) and pool.add(rg(3), 1) and pool.add(rg(4), 1)  # evicts rg(2)
    assert not pool.add(rg(2), 1)  # still refused after it was evicted
    stats = pool.stats()
    assert stats == {
        **stats,
        "own": 1,
        "duplicate": 3,
        "added": 4,
        "evicted": 1,
        "used": 1,
        "size": 2,
    }
    assert len(pool) == 2


def test_rejections_made_elsewhere_are_counted():
    pool = ExternalPool("me")
    pool.reject("bad_json")
    pool.reject("bad_json")
    pool.reject("too_large")
    assert pool.stats()["bad_json"] == 2 and pool.stats()["too_large"] == 1


def test_fresh_groups_come_first_older_fill_and_stale_are_dropped():
    fresh, older = {"q6", "q7", "q8"}, {"q3", "q4", "q5"}
    for seed in range(20):  # without the preference, 20 seeds in a row would not all pass
        pool = ExternalPool("me", freshness_rounds=5)
        for i in range(3):
            pool.add(rg(i), local_round=0)  # stale at round 21 (older than 4 x 5 rounds)
        for i in range(3, 6):
            pool.add(rg(i), local_round=10)  # not fresh at round 21, still usable
        for i in range(6, 9):
            pool.add(rg(i), local_round=18)  # fresh at round 21
        rng = random.Random(seed)
        first = {g.question for g in pool.sample(2, 21, verify, rng)}
        assert first <= fresh
        second = {g.question for g in pool.sample(3, 21, verify, rng)}
        assert second == (fresh - first) | (second & older) and len(second & older) == 2
        assert pool.stats()["stale"] == 3 and len(pool) == 1


def test_external_groups_are_rescored_by_this_node():
    pool = ExternalPool("me")
    pool.add(rg(0, rewards=(0.0, 0.0)), 0)  # producer saw nothing, our verifier finds one right
    pool.add(rg(1, rewards=(1.0, 0.0, 0.0)), 0)  # fine
    mismatch = rg(2, rewards=(0.0, 1.0))
    pool.add(RolloutGroup(**{**mismatch.__dict__, "completions": ("x", "y")}), 0)  # ours: all wrong
    pool.add(rg(3), 0)  # the caller cannot regenerate the task
    pool.add(rg(4), 0)  # the task ref is refused outright

    def rescore(g: RolloutGroup) -> ScoredGroup | None:
        if g.question == "q3":
            return None
        if g.question == "q4":
            raise TaskError("unknown dataset")
        return verify(g)

    got = pool.sample(10, 0, rescore, random.Random(0))
    assert sorted(g.question for g in got) == ["q0", "q1"]
    assert all(g.rewards[0] == 1.0 and g.advantages[0] > 0 for g in got)
    stats = pool.stats()
    assert (stats["used"], stats["zero_advantage"], stats["rescore_failed"], stats["size"]) == (
        2,
        1,
        2,
        0,
    )


def test_per_peer_cap_leaves_the_rest_for_later():
    pool = ExternalPool("me", max_peer_share=0.5)
    for i in range(6):
        pool.add(rg(i, producer="chatty"), 0)
    pool.add(rg(10, producer="quiet"), 0)
    got = pool.sample(4, 0, verify, random.Random(0))
    assert Counter(g.origin for g in got) == {"chatty": 2, "quiet": 1}
    assert len(pool) == 4  # the capped groups wait for another round
    assert len(pool.sample(4, 1, verify, random.Random(0))) == 2
    one = ExternalPool("me", max_peer_share=0.01)
    one.add(rg(0), 0)
    one.add(rg(1), 0)
    assert len(one.sample(4, 0, verify, random.Random(0))) == 1  # at least one per peer


def test_fillable_counts_what_a_draw_could_take_under_the_cap_and_age():
    pool = ExternalPool("me", max_peer_share=0.5, freshness_rounds=1)  # usable 4 rounds
    for i in range(6):
        pool.add(rg(i, producer="chatty"), 0)
    pool.add(rg(10, producer="quiet"), 0)
    assert [pool.fillable(j, 0) for j in (0, 1, 2, 4, 6)] == [0, 1, 2, 3, 4]
    for j in (1, 2, 4, 6):  # never more than sample() then takes
        copy = ExternalPool("me", max_peer_share=0.5)
        copy.load_state_dict(pool.state_dict())
        assert len(copy.sample(j, 0, verify, random.Random(0))) == pool.fillable(j, 0)
    assert pool.fillable(4, 5) == 0  # all older than 4 x freshness_rounds: stale


def test_each_group_is_used_once():
    pool = ExternalPool("me")
    for i in range(5):
        pool.add(rg(i), 0)
    rng = random.Random(0)
    seen = [g.group_id for _ in range(4) for g in pool.sample(2, 0, verify, rng)]
    assert len(seen) == 5 and len(set(seen)) == 5
    assert pool.sample(2, 0, verify, rng) == []


def test_external_sampling_is_uniform():
    hits: Counter[str] = Counter()
    rng = random.Random(42)
    for _ in range(2000):
        pool = ExternalPool("me")
        for i in range(4):
            pool.add(rg(i), 0)
        hits.update(g.question for g in pool.sample(1, 0, verify, rng))
    assert all(400 <= hits[f"q{i}"] <= 600 for i in range(4)), hits  # expected 500, sd ~19


def test_bad_pool_settings_are_refused():
    for kw in (
        {"capacity": 0},
        {"freshness_rounds": -1},
        {"max_peer_share": 0.0},
        {"max_peer_share": 1.5},
    ):
        with pytest.raises(ValueError):
            ExternalPool("me", **kw)


def test_thread_safety_counts_add_up():
    pool = ExternalPool("me", capacity=300)
    start = threading.Barrier(3)
    sampled: list[ScoredGroup] = []
    results: list[bool] = []

    def adder(first: int) -> None:
        start.wait(60)
        for i in range(first, first + 600):  # the two adders overlap on 200 groups
            results.append(pool.add(rg(i, producer=f"peer-{i % 4}"), local_round=0))

    def sampler() -> None:
        start.wait(60)
        rng = random.Random(0)
        for _ in range(150):
            sampled.extend(pool.sample(3, 0, verify, rng))

    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often so the lock is really contended
    errors: list[BaseException] = []

    def run(fn, *args) -> threading.Thread:
        def body() -> None:
            try:
                fn(*args)
            except BaseException as e:  # a thread's exception would otherwise only be printed
                errors.append(e)

        return threading.Thread(target=body)

    threads = [run(adder, 0), run(adder, 400), run(sampler)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join(60)
            assert not t.is_alive(), "a thread of the pool test is stuck (a deadlock?)"
    finally:
        sys.setswitchinterval(old_interval)

    assert errors == []
    s = pool.stats()
    assert len(results) == 1200 and sum(results) == 1000 == s["added"]
    assert s["duplicate"] == 200
    assert (
        s["added"]
        == s["size"]
        + s["used"]
        + s["evicted"]
        + s["stale"]
        + s["rescore_failed"]
        + s["zero_advantage"]
    )
    assert len(sampled) == s["used"] and len({g.group_id for g in sampled}) == len(sampled)
    assert s["size"] == len(pool) <= 300


def test_pool_state_round_trips_and_a_stopped_round_gives_its_groups_back():
    pool = ExternalPool("me", freshness_rounds=1)
    for i in range(4):
        pool.add(rg(i), local_round=i)
    pool.add(rg(0), 4)  # a duplicate, counted
    snap = pool.snapshot()
    taken = pool.sample(2, 4, verify, random.Random(0))
    assert len(taken) == 2 and len(pool) == 2
    pool.restore(snap)  # the round that took them stopped before training
    assert len(pool) == 4 and pool.stats() == {**pool.stats(), "used": 0, "duplicate": 1}
    again = pool.sample(2, 4, verify, random.Random(0))
    assert [g.group_id for g in again] == [g.group_id for g in taken]

    state = pool.state_dict()
    copy = ExternalPool("me", freshness_rounds=1)
    assert copy.load_state_dict(json.loads(json.dumps(state))) == 0
    assert copy.stats() == pool.stats() and not copy.add(rg(3), 5)  # seen ids kept: duplicate
    old = json.loads(json.dumps(state))
    del old["entries"][0][0]["finished"]  # a group saved by an older format
    assert ExternalPool("me").load_state_dict(old) == 1
    with pytest.raises(ValueError, match="saved state"):
        ExternalPool("me").load_state_dict({"version": 99})


def sized(i: int, producer: str, n: int) -> RolloutGroup:
    """A group holding 2n + 2 characters of text: question n, answer 1, completions n and 1."""
    return RolloutGroup(
        task_ref=TaskRef.make("basic_arithmetic", {}, seed=2, index=i),
        question="q" * (n - len(str(i))) + str(i),
        reference_answer="1",
        completions=("a" * n, "b"),
        rewards=(1.0, 0.0),
        producer=producer,
        model="m",
        round=0,
        created_at=0.0,
    )


def ids(pool: ExternalPool) -> list[str]:
    return [e.group.question for e in pool.snapshot()[0].values()]


def test_over_its_text_budget_the_pool_drops_the_oldest_group_of_the_biggest_producer():
    pool = ExternalPool(
        "me", max_chars=906, group_floor=0
    )  # honest 102 + flood 402 + 402 = 906: fits exactly
    assert pool.add(sized(1, "honest", 50), 0)
    assert pool.add(sized(2, "flood", 200), 0) and pool.add(sized(3, "flood", 200), 0)
    assert len(ids(pool)) == 3 and pool.stats()["evicted"] == 0
    assert pool.add(sized(4, "flood", 200), 0)  # 1308 > 906: flood holds most, its oldest goes
    assert [q[-1] for q in ids(pool)] == ["1", "3", "4"] and pool.stats()["evicted"] == 1
    assert pool.add(sized(5, "honest", 50), 0)  # 1008: flood (804) still holds most
    assert [q[-1] for q in ids(pool)] == ["1", "4", "5"] and pool.stats()["evicted"] == 2
    # the producer holding the most text loses, whatever its name sorts as
    small = ExternalPool("me", max_chars=500, group_floor=0)
    small.add(sized(1, "zz-honest", 50), 0)
    small.add(sized(2, "aa-flood", 200), 0)  # 504 > 500
    assert [q[-1] for q in ids(small)] == ["1"]


def test_a_single_group_over_the_text_budget_is_kept_alone():
    pool = ExternalPool("me", max_chars=100)
    assert pool.add(sized(1, "p", 200), 0) and len(pool) == 1 and pool.stats()["evicted"] == 0


def test_a_loaded_pool_keeps_arrival_rounds_text_sizes_and_skips_only_bad_groups():
    pool = ExternalPool("me", max_chars=906, group_floor=0)
    pool.add(sized(1, "honest", 50), 3)
    pool.add(sized(2, "flood", 200), 4)
    state = json.loads(json.dumps(pool.state_dict()))
    bad = dict(state["entries"][0][0], rewards="x")  # no longer valid
    state["entries"] = [[bad, 0], [bad, 0], *state["entries"]]
    copy = ExternalPool("me", max_chars=906, group_floor=0)
    assert copy.load_state_dict(state) == 2  # both bad ones counted, the good ones after kept
    assert [e.received_round for e in copy.snapshot()[0].values()] == [3, 4]
    assert [e.size for e in copy.snapshot()[0].values()] == [102, 402]
    copy.add(sized(3, "flood", 200), 5)  # 906: fits
    copy.add(sized(4, "flood", 200), 5)  # over: flood's oldest goes, as before the restart
    assert [q[-1] for q in ids(copy)] == ["1", "3", "4"]
    empty = ExternalPool("me")
    assert empty.load_state_dict({"version": 1}) == 0  # nothing saved: an empty pool
    assert len(empty) == 0 and set(empty.stats().values()) == {0}
    assert empty.add(rg(1), 0)


# --- constructor edges, defaults, the seen-ids bound and the sentences (from `make mutate`) -----


def test_pool_defaults_and_constructor_edges_with_their_sentences():
    p = ExternalPool("me")
    assert (p.capacity, p.freshness_rounds, p.max_age_rounds, p.max_peer_share) == (
        2048,
        5,
        20,
        1.0,
    )
    assert ExternalPool("me", freshness_rounds=2, max_age_rounds=3).max_age_rounds == 3
    assert ExternalPool("me", freshness_rounds=2).max_age_rounds == 8
    one = ExternalPool("me", capacity=1, freshness_rounds=0)  # the smallest legal pool
    assert one.add(rg(1), 0) and len(one) == 1
    for kw, msg in (
        ({"capacity": 0}, "pool capacity is 0; it must hold at least one group."),
        ({"freshness_rounds": -1}, "freshness_rounds is -1; use 0 or more rounds."),
        ({"max_peer_share": 0.0}, "max_peer_share is 0.0; use a fraction in (0, 1]."),
    ):
        with pytest.raises(ValueError) as e:
            ExternalPool("me", **kw)
        assert str(e.value) == msg
    with pytest.raises(ValueError) as e:
        p.load_state_dict({"version": 2})
    assert str(e.value) == "the rollout pool's saved state is not one this version can read."


def test_the_pool_remembers_the_last_eight_times_capacity_ids():
    p = ExternalPool("me", capacity=1)
    groups = [rg(i) for i in range(9)]
    for g in groups:
        assert p.add(g, 0)
    assert not p.add(groups[1], 0)  # the 8 latest ids are remembered...
    assert not p.add(groups[8], 0)
    assert p.add(groups[0], 0)  # ...the 9th latest is forgotten: accepted again
    assert p.stats()["duplicate"] == 2


def test_own_groups_are_counted_each_time():
    p = ExternalPool("me")
    for _ in range(3):
        assert not p.add(rg(1, producer="me"), 0)
    assert p.stats()["own"] == 3 and len(p) == 0


def test_asking_for_no_groups_touches_nothing():
    p = ExternalPool("me", freshness_rounds=1)  # max age 4
    p.add(rg(1), 0)
    assert p.sample(0, 100, verify, random.Random(0)) == []
    assert len(p) == 1 and p.stats()["stale"] == 0  # not even the stale sweep
    assert p.sample(1, 100, verify, random.Random(0)) == [] and p.stats()["stale"] == 1


def test_a_group_exactly_freshness_rounds_old_is_still_offered():
    p = ExternalPool("me", freshness_rounds=5)
    p.add(rg(1), 0)
    p.add(rg(2, producer="peer-2"), 5)
    got = p.sample(2, 5, verify, random.Random(0))
    assert sorted(g.question for g in got) == ["q1", "q2"]


def test_scored_keeps_the_task_and_refuses_texts_that_are_not_the_tokens():
    from sapo_edge.backends.base import Completion

    ref = TaskRef.make("bf", {}, 0, 3)
    assert scored("g", ref, "q", ["a", "b"], [1, 0], "self").task_ref == ref
    toks = [Completion(text="a", ids=(1,), end_id=2)]
    with pytest.raises(ValueError) as e:
        scored("g", ref, "q", ["x"], [1], "self", tokens=toks)
    assert str(e.value) == (
        "the texts scored are not the texts of the tokens to train; score Completion.text."
    )


def test_subset_and_self_sampling_refusals_and_no_draw_when_nothing_is_cut():
    with pytest.raises(ValueError) as e:
        select_subset([], "some", 0, random.Random(0))
    assert str(e.value) == "unknown share policy 'some'; use one of all, informative, none."
    with pytest.raises(ValueError) as e:
        select_subset([], "all", -1, random.Random(0))
    assert str(e.value) == "max_count is -1; use 0 for no cap or a positive number."
    with pytest.raises(ValueError) as e:
        sample_self([], -2, random.Random(0))
    assert str(e.value) == "count is -2; ask for zero or more groups."
    rng = random.Random(5)
    groups = [rg(i) for i in range(3)]
    assert select_subset(groups, "all", 3, rng) == groups  # exactly at the cap: all, no draw
    assert rng.random() == random.Random(5).random()


def test_a_restored_pool_counts_every_group_of_a_producer_against_its_text_budget():
    a1, a2, b = rg(1, producer="peer-a"), rg(2, producer="peer-a"), rg(3, producer="peer-b")
    size = {
        g.question: len(g.question) + 1 + sum(len(c) for c in g.completions) for g in (a1, a2, b)
    }
    big = ExternalPool("me")
    big.add(a1, 0)
    big.add(a2, 0)
    small = ExternalPool("me", max_chars=sum(size.values()) - 1, group_floor=0)
    small.load_state_dict(big.state_dict())
    assert small.add(b, 1) and len(small) == 2  # over by one: peer-a, holding most, loses one
    assert small.stats()["evicted"] == 1
    kept = ExternalPool("me")
    kept.load_state_dict(small.state_dict())
    assert sorted(g.question for g in kept.sample(2, 1, verify, random.Random(0))) == ["q2", "q3"]


def test_a_producer_whose_last_group_was_used_holds_no_text_any_more():
    a, b, c = (rg(i, producer=f"peer-{x}") for i, x in ((1, "a"), (2, "b"), (3, "c")))
    size = len(b.question) + 1 + sum(len(t) for t in b.completions)  # each group's text
    p = ExternalPool("me", max_chars=2 * size, group_floor=0)  # room for two groups
    p.add(a, 0)
    assert [g.question for g in p.sample(1, 0, verify, random.Random(0))] == ["q1"]
    assert p.add(b, 0) and p.add(c, 0)
    assert len(p) == 2 and p.stats()["evicted"] == 0  # peer-a's used group counts for nothing
