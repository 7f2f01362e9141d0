"""This machine's measured speed (`Rates`) and what its rounds taught (`Correction` per model),
kept in pace.json in the cache folder (`PaceCache`). Below both `pace.py`, which estimates from
them, and `backends/rates.py`, which measures them."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import paths
from .fit import SMALL_MODEL

PACE_FILE = "pace.json"
TRANSFER = (0.5, 2.0)  # a correction borrowed from other models is kept within this
# the model ids nodes report, for the aliases KNOWN is keyed by
MODEL_IDS = {"HuggingFaceTB/SmolLM2-135M-Instruct": SMALL_MODEL}


@dataclass(frozen=True)
class Rates:
    """This machine's measured speed in the dtype training will use."""

    gemm: float  # FLOP/s of a training-sized GEMM
    bandwidth: float  # bytes/s read from memory by a large reduction
    bytes_per_param: int  # 4 float32, 2 bfloat16/float16


@dataclass(frozen=True)
class Correction:
    """Measured over estimated seconds for one model on this machine, per phase."""

    gen: float = 1.0
    train: float = 1.0
    measured: bool = False


@dataclass
class PaceCache:
    """pace.json in the cache folder: this machine's rates per dtype, and per model the ratio
    of measured to estimated round seconds (1.0 until a round ran)."""

    path: Path
    machine: str
    rates: dict[str, dict] = field(default_factory=dict)
    corrections: dict[str, dict[str, float]] = field(default_factory=dict)

    @classmethod
    def load(cls, machine: str, path: Path | None = None) -> PaceCache:
        path = path or paths.cache_dir() / PACE_FILE
        try:
            data = json.loads(path.read_text())
            if isinstance(data, dict) and data.get("machine") == machine:
                rates = {str(k): dict(v) for k, v in data.get("rates", {}).items()}
                corr = {
                    str(k): {p: float(v[p]) for p in v if p in ("gen", "train")}
                    for k, v in data.get("corrections", {}).items()
                }
                if all(0.05 <= x <= 20 for v in corr.values() for x in v.values()):  # NaN fails
                    return cls(path, machine, rates, corr)
        except (OSError, ValueError, TypeError, AttributeError):
            pass  # none yet, another machine's or damaged: measure again
        return cls(path, machine)

    def save(self) -> None:
        data = {"machine": self.machine, "rates": self.rates, "corrections": self.corrections}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")  # processes may write at once
            tmp.write_text(json.dumps(data, indent=1) + "\n")
            tmp.replace(self.path)
        except OSError:
            pass  # an unwritable cache only costs a probe next time

    def rates_for(self, dtype: str, probe: Callable[[], Rates]) -> Rates:
        saved = self.rates_saved(dtype)
        if saved is not None:
            return saved
        r = probe()
        self.rates[dtype] = {"gemm": r.gemm, "bandwidth": r.bandwidth, "bpp": r.bytes_per_param}
        self.save()
        return r

    def rates_saved(self, dtype: str) -> Rates | None:
        """The rates measured for `dtype` (and this thread count: the key is the caller's),
        or None when absent or not finite positive numbers (a damaged file)."""
        saved = self.rates.get(dtype)
        try:
            r = Rates(float(saved["gemm"]), float(saved["bandwidth"]), int(saved["bpp"]))
        except (KeyError, TypeError, ValueError):
            return None
        ok = (
            all(math.isfinite(x) and x > 0 for x in (r.gemm, r.bandwidth)) and r.bytes_per_param > 0
        )
        return r if ok else None

    def correction(self, model: str) -> Correction:
        """The model's own correction; for a model never run here, the mean (geometric) of the
        others', kept within TRANSFER: what makes an estimate miss is mostly the machine (its
        rates under the load it carries, its Python overheads), so one SmolLM2 round also tells
        whether Qwen would keep pace; but a small model's overheads weigh more than a larger
        one's, so what one model teaches another is bounded."""
        own = self.corrections.get(MODEL_IDS.get(model, model))
        if own:
            return Correction(own.get("gen", 1.0), own.get("train", 1.0), measured=True)
        known = [c for c in self.corrections.values() if c]
        if not known:
            return Correction()

        def mean(phase: str) -> float:
            vals = [c.get(phase, 1.0) for c in known]
            return min(max(math.prod(vals) ** (1 / len(vals)), TRANSFER[0]), TRANSFER[1])

        return Correction(mean("gen"), mean("train"), measured=True)

    def learn(self, model: str, phase: str, measured_s: float, uncorrected_s: float) -> float:
        """Fold one measured phase into the model's correction: the first round sets it, later
        ones move it halfway (geometric), so one odd round does not swing it; returns it."""
        key = MODEL_IDS.get(model, model)
        mine = self.corrections.setdefault(key, {})
        if measured_s > 0 and uncorrected_s > 0:
            ratio = min(max(measured_s / uncorrected_s, 0.05), 20.0)
            old = mine.get(phase)
            mine[phase] = ratio if old is None else (old * ratio) ** 0.5
            self.save()
        return mine.get(phase, 1.0)
