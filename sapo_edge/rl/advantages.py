"""Group-relative advantages (GRPO) and the zero-advantage filter; pure Python, backend-free."""

from __future__ import annotations

import math
from collections.abc import Sequence

# The smallest std advantages are divided by. Binary rewards never reach it (a group of up to 100
# completions with one right answer has std >= 0.1); it stops std scaling from blowing small
# reward differences up to full size: with partial_credit, all-wrong groups whose answers earn
# small different credits (several reasoning-gym tasks give 0.01 for a wrong answer in the right
# form) or nothing, or a group that differs only in a 0.1 format bonus, would otherwise get the
# same +-1.5 advantages as a group with a right answer.
MIN_STD = 0.1


def group_advantages(
    rewards: Sequence[float], scale: bool = True, eps: float = 1e-4, min_std: float = MIN_STD
) -> list[float]:
    """Advantage of each completion relative to its group: r_i - mean(r).

    GRPO (DeepSeekMath, arXiv 2402.03300) divides by (std + eps), with std the unbiased sample
    std (ddof=1) as in TRL; here by (max(std, min_std) + eps), see MIN_STD. scale=False is
    Dr. GRPO (arXiv 2503.20783), which drops the division because it over-weights groups whose
    rewards barely differ. A group of one has advantage 0.
    """
    rs = [float(r) for r in rewards]
    if not all(math.isfinite(r) for r in rs):
        raise ValueError(f"rewards must be finite numbers, got {rs}; check the verifier's output.")
    if len(rs) < 2:
        return [0.0] * len(rs)
    mean = sum(rs) / len(rs)
    centered = [r - mean for r in rs]
    if not scale:
        return centered
    std = math.sqrt(sum(c * c for c in centered) / (len(rs) - 1))
    return [c / (max(std, min_std) + eps) for c in centered]


def is_informative(rewards: Sequence[float], tol: float = 1e-9) -> bool:
    """False when every completion scored alike: zero advantage, no learning signal.

    SAPO (arXiv 2509.08721) drops such groups before sampling.
    """
    return len(rewards) >= 2 and max(rewards) - min(rewards) > tol
