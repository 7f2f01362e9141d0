"""This machine's measured speed (`Rates` per dtype) and what its rounds taught (`Correction` per
model and dtype), kept in pace.json in the cache folder (`PaceCache`). Below both `pace.py`,
which estimates from them, and `backends/rates.py`, which measures them."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..data import paths
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
    """Measured over estimated seconds for one model in one dtype on this machine, per phase;
    `source` says whose rounds it comes from ("" when none ran: 1.0)."""

    gen: float = 1.0
    train: float = 1.0
    measured: bool = False  # from rounds run here (this model's and dtype's or borrowed)
    source: str = ""

    @property
    def own(self) -> bool:
        """From rounds of this very model in this very dtype."""
        return self.source == OWN


OWN = "measured here"


def rates_key(dtype: str, threads: int) -> str:
    """Rates are kept per dtype and thread count (a run pinned to fewer reads other ones)."""
    return f"{dtype}/{threads} threads"


def correction_key(model: str, dtype: str) -> str:
    """pace.json's key for a model's correction in a dtype (a bare model id: an older file's,
    dtype unknown; it still teaches other models)."""
    return f"{MODEL_IDS.get(model, model)} in {dtype}"


@dataclass
class PaceCache:
    """pace.json in the cache folder: this machine's rates per dtype, and per model and dtype
    the ratio of measured to estimated round seconds (1.0 until a round ran)."""

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

    def correction(self, model: str, dtype: str = "float32") -> Correction:
        """The model's own correction in `dtype`; where that dtype never ran it, borrowed:
        1. the same model's in another dtype (what the model's overheads cost on this machine;
           the dtype's own speed is in its probed rates);
        2. the mean (geometric) of other models' in this dtype, then of all others', kept
           within TRANSFER: what makes an estimate miss is mostly the machine (its rates under
           the load it carries, its Python overheads), so one SmolLM2 round also tells whether
           Qwen would keep pace; but a small model's overheads weigh more than a larger one's,
           so what one model teaches another is bounded."""
        model = MODEL_IDS.get(model, model)
        own = self.corrections.get(correction_key(model, dtype))
        if own:
            return Correction(own.get("gen", 1.0), own.get("train", 1.0), True, OWN)
        mine = sorted(k for k, v in self.corrections.items() if v and k.startswith(f"{model} in "))
        if mine:
            other = mine[0].removeprefix(f"{model} in ")
            c = self.corrections[mine[0]]
            return Correction(
                c.get("gen", 1.0), c.get("train", 1.0), True, f"this model's {other} rounds"
            )
        same = [v for k, v in self.corrections.items() if v and k.endswith(f" in {dtype}")]
        known = same or [c for c in self.corrections.values() if c]
        if not known:
            return Correction()

        def mean(phase: str) -> float:
            vals = [c.get(phase, 1.0) for c in known]
            return min(max(math.prod(vals) ** (1 / len(vals)), TRANSFER[0]), TRANSFER[1])

        whose = f"other models' {dtype} rounds" if same else "other models' rounds"
        return Correction(mean("gen"), mean("train"), True, whose)

    def learn(
        self, model: str, dtype: str, phase: str, measured_s: float, uncorrected_s: float
    ) -> float:
        """Fold one measured phase into the model's correction in `dtype`: the first round sets
        it, later ones move it halfway (geometric), so one odd round does not swing it; returns
        it."""
        mine = self.corrections.setdefault(correction_key(model, dtype), {})
        if measured_s > 0 and uncorrected_s > 0:
            ratio = min(max(measured_s / uncorrected_s, 0.05), 20.0)
            old = mine.get(phase)
            mine[phase] = ratio if old is None else (old * ratio) ** 0.5
            self.save()
        return mine.get(phase, 1.0)
