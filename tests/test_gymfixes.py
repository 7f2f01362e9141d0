"""reasoning-gym generator bugs that stopped a laptop's run (the namespace LAN test's node that
stopped training and never answered SIGTERM; another that stopped with "Cannot continue"):
basic_arithmetic's divisor search is bounded, with the same questions wherever it was quick,
and a question reasoning-gym cannot build is passed over for the next one."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from sapo_edge.data import gymfixes, tasks
from sapo_edge.data.task_sampler import TaskSampler
from sapo_edge.data.tasks import TaskError, TaskRef, regenerate


@pytest.mark.timeout(60)
def test_the_divisor_search_is_bounded_and_questions_stay_the_same() -> None:
    tasks._registry()  # installs the fixes
    from reasoning_gym.arithmetic import basic_arithmetic

    assert basic_arithmetic.find_common_divisors is gymfixes.find_common_divisors
    huge = 1234 * 5678 * 9012 * 3456 * 7890 * 2345  # six 4-digit terms: ~10^21
    got = basic_arithmetic.find_common_divisors(huge, 0)  # reasoning-gym's: 10^10.5 tries
    assert 1 in got and huge in got and all(huge % d == 0 for d in got)

    # wherever reasoning-gym's search was quick, the same divisors in the same order: the same
    # questions (a swarm's nodes with and without this fix would still agree on those)
    rng = random.Random(7)
    for _ in range(2000):
        a, b = rng.randrange(-(10**9), 10**9), rng.choice([0, rng.randrange(1, 10**6)])
        assert gymfixes.find_common_divisors(a, b) == theirs(a, b)


def theirs(a: int, b: int) -> list[int]:
    """reasoning-gym 0.1's find_common_divisors, as written there (the reference)."""
    g = math.gcd(a, b)
    out, i = [], 1
    while i * i <= g:
        if g % i == 0:
            out.append(i)
            if i * i != g:
                out.append(g // i)
        i += 1
    return out


@pytest.mark.timeout(120)
def test_questions_that_took_seconds_build_at_once_and_the_others_are_unchanged() -> None:
    slow = [(465754262, 147), (921501476, 763), (318853592, 440)]  # 7-12 s each before
    for seed, index in slow:
        regenerate(TaskRef.make("basic_arithmetic", None, seed, index))
    rng = random.Random(3)
    from reasoning_gym.arithmetic import basic_arithmetic

    for _ in range(300):  # the same question with reasoning-gym's own search
        ref = TaskRef.make("basic_arithmetic", None, rng.randrange(2**31), rng.randrange(1000))
        try:
            ours = regenerate(ref).question
        except TaskError:
            continue
        basic_arithmetic.find_common_divisors = theirs
        try:
            tasks._dataset.cache_clear()
            assert regenerate(ref).question == ours
        finally:
            basic_arithmetic.find_common_divisors = gymfixes.find_common_divisors
            tasks._dataset.cache_clear()


def test_a_question_reasoning_gym_cannot_build_is_passed_over() -> None:
    """basic_arithmetic item 208 of seed 184411327 raises ZeroDivisionError: the run went on
    only until a node drew it ("reasoning-gym failed to build ...": Cannot continue)."""
    with pytest.raises(TaskError):
        regenerate(TaskRef.make("basic_arithmetic", None, 184411327, 208))
    sampler = TaskSampler({"basic_arithmetic": 1.0}, None, seed=184411327)
    sampler._next["basic_arithmetic"] = 208
    built = sampler.build_batch(1)
    assert [t.ref.index for t in built] == [209] and sampler.skipped == 1
    assert sampler._next["basic_arithmetic"] == 210
    state = sampler.state_dict()  # a resumed run draws the same next question
    again = TaskSampler({"basic_arithmetic": 1.0}, None, seed=184411327)
    again.load_state_dict(state)
    assert again.build_batch(1)[0].ref == sampler.build_batch(1)[0].ref
    assert dataclasses.replace(built[0].ref, index=208).index == 208
