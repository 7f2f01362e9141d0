"""`--backend auto`'s order, as the README states it: MLX on Apple Silicon when it is installed,
else torch on CUDA, then MPS, then CPU; and an explicit choice that cannot be met is a clear error.
The machine is simulated (platform, installed MLX, torch's CUDA and MPS flags)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

import sapo_edge.backends as backends

torch = pytest.importorskip("torch")


@pytest.fixture
def machine(monkeypatch):
    """set(apple=..., mlx=..., cuda=..., mps=...) makes this process look like that machine."""

    def set_(*, apple: bool, mlx: bool, cuda: bool, mps: bool) -> None:
        monkeypatch.setattr(backends.sys, "platform", "darwin" if apple else "linux")
        monkeypatch.setattr(backends.platform, "machine", lambda: "arm64" if apple else "x86_64")
        real_find = importlib.util.find_spec
        monkeypatch.setattr(
            backends.importlib.util,
            "find_spec",
            lambda name, *a: (object() if mlx else None) if name == "mlx" else real_find(name, *a),
        )
        if mlx and "mlx.core" not in sys.modules:
            pytest.importorskip("mlx.core")
        if mlx:
            monkeypatch.setattr(sys.modules["mlx.core"].metal, "is_available", lambda: apple)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda _i=0: "Test GPU")
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)

    return set_


@pytest.mark.parametrize(
    ("apple", "mlx", "cuda", "mps", "want"),
    [
        (True, True, False, True, ("mlx", "gpu")),  # Apple Silicon with MLX: MLX on the GPU
        (True, False, False, True, ("torch", "mps")),  # without MLX: torch on the Apple GPU
        (False, True, True, False, ("torch", "cuda:0")),  # MLX on Linux is never auto's pick
        (False, False, True, False, ("torch", "cuda:0")),
        (False, True, False, False, ("torch", "cpu")),
        (True, False, False, False, ("torch", "cpu")),
    ],
)
def test_auto_picks_mlx_on_apple_silicon_then_cuda_then_mps_then_cpu(
    machine, apple, mlx, cuda, mps, want
):
    machine(apple=apple, mlx=mlx, cuda=cuda, mps=mps)
    said: list[str] = []
    assert backends.select_backend("auto", log=said.append) == want
    assert len(said) == 1 and said[0].startswith(f"backend: {want[0]} on ")
    assert "chosen because" in said[0] or "no CUDA or Apple GPU" in said[0] or want[1] == "mps"


def test_explicit_choices_override_auto_and_unmet_ones_say_what_to_do(machine):
    machine(apple=False, mlx=False, cuda=True, mps=False)
    assert backends.select_backend("cpu", log=lambda _m: None) == ("torch", "cpu")
    assert backends.select_backend("torch", log=lambda _m: None) == ("torch", "cuda:0")
    with pytest.raises(ValueError, match="pip install 'sapo-edge\\[mlx\\]'"):
        backends.select_backend("mlx", log=lambda _m: None)
    with pytest.raises(ValueError, match="use --backend cpu"):
        backends.select_backend("mps", log=lambda _m: None)
    machine(apple=False, mlx=False, cuda=False, mps=False)
    with pytest.raises(ValueError, match="no CUDA GPU"):
        backends.select_backend("cuda", log=lambda _m: None)
