"""`--dtype auto` on a CPU with bfloat16 arithmetic of its own: the dtype whose round of this model
is measured (or, where it never ran, estimated) faster on this machine, from pace.json's rates and
corrections per dtype; before any round ran here, a GEMM probe decides. Pure: backends/rates.py
measures what it needs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..config.settings import Config
from .fit import KNOWN
from .pace import estimate, fmt_seconds, known_model
from .pace_cache import Correction, PaceCache, Rates

DTYPES = ("float32", "bfloat16")
# bfloat16's GEMMs must beat float32's by this much for the probe to pick it: its rounding costs
# something, and a round has more than GEMMs (casts, attention, sampling)
MIN_SPEEDUP = 1.2
# bfloat16's round must be this much faster than float32's: within it, two rounds of one dtype
# differ as much (8-11 s for SmolLM2's float32 round on one machine) and float32 rounds less
ROUND_MARGIN = 1.1


@dataclass(frozen=True)
class DtypeChoice:
    dtype: str  # "float32" | "bfloat16"
    why: str  # one line: the dtype, what it compared and where the figures came from


def choose_dtype(
    model: str | None,
    cfg: Config,
    rates: dict[str, Rates],
    cache: PaceCache | None,
    speedup: Callable[[], float],
) -> DtypeChoice:
    """The dtype whose round of `cfg` on `model` is faster here, by ROUND_MARGIN for bfloat16:
    each dtype's round is estimated from its probed `rates` and corrected by its rounds of this
    model (`measured here`); a dtype that never ran this model borrows the correction of the
    one that did, or of other models (PaceCache.correction says which). Where no round ran on
    this machine at all (or the model has no known shape), `speedup()`, the GEMM probe's
    bfloat16 over float32, decides against MIN_SPEEDUP. A dtype the choice leaves unmeasured is
    measured by one run with `--dtype` set to it; a dtype estimated faster is the one chosen,
    so its first rounds measure it and the next start compares two measurements."""
    name = known_model(model) if model else ""
    shape = KNOWN.get(name)
    corr = {d: cache.correction(name, d) for d in DTYPES} if cache and shape else {}
    if not any(c.measured for c in corr.values()):
        ratio = speedup()
        dtype = "bfloat16" if ratio >= MIN_SPEEDUP else "float32"
        why = "no round ran on this machine yet" if shape else f"no round estimate for {model}"
        return DtypeChoice(
            dtype,
            f"{dtype}: {why}, so the GEMM probe decides: bfloat16 at {ratio:.2f}x float32's "
            f"rate here (it needs {MIN_SPEEDUP}x)",
        )
    est = {d: estimate(shape, cfg, rates[d], corr[d]).round_s for d in DTYPES}
    dtype = "bfloat16" if est["bfloat16"] * ROUND_MARGIN <= est["float32"] else "float32"
    other = "float32" if dtype == "bfloat16" else "bfloat16"
    why = (
        f"{dtype}: a round of {name} ~{_secs(est[dtype])} in {dtype} ({_whence(corr[dtype])}) "
        f"against ~{_secs(est[other])} in {other} ({_whence(corr[other])})"
    )
    if dtype == "float32" and est["bfloat16"] < est["float32"]:
        why += f"; bfloat16 must be {ROUND_MARGIN}x faster"
    if not corr[other].own:
        why += f"; one run with --dtype {other} measures it"
    return DtypeChoice(dtype, why)


def _whence(c: Correction) -> str:
    return c.source if c.own else f"estimated from its probed rates and {c.source}"


def _secs(s: float) -> str:
    return f"{s:.1f} s" if s < 10 else fmt_seconds(s)
