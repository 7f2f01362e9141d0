"""The few statistics the evidence report needs, in plain Python (no scipy on the laptops).

- t_critical(df): two-sided 95% Student t quantile from a table (df 1-30, 40, 60, 120, inf);
  between rows the next smaller df is used, which makes an interval a little wider, never
  narrower.
- interval(xs): mean and 95% t-interval of independent values (e.g. one per seed).
- paired(a, b): the per-seed differences a - b and their interval.
- samples_for_se(target): completions needed so that the standard error of a mean of rewards
  in [0, 1] is below target whatever their spread (the variance of a [0, 1] value is <= 1/4).
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
