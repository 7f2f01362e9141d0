"""Group-relative advantages against hand-computed values, and the zero-advantage filter."""

import math

import pytest

from sapo_edge.rl.advantages import group_advantages, is_informative


def test_one_right_three_wrong_scaled():
    # mean 0.25; centred 0.75, -0.25 x3; sample variance (0.5625 + 3 * 0.0625) / 3 = 0.25, std 0.5
    adv = group_advantages([1, 0, 0, 0])
    assert adv == pytest.approx([0.75 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001])
    assert adv[0] == pytest.approx(1.49970006, abs=1e-8)


def test_one_right_three_wrong_unscaled_is_dr_grpo():
    assert group_advantages([1, 0, 0, 0], scale=False) == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_two_level_rewards_with_eps():
    # [1, 0]: mean 0.5, sample std sqrt(0.5) = 0.70711
    adv = group_advantages([1.0, 0.0], eps=0.0)
    assert adv == pytest.approx([0.5 / math.sqrt(0.5), -0.5 / math.sqrt(0.5)])
    assert group_advantages([3.0, 1.0, 2.0], eps=0.0) == pytest.approx([1.0, -1.0, 0.0])


def test_all_equal_gives_zeros_not_nan():
    assert group_advantages([1, 1, 1, 1]) == [0.0, 0.0, 0.0, 0.0]
    assert group_advantages([0.3] * 8, scale=False) == [0.0] * 8
    assert group_advantages([0.5]) == [0.0]
    assert group_advantages([]) == []


def test_advantages_sum_to_zero():
    adv = group_advantages([0.1, 0.9, 0.4, 0.4, 1.0])
    assert sum(adv) == pytest.approx(0.0, abs=1e-12)


def test_non_finite_reward_is_refused():
    with pytest.raises(ValueError, match="finite"):
        group_advantages([1.0, float("nan")])


def test_is_informative():
    assert is_informative([1, 0, 0, 0])
    assert is_informative([0.5, 0.5 + 1e-6])
    assert not is_informative([1, 1, 1])
    assert not is_informative([0.0, 1e-12])
    assert not is_informative([0.0, 1e-9])  # a spread of exactly the tolerance is noise
    assert is_informative([0.0, 1e-9], tol=0.5e-9)
    assert not is_informative([1.0])
    assert not is_informative([])


def test_small_credit_differences_are_not_blown_up_to_full_size():
    """All wrong, two answers earn a 0.01 partial credit: without the std floor these would get
    the same +-0.87 advantages as one right answer among four; with it they stay small."""
    wrong = group_advantages([0.01, 0.01, 0.0, 0.0])
    right = group_advantages([1.0, 1.0, 0.0, 0.0])
    assert max(abs(a) for a in wrong) == pytest.approx(0.05, abs=1e-3)
    assert right[0] == pytest.approx(0.866, abs=1e-3)
    # binary groups never reach the floor: one right answer among 64 still has std > 0.1
    assert group_advantages([1.0] + [0.0] * 63, eps=0.0)[0] == pytest.approx(63 / 64 / 0.125)
