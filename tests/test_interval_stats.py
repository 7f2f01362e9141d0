"""experiments/stats.py's intervals of proportions (issue 56): the exact binomial interval of one
cell, and the interval over seeds that cannot leave [0, 1], against values from tables."""

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "experiments"))

from stats import counts_of, exact_binomial, proportion_interval  # noqa: E402


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [
        (0, 10, 0.0, 0.3085),  # 1 - 0.025 ** (1 / 10)
        (5, 10, 0.1871, 0.8129),
        (3, 100, 0.0062, 0.0852),
        (10, 10, 0.6915, 1.0),
        (0, 2502, 0.0, 0.00147),  # issue 56: the aha 8/0 cells' 0 of 2,502
    ],
)
def test_the_exact_binomial_interval_matches_the_tables(k, n, low, high):
    got = exact_binomial(k, n)
    assert got == (pytest.approx(low, abs=1e-4), pytest.approx(high, abs=1e-4))


def test_seeds_that_all_scored_zero_get_the_exact_upper_bound_not_a_point():
    p = proportion_interval([(0, 834)] * 3)
    assert p.mean == 0.0 and p.low == 0.0
    assert p.high == pytest.approx(1 - 0.025 ** (1 / 2502))  # not the zero-width [0, 0]


def test_the_interval_over_seeds_never_leaves_0_1_and_follows_their_spread():
    apart = proportion_interval([(2, 100), (98, 100)])  # a t-interval gave [-5.7, 6.7] here
    assert 0.0 <= apart.low < 0.02 and 0.98 < apart.high <= 1.0
    small = proportion_interval([(2, 278), (33, 278), (4, 278)])  # the hinted node under 4/4
    assert 0.0 < small.low < small.mean < small.high < 1.0
    # 463, 514, 419 of 834: logits 0.221, 0.473, 0.008, sd 0.233, half 4.303 * 0.233 / sqrt(3)
    mid = proportion_interval([(463, 834), (514, 834), (419, 834)])
    centre = sum(math.log((k + 0.5) / (834 - k + 0.5)) for k in (463, 514, 419)) / 3
    assert mid.mean == pytest.approx(0.558, abs=5e-4)
    assert (mid.low, mid.high) == (pytest.approx(0.415, abs=5e-4), pytest.approx(0.692, abs=5e-4))
    assert mid.low < 1 / (1 + math.exp(-centre)) < mid.high


def test_one_seed_partial_credit_and_bad_counts():
    one = proportion_interval([(3, 10)])
    assert one.low is None and one.pooled == exact_binomial(3, 10)
    assert one.text() == "0.300 (one seed: no interval)"
    partial = proportion_interval([(2.5, 10), (4.5, 10)])  # lenient half credits: no exact one
    assert partial.pooled is None and 0 < partial.low < partial.high < 1
    with pytest.raises(ValueError, match="0 <= k <= n"):
        proportion_interval([(11, 10)])
    with pytest.raises(ValueError, match="not a count"):
        counts_of([1.0, 0.5])
    assert counts_of([1.0, 0.0, 1.0]) == (2, 3)
