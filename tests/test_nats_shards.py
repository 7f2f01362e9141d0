"""Sharding a NATS room (swarm/shards.py), without a network: subtrees at a depth split the leaves
exactly, the chosen fan-in keeps a node's expected inbound within its budget whatever the
swarm's size, the planner finds a small room's 'everything' and narrows in a big one, and the
share of groups that reach some trainer matches the paper's uniform pool (a Monte Carlo of the
whole swarm against docs/scale.md's formula)."""

from __future__ import annotations

import math
import random

from hypothesis import example, given, settings
from hypothesis import strategies as st

from sapo_edge.swarm.shards import (
    EVERYTHING,
    MAX_DEPTH,
    NARROWEST,
    START,
    FanIn,
    RateEstimate,
    ShardPlanner,
    choose_fanin,
    draw_subtrees,
    leaf_subject,
    room_subject,
    subtree_subject,
)

ROUTE = "ab" * 16


def matches(subject: str, leaf: str) -> bool:
    """NATS subject matching, written from the spec: tokens, '*' one token, '>' one or more."""
    s, t = subject.split("."), leaf.split(".")
    if s[-1] == ">":
        return len(t) >= len(s) and all(a in ("*", b) for a, b in zip(s[:-1], t, strict=False))
    return len(s) == len(t) and all(a in ("*", b) for a, b in zip(s, t, strict=True))


@settings(max_examples=60, deadline=None)
@given(depth=st.integers(0, MAX_DEPTH), seed=st.integers(0, 2**32))
def test_the_subtrees_at_a_depth_split_the_leaves_exactly(depth: int, seed: int) -> None:
    rng = random.Random(seed)
    subjects = [subtree_subject(ROUTE, depth, i) for i in range(16**depth)] if depth < 3 else None
    for _ in range(20):
        leaf = leaf_subject(ROUTE, rng)
        assert leaf.startswith(room_subject(ROUTE) + ".") and "default" not in leaf
        if subjects is not None:
            assert sum(matches(s, leaf) for s in subjects) == 1
        index = int("".join(leaf.split(".")[2 : 2 + depth]) or "0", 16)
        assert matches(subtree_subject(ROUTE, depth, index), leaf)
        other = (index + 1) % 16**depth
        assert depth == 0 or not matches(subtree_subject(ROUTE, depth, other), leaf)


@settings(max_examples=300, deadline=None)
@given(
    rate=st.floats(0.0, 1e7, allow_nan=False),
    budget=st.floats(1.0, 1e3, allow_nan=False),
)
def test_the_chosen_fanin_keeps_expected_inbound_within_budget(rate: float, budget: float) -> None:
    fan = choose_fanin(rate, budget)
    assert 1 <= fan.k < 16 and 0 <= fan.depth <= MAX_DEPTH
    if fan == NARROWEST and rate * NARROWEST.share > budget:
        return  # beyond 65,536 x budget: the narrowest, and the hard cap does the rest
    assert rate * fan.share <= budget * (1 + 1e-9)
    if fan != EVERYTHING:
        assert rate * fan.share >= budget / 2  # never needlessly narrow


def test_draws_are_distinct_subtrees_and_every_one_is_drawn_over_time() -> None:
    rng = random.Random(1)
    fan = FanIn(1, 3)
    seen = set()
    for _ in range(60):
        got = draw_subtrees(fan, rng)
        assert len(set(got)) == 3 and all(0 <= i < 16 for i in got)
        seen.update(got)
    assert seen == set(range(16))  # every producer's leaves are heard by this node over time


def _estimate(batches_per_s: float, share: float, seconds: float, rng: random.Random):
    est = RateEstimate(window_s=1e9)
    for _ in range(int(seconds)):
        est.arrived(sum(rng.random() < share for _ in range(int(batches_per_s))))
        est.close(0.0, 1.0, share)
    return est


def test_the_rate_estimate_is_unbiased_whatever_the_share() -> None:
    rng = random.Random(2)
    for share in (1.0, 1 / 16, 3 / 256):
        est = _estimate(400, share, 60, rng)
        assert abs(est.rate() - 400) / 400 < 0.15, share


@settings(max_examples=200, deadline=None)
@example(0.5, [(0, 20.0, 1.0), (0, 0.3, 0.0), (5, 1e-10, 1 / 65536), (0, 0.3, 0.0)])  # to ~0
@example(1.0, [(0, 1.0, 1.0), (0, 1e-05, 1 / 65536), (1, 1.0, 0.0)])  # big span leaves a tiny one
@given(
    st.floats(0.5, 120.0),
    st.lists(
        st.tuples(
            st.integers(0, 50),  # arrivals in the span
            st.floats(0.0, 20.0),  # seconds: a span may be empty
            st.sampled_from([0.0, 1.0, 1 / 16, 3 / 256, 7 / 4096, 1 / 65536]),  # share
        ),
        max_size=120,
    ),
)
def test_the_rate_estimate_is_what_summing_its_window_gives(window, spans) -> None:
    """The estimate keeps running totals; a reference sums the window from scratch at every
    step, with its own idea of the window: spans that ended at or after now - window_s."""
    est, kept, now = RateEstimate(window_s=window), [], 0.0
    for arrivals, seconds, share in spans:
        now += seconds
        est.arrived(arrivals)
        est.close(now, seconds, share)
        kept = [s for s in kept + [(now, arrivals, seconds * share)] if s[0] >= now - window]
        seen, exposure = sum(s[1] for s in kept), math.fsum(s[2] for s in kept)
        assert est.seen == seen
        if exposure > 0:  # a running sum: rounding error, bounded relative to what is left
            assert math.isclose(est.rate(), seen / exposure, rel_tol=1e-6)
        else:
            assert est.rate() is None


def test_a_small_room_reaches_everything_and_a_big_one_narrows_within_budget() -> None:
    rng = random.Random(3)
    small = ShardPlanner(budget_groups=64)
    assert small.fan == START
    for _ in range(4):  # 5 nodes, one batch a round each: a 1/256 share hears nothing
        heard = sum(rng.random() < small.fan.share for _ in range(5))
        small.round_done(60.0, 8.0, heard)
    assert small.fan == EVERYTHING

    big = ShardPlanner(budget_groups=64)  # 100,000 nodes, one 8-group batch per 60 s round
    rate, est, fans = 100_000 / 60.0, RateEstimate(window_s=180.0), []
    for t in range(60):  # ten minutes in 10 s ticks; a round ends every 60 s
        arrivals = sum(rng.random() < big.fan.share for _ in range(int(rate * 10)))
        est.arrived(arrivals)
        est.close(10.0 * t, 10.0, big.fan.share)
        big.fan = big.tick(est)
        fans.append(big.fan)
        if t % 6 == 5:
            big.round_done(60.0, 8.0, 99)
    for fan in fans[12:]:  # settled after two rounds, and stays within budget
        assert 0.4 * 64 <= rate * 60.0 * fan.share * 8 <= 1.3 * 64, fan


def reach(n: int, g: int, j: int, budget: int | None, rng: random.Random) -> float:
    """One round of a swarm of n nodes each publishing g groups: with budget None every node
    gets everything (the paper's uniform pool), else each listens to the fan-in choose_fanin()
    gives and keeps at most `budget` groups; each node trains on j groups drawn uniformly from
    what it got. Returns the share of groups trained on by at least one node."""
    leaves = [rng.randrange(16**MAX_DEPTH) for _ in range(n)]  # one batch per producer
    trained = set()
    fan = EVERYTHING if budget is None else choose_fanin((n - 1) * g / g, budget / g)
    for node in range(n):
        if fan == EVERYTHING:
            got = [p for p in range(n) if p != node]
        else:
            subtrees = set(draw_subtrees(fan, rng))
            shift = 16 ** (MAX_DEPTH - fan.depth)
            got = [p for p in range(n) if p != node and leaves[p] // shift in subtrees]
        groups = [(p, i) for p in got for i in range(g)]
        rng.shuffle(groups)
        if budget is not None:
            groups = groups[:budget]
        trained.update(rng.sample(groups, min(j, len(groups))))
    return len(trained) / (n * g)


def test_sharding_reaches_trainers_like_the_uniform_pool() -> None:
    """docs/scale.md: under the uniform pool a group is trained on by J/G nodes on average, so
    a share 1-(1-J/((N-1)G))^(N-1) ~ 1-e^(-J/G) of groups reach a trainer; sharded, a node gets
    M groups and picks J, each group reaches ~M/G nodes: 1-(1-J/M)^(M/G), the same for M >> J."""
    rng = random.Random(4)
    n, g, j, m = 600, 8, 4, 64
    uniform = sum(reach(n, g, j, None, rng) for _ in range(2)) / 2
    sharded = sum(reach(n, g, j, m, rng) for _ in range(2)) / 2
    formula_uniform = 1 - (1 - j / ((n - 1) * g)) ** (n - 1)
    assert abs(uniform - formula_uniform) < 0.02
    assert abs(sharded - uniform) < 0.05, (sharded, uniform)
    assert abs(uniform - (1 - math.exp(-j / g))) < 0.02
