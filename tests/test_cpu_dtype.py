"""--dtype auto on a CPU before any round ran here (rates.cpu_dtype_choice falls back to
cpu_dtype.py's GEMM probe): the choice with the probe injected, its per-machine cache, and a
bfloat16 train step that stays close to float32's. The choice by rounds: test_dtype_auto.py."""

import json

import pytest

torch = pytest.importorskip("torch")

from sapo_edge.backends import cpu_dtype, rates  # noqa: E402
from sapo_edge.backends.base import Sample  # noqa: E402
from sapo_edge.backends.torch_backend import TorchBackend  # noqa: E402
from sapo_edge.config.settings import Config  # noqa: E402


@pytest.fixture(autouse=True)
def _unpinned(monkeypatch):
    monkeypatch.delenv("SAPO_EDGE_CPU_DTYPE", raising=False)


def _choose(tmp_path, native=True, speedup=1.7, calls=None):
    def probe():
        if calls is not None:
            calls.append(1)
        return speedup

    choice = rates.cpu_dtype_choice(
        "smollm2-135m",
        None,
        lambda m: None,
        native=lambda: native,
        probe=probe,
        probe_cache=tmp_path / "probe.json",
    )
    return getattr(torch, choice.dtype)


def test_bfloat16_only_where_native_and_measured_faster(tmp_path):
    calls = []
    assert _choose(tmp_path / "a", native=False, calls=calls) is torch.float32
    assert calls == []  # no native bf16: not even probed
    assert _choose(tmp_path / "b", speedup=1.7) is torch.bfloat16
    assert _choose(tmp_path / "c", speedup=1.05) is torch.float32  # native but not faster


def test_the_probe_runs_once_per_machine_and_a_bad_cache_probes_again(tmp_path):
    calls = []
    assert _choose(tmp_path, speedup=1.7, calls=calls) is torch.bfloat16
    assert _choose(tmp_path, speedup=0.5, calls=calls) is torch.bfloat16  # cached: not probed
    assert len(calls) == 1
    saved = json.loads((tmp_path / "probe.json").read_text())
    assert saved["bf16_speedup"] == 1.7 and "torch" in saved["machine"]
    (tmp_path / "probe.json").write_text(json.dumps({**saved, "machine": "another CPU"}))
    assert _choose(tmp_path, speedup=0.5, calls=calls) is torch.float32  # another machine's
    (tmp_path / "probe.json").write_text("{not json")
    assert _choose(tmp_path, speedup=1.9, calls=calls) is torch.bfloat16
    assert len(calls) == 3


def test_the_environment_pins_the_choice(tmp_path, monkeypatch):
    monkeypatch.setenv("SAPO_EDGE_CPU_DTYPE", "float32")
    assert _choose(tmp_path, speedup=9.0) is torch.float32
    monkeypatch.setenv("SAPO_EDGE_CPU_DTYPE", "bfloat16")
    assert _choose(tmp_path, native=False) is torch.bfloat16


def test_the_real_probe_measures_a_positive_ratio():
    assert cpu_dtype.gemm_speedup(seconds=0.1) > 0


MSGS = [{"role": "user", "content": "Calculate 2 + 3."}]


def test_a_bfloat16_step_stays_close_to_float32_with_float32_lora_and_optimizer(tiny_qwen):
    runs = {}
    for dtype in ("float32", "bfloat16"):
        cfg = Config(
            model=str(tiny_qwen), dtype=dtype, max_new_tokens=16, lora_r=4, learning_rate=1e-3
        )
        b = TorchBackend(tiny_qwen, cfg, adapter=f"dt_{dtype}", device="cpu", log=lambda m: None)
        b.reset(7)
        init = [p.detach().clone() for p in b.params]
        samples = [
            Sample(MSGS, b.encode_completion(t, finished=True, max_new_tokens=16), a)
            for t, a in (("<answer>5</answer>", 1.0), ("the answer is 7", -1.0))
        ]
        before = b.logprobs(samples)
        stats = b.train_step(samples)
        after = [p.detach() - w for p, w in zip(b.params, init, strict=True)]  # the update
        assert all(p.dtype == torch.float32 for p in b.params)  # LoRA master weights
        state = [s for s in b.optimizer.state.values()]
        assert state and all(s["exp_avg"].dtype == torch.float32 for s in state)
        runs[dtype] = (before, stats, after, b.dtype)
        b.close()
    assert runs["bfloat16"][3] == "bfloat16"
    (lp32, st32, w32, _), (lp16, st16, w16, _) = runs["float32"], runs["bfloat16"]
    for a, b in zip(lp32, lp16, strict=True):
        assert a == pytest.approx(b, abs=0.05)  # bf16 keeps ~3 significant digits
    assert st16.loss == pytest.approx(st32.loss, abs=1e-3)
    u32 = torch.cat([w.flatten() for w in w32])
    u16 = torch.cat([w.flatten() for w in w16])
    assert u32.abs().max() > 0  # the step moved the weights
    assert torch.nn.functional.cosine_similarity(u32, u16, dim=0) > 0.99
