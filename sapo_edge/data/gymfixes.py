"""Fixes to reasoning-gym generators that can stop a laptop's run (installed with the registry,
tasks._registry). Every node of a swarm runs the same sapo-edge, so every node builds the same
question from a TaskRef with them.

basic_arithmetic's `find_common_divisors(a, b)` lists the divisors of gcd(a, b) by trying every
i up to its square root; with b = 0 (a division whose divisor it picks from the dividend) the gcd
is the dividend, a product of up to six 4-digit numbers with the default config: up to 10^12
tries, minutes to hours of a pure-Python loop that no stop check reaches. 7 items in 100,000
took over 2 s (the namespace LAN test's node that stopped training and never answered SIGTERM).
Here the search stops at i = DIVISOR_SEARCH: the same list as reasoning-gym's whenever the gcd
is below DIVISOR_SEARCH squared, 9 * 10^12 (every question it built in under about 0.3 s here),
and the divisors up to DIVISOR_SEARCH (with their cofactors) past it.
"""

from __future__ import annotations

import math

DIVISOR_SEARCH = 3_000_000  # 9 * 10^12 for the gcd: reasoning-gym's own answer below it


def find_common_divisors(a: int, b: int) -> list[int]:
    """reasoning-gym's find_common_divisors with its search bounded (see the module docstring)."""
    g = math.gcd(a, b)
    divisors = []
    i = 1
    while i * i <= g and i <= DIVISOR_SEARCH:
        if g % i == 0:
            divisors.append(i)
            if i * i != g:
                divisors.append(g // i)
        i += 1
    return divisors


def install() -> None:
    from reasoning_gym.arithmetic import basic_arithmetic

    basic_arithmetic.find_common_divisors = find_common_divisors
