"""The few statistics the evidence report needs, in plain Python (no scipy on the laptops).

- t_critical(df): two-sided 95% Student t quantile from a table (df 1-30, 40, 60, 120, inf);
  between rows the next smaller df is used, which makes an interval a little wider, never
  narrower.
- interval(xs): mean and 95% t-interval of independent values (e.g. one per seed).
- paired(a, b): the per-seed differences a - b and their interval.
- samples_for_se(target): completions needed so that the standard error of a mean of rewards
  in [0, 1] is below target whatever their spread (the variance of a [0, 1] value is <= 1/4).
- exact_binomial(k, n): the exact (Clopper-Pearson) 95% interval of k successes in n: one
  cell's pass@1 when every completion scores 0 or 1 (strict scoring).
- proportion_interval(counts): the mean over seeds of their proportions k/n, with a 95%
  interval that stays inside [0, 1] (the seeds' spread on the logit scale, never narrower than
  the exact interval of their answers pooled: seeds that all scored 0 get its upper bound).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

# two-sided 95% (the 0.975 quantile), from standard tables
T_975 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    11: 2.201,
    12: 2.179,
    13: 2.160,
    14: 2.145,
    15: 2.131,
    16: 2.120,
    17: 2.110,
    18: 2.101,
    19: 2.093,
    20: 2.086,
    21: 2.080,
    22: 2.074,
    23: 2.069,
    24: 2.064,
    25: 2.060,
    26: 2.056,
    27: 2.052,
    28: 2.048,
    29: 2.045,
    30: 2.042,
    40: 2.021,
    60: 2.000,
    120: 1.980,
}
Z_975 = 1.960  # df = infinity
MAX_REWARD_VARIANCE = 0.25  # a value in [0, 1] has variance at most 1/4 (half at 0, half at 1)


def t_critical(df: int) -> float:
    if df < 1:
        raise ValueError(f"df is {df}: a t-interval needs at least 2 values (df >= 1).")
    if df > max(T_975):
        return Z_975 if df > 1000 else T_975[120]
    return T_975[max(k for k in T_975 if k <= df)]


@dataclass
class Interval:
    n: int
    mean: float
    sd: float | None  # sample standard deviation (n - 1); None for one value
    low: float | None  # 95% t-interval; None for one value
    high: float | None

    @property
    def half_width(self) -> float | None:
        return None if self.high is None else (self.high - self.low) / 2

    def excludes(self, x: float) -> bool:
        return self.low is not None and not self.low <= x <= self.high

    def text(self, digits: int = 2) -> str:
        if self.low is None:
            return f"{self.mean:.{digits}f} (one seed: no interval)"
        return f"{self.mean:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def interval(xs: list[float]) -> Interval:
    """Mean and 95% t-interval of independent values."""
    if not xs:
        raise ValueError("no values: an interval needs at least one.")
    mean = statistics.fmean(xs)
    if len(xs) < 2:
        return Interval(len(xs), mean, None, None, None)
    sd = statistics.stdev(xs)
    half = t_critical(len(xs) - 1) * sd / math.sqrt(len(xs))
    return Interval(len(xs), mean, sd, mean - half, mean + half)


def paired(a: dict, b: dict) -> tuple[dict, Interval | None]:
    """Per-key differences a[k] - b[k] over the keys (seeds) both have, and their interval."""
    keys = sorted(set(a) & set(b))
    diffs = {k: a[k] - b[k] for k in keys}
    return diffs, (interval(list(diffs.values())) if diffs else None)


def standard_error(xs: list[float]) -> float:
    """Standard error of the mean of independent values (sample sd / sqrt(n))."""
    if len(xs) < 2:
        raise ValueError("a standard error needs at least 2 values.")
    return statistics.stdev(xs) / math.sqrt(len(xs))


def samples_for_se(target: float, variance: float = MAX_REWARD_VARIANCE) -> int:
    """Smallest n with sqrt(variance / n) < target."""
    if not 0 < target:
        raise ValueError(f"target standard error is {target}: use a positive number.")
    n = math.ceil(variance / target**2)
    return n + 1 if math.sqrt(variance / n) >= target else n


def _binomial_tail_le(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed in logs (stable for n in the thousands)."""
    if p <= 0:
        return 1.0
    if p >= 1:
        return 1.0 if k >= n else 0.0
    lp, lq = math.log(p), math.log1p(-p)
    terms = [
        math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq
        for i in range(k + 1)
    ]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def _solve(f, target: float) -> float:
    """The p in [0, 1] where the decreasing function f crosses target (bisection, 1e-12)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) > target else (lo, mid)
    return (lo + hi) / 2


def exact_binomial(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """The Clopper-Pearson interval of k successes in n trials: every p whose two-sided test at
    level alpha would not reject k. 0 of n gives [0, 1 - (alpha/2)**(1/n)]."""
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"{k} successes in {n} trials: need 0 <= k <= n and n >= 1.")
    # low: P(X >= k) = alpha/2, that is P(X <= k - 1) = 1 - alpha/2 (falling in p, as _solve needs)
    low = 0.0 if k == 0 else _solve(lambda p: _binomial_tail_le(k - 1, n, p), 1 - alpha / 2)
    high = 1.0 if k == n else _solve(lambda p: _binomial_tail_le(k, n, p), alpha / 2)
    return low, high


@dataclass
class Proportions:
    """Over seeds: each seed's k of n, the mean of their proportions and a 95% interval."""

    counts: list[tuple[int, int]]
    mean: float
    low: float | None  # None for one seed
    high: float | None
    pooled: tuple[float, float] | None  # the exact interval of all seeds' answers pooled (None:
    # partial credit, a sum of scores that is no count)

    @property
    def n(self) -> int:
        return len(self.counts)

    @property
    def successes(self) -> int:
        return sum(k for k, _ in self.counts)

    @property
    def trials(self) -> int:
        return sum(n for _, n in self.counts)

    def text(self, digits: int = 3) -> str:
        if self.low is None:
            return f"{self.mean:.{digits}f} (one seed: no interval)"
        return f"{self.mean:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def _logit(k: int, n: int) -> float:
    return math.log((k + 0.5) / (n - k + 0.5))  # the empirical logit: finite at 0 and n


def proportion_interval(counts: list[tuple[float, int]]) -> Proportions:
    """The mean of the seeds' proportions and a 95% interval inside [0, 1]: the envelope of (a)
    a t-interval over seeds of their empirical logits log((k + 1/2) / (n - k + 1/2)), mapped
    back (the seeds' spread), and (b) the exact binomial interval of all seeds' answers pooled
    (what sampling alone leaves open: seeds that agree exactly, three zeros, get the exact
    upper bound instead of a zero-width interval). One seed gives no interval; its exact one is
    in `pooled`. k may be a sum of scores in [0, 1] (partial credit): (b) is then left out."""
    if not counts:
        raise ValueError("no seeds: an interval needs at least one.")
    if any(not 0 <= k <= n or n < 1 for k, n in counts):
        raise ValueError(f"counts {counts}: each seed needs 0 <= k <= n and n >= 1.")
    mean = statistics.fmean(k / n for k, n in counts)
    k_all, n_all = sum(k for k, _ in counts), sum(n for _, n in counts)
    whole = all(float(k).is_integer() and float(n).is_integer() for k, n in counts)
    pooled = exact_binomial(int(k_all), int(n_all)) if whole else None
    if len(counts) < 2:
        return Proportions(counts, mean, None, None, pooled)
    logits = [_logit(k, n) for k, n in counts]
    half = t_critical(len(counts) - 1) * statistics.stdev(logits) / math.sqrt(len(counts))
    centre = statistics.fmean(logits)
    low, high = _expit(centre - half), _expit(centre + half)
    if pooled is not None:
        low, high = min(low, pooled[0]), max(high, pooled[1])
    return Proportions(counts, mean, low, high, pooled)


def _expit(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def counts_of(scores: list[float]) -> tuple[int, int]:
    """(right, completions) of strictly scored completions (each 0 or 1)."""
    if any(s not in (0, 1) for s in scores):
        raise ValueError("scores other than 0 and 1: not a count of right answers.")
    return int(sum(scores)), len(scores)
