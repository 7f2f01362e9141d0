"""--dtype auto by rounds (dtype_pace.py, rates.cpu_dtype_choice): from hand-made pace caches,
the dtype whose round of this model was measured faster here (both measured), the measured one
against the other's estimate (one measured), the GEMM probe (none); corrections kept per dtype;
and the `doctor` line that says the choice and why."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from sapo_edge.config.settings import Config
from sapo_edge.machine import pace
from sapo_edge.machine.dtype_pace import ROUND_MARGIN, _secs, choose_dtype
from sapo_edge.machine.fit import KNOWN
from sapo_edge.machine.pace_cache import PaceCache, Rates, correction_key

SMOL = "smollm2-135m"
CFG = pace.CANDIDATES[4].config()  # SmolLM2 on one-digit addition
# an AVX512-BF16 CPU's probes: bfloat16 GEMMs 3x float32's, half the bytes to read
RATES = {
    "float32": Rates(gemm=15e9, bandwidth=6e9, bytes_per_param=4),
    "bfloat16": Rates(gemm=45e9, bandwidth=6e9, bytes_per_param=2),
}


def cache_with(path: Path, corrections: dict[str, dict[str, float]]) -> PaceCache:
    return PaceCache(path / "pace.json", "machine A", {}, corrections)


def no_probe() -> float:
    raise AssertionError("the GEMM probe ran although rounds were measured here")


def est(dtype: str, gen: float, train: float) -> float:
    corr = SimpleNamespace(gen=gen, train=train, measured=True)
    return pace.estimate(KNOWN[SMOL], CFG, RATES[dtype], corr).round_s


def test_both_measured_the_faster_round_wins_even_against_the_gemm_probe(tmp_path) -> None:
    # bfloat16's GEMMs are 3x float32's, but its rounds of this model ran 4x its estimate
    slow_bf16 = {f"{SMOL} in float32": {"gen": 1.0, "train": 1.0},
                 f"{SMOL} in bfloat16": {"gen": 4.0, "train": 4.0}}  # fmt: skip
    choice = choose_dtype(SMOL, CFG, RATES, cache_with(tmp_path, slow_bf16), no_probe)
    assert est("bfloat16", 4.0, 4.0) > est("float32", 1.0, 1.0)
    assert choice.dtype == "float32"
    assert choice.why.startswith(f"float32: a round of {SMOL} ~")
    assert choice.why.count("(measured here)") == 2 and "--dtype" not in choice.why
    # the same rates with bfloat16's rounds as near their estimate as float32's: bfloat16
    fast_bf16 = {**slow_bf16, f"{SMOL} in bfloat16": {"gen": 1.0, "train": 1.0}}
    choice = choose_dtype(SMOL, CFG, RATES, cache_with(tmp_path, fast_bf16), no_probe)
    assert choice.dtype == "bfloat16" and choice.why.count("(measured here)") == 2
    s16, s32 = _secs(est("bfloat16", 1.0, 1.0)), _secs(est("float32", 1.0, 1.0))
    assert f"~{s16} in bfloat16" in choice.why and f"~{s32} in float32" in choice.why


def test_a_near_tie_keeps_float32(tmp_path) -> None:
    """bfloat16 must be ROUND_MARGIN faster: within that, rounds of one dtype differ as much."""
    s32 = est("float32", 1.0, 1.0)
    f = s32 / (ROUND_MARGIN * 0.97) / est("bfloat16", 1.0, 1.0)  # bfloat16 ~7% faster
    tie = {f"{SMOL} in float32": {"gen": 1.0, "train": 1.0},
           f"{SMOL} in bfloat16": {"gen": f, "train": f}}  # fmt: skip
    choice = choose_dtype(SMOL, CFG, RATES, cache_with(tmp_path, tie), no_probe)
    assert est("bfloat16", f, f) < s32 and choice.dtype == "float32"
    assert f"bfloat16 must be {ROUND_MARGIN}x faster" in choice.why


def test_one_measured_the_other_is_estimated_from_its_rates_and_the_measured_correction(
    tmp_path,
) -> None:
    # float32 measured at 2x its estimate; bfloat16 never ran SmolLM2 here
    only32 = {f"{SMOL} in float32": {"gen": 2.0, "train": 2.0}}
    choice = choose_dtype(SMOL, CFG, RATES, cache_with(tmp_path, only32), no_probe)
    # estimated faster: chosen, so its first rounds measure it (the choice is revisited then)
    assert est("bfloat16", 2.0, 2.0) < est("float32", 2.0, 2.0) / ROUND_MARGIN
    assert choice.dtype == "bfloat16"
    assert "in bfloat16 (estimated from its probed rates and this model's float32 rounds)" in (
        choice.why
    )
    assert "in float32 (measured here)" in choice.why
    # bfloat16 measured, float32 estimated slower from the same correction: the line says how
    # to measure float32 too
    only16 = {f"{SMOL} in bfloat16": {"gen": 2.0, "train": 2.0}}
    choice = choose_dtype(SMOL, CFG, RATES, cache_with(tmp_path, only16), no_probe)
    assert choice.dtype == "bfloat16"
    assert "in float32 (estimated from its probed rates and this model's bfloat16 rounds)" in (
        choice.why
    )
    assert choice.why.endswith("; one run with --dtype float32 measures it")


def test_none_measured_the_gemm_probe_decides(tmp_path) -> None:
    for ratio, dtype in ((1.7, "bfloat16"), (1.05, "float32")):
        choice = choose_dtype(SMOL, CFG, RATES, cache_with(tmp_path, {}), lambda r=ratio: r)
        assert choice.dtype == dtype
        assert "no round ran on this machine yet, so the GEMM probe decides" in choice.why
        assert f"{ratio:.2f}x float32's rate" in choice.why
    # a model with no known shape has no round estimate: the probe, whatever was measured
    some = cache_with(tmp_path, {f"{SMOL} in float32": {"gen": 1.0, "train": 1.0}})
    choice = choose_dtype("/models/mine", CFG, RATES, some, lambda: 1.7)
    assert choice.dtype == "bfloat16" and "no round estimate for /models/mine" in choice.why


def test_corrections_are_kept_per_dtype_and_borrowed_in_order(tmp_path) -> None:
    cache = PaceCache.load("machine A", tmp_path / "pace.json")
    key = "bfloat16/2 threads"
    cache.rates[key] = {"gemm": 45e9, "bandwidth": 6e9, "bpp": 2}
    did = pace.gen_seconds(KNOWN[SMOL], CFG, RATES["bfloat16"], 14, 150)
    report = SimpleNamespace(
        gen_seconds=did * 3.0, gen_steps=14, gen_tokens=150, train_seconds=0.0,
        train_tokens=0, local_used=2, external_used=0,
    )  # fmt: skip
    pace.learn_from_round(CFG, "HuggingFaceTB/SmolLM2-135M-Instruct", report, cache, key)
    again = PaceCache.load("machine A", tmp_path / "pace.json")
    assert set(again.corrections) == {correction_key(SMOL, "bfloat16")}
    own = again.correction(SMOL, "bfloat16")
    assert own.own and own.gen == pytest.approx(3.0)
    # float32 never ran SmolLM2: borrowed from the same model's bfloat16 rounds
    borrowed = again.correction(SMOL, "float32")
    assert not borrowed.own and borrowed.source == "this model's bfloat16 rounds"
    assert borrowed.gen == pytest.approx(3.0)
    # another model: other models' rounds in the same dtype first, bounded
    again.corrections[correction_key(SMOL, "float32")] = {"gen": 1.5}
    other = again.correction(pace.QWEN, "float32")
    assert other.source == "other models' float32 rounds" and other.gen == pytest.approx(1.5)
    # an older pace.json's bare model key (dtype unknown) only teaches other models
    legacy = PaceCache(tmp_path / "p.json", "m", {}, {pace.QWEN: {"gen": 1.8, "train": 1.2}})
    assert not legacy.correction(pace.QWEN, "float32").own
    assert legacy.correction(pace.QWEN, "float32").source == "other models' rounds"


# --------------------------------------------------------- the torch side and `sapo-edge doctor`
@pytest.fixture
def measured_here(tmp_path, monkeypatch):
    """A hand-made pace.json in this test's cache folder: both dtypes' rates for the thread
    count a run starts with, and SmolLM2 measured in both (bfloat16's rounds 4x their estimate);
    the CPU says it has bfloat16, its GEMM probe says 3x: by the probe alone, bfloat16."""
    torch = pytest.importorskip("torch")
    from sapo_edge.backends import cpu_dtype, rates

    monkeypatch.setenv("SAPO_EDGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SAPO_EDGE_PACE_RATES")
    monkeypatch.delenv("SAPO_EDGE_CPU_DTYPE")
    monkeypatch.setattr(cpu_dtype, "has_native_bf16", lambda: True)
    monkeypatch.setattr(cpu_dtype, "gemm_speedup", lambda: 3.0)

    def no_measuring(_dtype):
        raise AssertionError("rates were measured although pace.json has them")

    monkeypatch.setattr(rates, "measure_rates", no_measuring)
    threads = rates.pace_threads()
    data = {
        "machine": cpu_dtype.machine_key(),
        "rates": {
            f"{d}/{threads} threads": {"gemm": r.gemm, "bandwidth": r.bandwidth,
                                       "bpp": r.bytes_per_param}
            for d, r in RATES.items()
        },  # fmt: skip
        "corrections": {f"{SMOL} in float32": {"gen": 1.0, "train": 1.0},
                        f"{SMOL} in bfloat16": {"gen": 4.0, "train": 4.0}},
    }  # fmt: skip
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "pace.json").write_text(json.dumps(data))
    return torch


def test_a_cpu_run_of_auto_takes_the_dtype_measured_faster(measured_here, monkeypatch) -> None:
    from sapo_edge.backends.torch_backend import resolve_dtype

    said: list[str] = []
    dtype = resolve_dtype("auto", "cpu", said.append, Config(model=SMOL))
    assert dtype is measured_here.float32
    assert said and said[0].startswith("dtype auto: float32: a round of smollm2-135m ~")
    # SAPO_EDGE_CPU_DTYPE still pins it
    monkeypatch.setenv("SAPO_EDGE_CPU_DTYPE", "bfloat16")
    pinned = resolve_dtype("auto", "cpu", said.append, Config(model=SMOL))
    assert pinned is measured_here.bfloat16


def test_doctor_says_the_dtype_and_the_two_rounds_it_compared(measured_here) -> None:
    from sapo_edge.machine.pace import Choice
    from sapo_edge.run import doctor

    choice = Choice(pace.CANDIDATES[4], None, "")
    line = doctor.check_dtype(Config(), [choice]).line(color=False)
    s32, s16 = _secs(est("float32", 1.0, 1.0)), _secs(est("bfloat16", 4.0, 4.0))
    assert line == (
        f"[ok  ] dtype      float32: a round of {SMOL} ~{s32} in float32 (measured here) "
        f"against ~{s16} in bfloat16 (measured here)"
    )
    pinned = doctor.check_dtype(Config(dtype="bfloat16"), [choice])
    assert pinned.text == "bfloat16 (--dtype bfloat16)"
