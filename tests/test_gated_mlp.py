"""gated_mlp.py: down(silu(gate(x)) * up(x)) as one op keeping gate(x) and up(x) only, against
autograd running the modeling code's ops (with lora_fused's down projection, and peft's
op-by-op arithmetic), float64 gradcheck, what autograd keeps, and the train step."""

from __future__ import annotations

from contextlib import nullcontext

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from sapo_edge.backends import torch_loss  # noqa: E402
from sapo_edge.backends.base import Sample  # noqa: E402
from sapo_edge.backends.gated_mlp import GatedLoraDown, _gated_mlps, lean_gated_mlps  # noqa: E402
from sapo_edge.backends.lora_fused import lora_linear  # noqa: E402
from sapo_edge.backends.torch_backend import TorchBackend  # noqa: E402
from sapo_edge.backends.torch_decode import LeanLora  # noqa: E402
from sapo_edge.config.settings import Config  # noqa: E402


def _inputs(dtype, lora_dtype=None, *, bias=False, shape=(2, 5), inter=9, hidden=6, r=3, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def rand(*s, dt=dtype, grad=False):
        return torch.randn(*s, generator=gen, dtype=torch.float64).to(dt).requires_grad_(grad)

    g, u = rand(*shape, inter, grad=True), rand(*shape, inter, grad=True)
    w = rand(hidden, inter)
    b = rand(hidden) if bias else None
    lora = lora_dtype or dtype
    return g, u, w, b, rand(r, inter, dt=lora, grad=True), rand(hidden, r, dt=lora, grad=True)


def _modeling(g, u, w, b, a, lb, s):
    """The modeling code's MLP tail, run by autograd: SiLU, the product, lora_fused's layer."""
    return lora_linear(F.silu(g) * u, w, b, a, lb, s)


def _peft(g, u, w, b, a, lb, s):
    """The same with peft's LoRA arithmetic, op by op."""
    p = F.silu(g) * u
    return F.linear(p, w, b) + F.linear(F.linear(p, a), lb) * s


def _grads(fn, inputs, upstream):
    leaves = [
        v.detach().clone().requires_grad_(v.requires_grad) if v is not None else None
        for v in inputs
    ]
    out = fn(*leaves, 0.8)
    out.backward(upstream)
    return out.detach(), [leaves[k].grad for k in (0, 1, 4, 5)]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(4,), (2, 3)])
def test_gradients_pass_float64_gradcheck(bias, shape):
    g, u, w, b, a, lb = _inputs(torch.float64, bias=bias, shape=shape)
    assert torch.autograd.gradcheck(
        lambda g, u, a, lb: GatedLoraDown.apply(g, u, w, b, a, lb, 0.7), (g, u, a, lb)
    )


@pytest.mark.parametrize(
    ("dtype", "lora_dtype"),
    [(torch.float32, torch.float32), (torch.bfloat16, torch.float32), (torch.float64, None)],
)
@pytest.mark.parametrize("seed", range(3))
def test_the_same_numbers_as_the_modeling_code_run_by_autograd(dtype, lora_dtype, seed):
    """The same ops on the same inputs, so the same bits: output and the gradients of g, u,
    A and B, float32, a bfloat16 base under float32 LoRA, float64."""
    inputs = _inputs(dtype, lora_dtype, bias=bool(seed % 2), seed=seed, inter=40, hidden=24)
    upstream = torch.randn(2, 5, 24, generator=torch.Generator().manual_seed(seed)).to(dtype)
    got, got_grads = _grads(GatedLoraDown.apply, inputs, upstream)
    want, want_grads = _grads(_modeling, inputs, upstream)
    assert torch.equal(got, want)
    for a, b in zip(got_grads, want_grads, strict=True):
        assert a.dtype == b.dtype
        assert torch.equal(a, b)


@pytest.mark.parametrize("seed", range(4))
def test_it_matches_peft_arithmetic_to_rounding(seed):
    """Against an implementation that shares no code with it (float32, random sizes)."""
    gen = torch.Generator().manual_seed(50 + seed)
    inter, hidden, r, t = (int(v) for v in torch.randint(1, 48, (4,), generator=gen))
    inputs = _inputs(
        torch.float32, bias=bool(seed % 2), shape=(t,), inter=inter, hidden=hidden, r=r, seed=seed
    )
    upstream = torch.randn(t, hidden, generator=gen)
    got, got_grads = _grads(GatedLoraDown.apply, inputs, upstream)
    want, want_grads = _grads(_peft, inputs, upstream)

    def close(a, b):
        return (a - b).abs().max() <= 2e-5 * b.abs().max() + 1e-6

    assert close(got, want)
    assert all(close(a, b) for a, b in zip(got_grads, want_grads, strict=True))


def _saved_widths(fn, inputs, inter, tokens):
    """How many [tokens, intermediate] tensors autograd keeps for the backward."""
    storages = set()

    def pack(t):
        if t.shape[-1] == inter and t.numel() == tokens * inter:
            storages.add(t.untyped_storage().data_ptr())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*inputs, 0.5)
    return len(storages)


def test_it_keeps_two_intermediate_tensors_where_autograd_keeps_four():
    inputs = _inputs(torch.float32, inter=40, hidden=24)
    assert _saved_widths(_modeling, inputs, 40, 10) == 4  # gate(x), silu(gate(x)), up(x), product
    assert _saved_widths(GatedLoraDown.apply, inputs, 40, 10) == 2  # gate(x), up(x)


class _Mlp(torch.nn.Module):
    """Shaped like transformers' LlamaMLP / Qwen2MLP (the swap goes by class name)."""

    def __init__(self, act):
        super().__init__()
        self.gate_proj, self.up_proj = (
            torch.nn.Linear(6, 10, bias=False),
            torch.nn.Linear(6, 10, bias=False),
        )
        self.down_proj, self.act_fn = torch.nn.Linear(10, 6, bias=False), act

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def _model(act, name="Qwen2MLP", lean=True):
    cls = type(name, (_Mlp,), {})
    net = torch.nn.Sequential(cls(act))
    if lean:
        down = net[0].down_proj
        a = torch.nn.Parameter(torch.randn(2, 10))
        b = torch.nn.Parameter(torch.randn(6, 2))
        net[0].down_proj = LeanLora(down, a, b, 0.5)
    return net


@pytest.mark.parametrize(
    ("act", "name", "lean", "swapped"),
    [
        (torch.nn.SiLU(), "Qwen2MLP", True, 1),
        (torch.nn.SiLU(), "LlamaMLP", True, 1),
        (torch.nn.GELU(), "Qwen2MLP", True, 0),  # another activation
        (torch.nn.SiLU(), "GemmaMLP", True, 0),  # a class whose forward is not known
        (torch.nn.SiLU(), "Qwen2MLP", False, 0),  # down projection not a lean LoRA layer
    ],
)
def test_only_known_silu_mlps_with_a_lean_down_projection_are_swapped(act, name, lean, swapped):
    net = _model(act, name, lean)
    assert len(list(_gated_mlps(net, LeanLora))) == swapped
    before = net[0]
    with lean_gated_mlps(net, LeanLora):
        assert (type(net[0]).__name__ == "_LeanGatedMlp") == bool(swapped)
        x = torch.randn(3, 6, requires_grad=True)
        net(x).sum().backward()
    assert net[0] is before  # put back


def test_without_gradients_it_runs_the_modeling_ops():
    net = _model(torch.nn.SiLU())
    x = torch.randn(3, 6)
    want = net(x)
    with lean_gated_mlps(net, LeanLora), torch.no_grad():
        got = net(x)
    assert torch.equal(got, want.detach())


MSGS = [{"role": "user", "content": "Calculate 2 + 3."}]


def _step_grads(tiny_qwen, name, dtype, monkeypatch, gated: bool):
    calls = []
    apply = GatedLoraDown.apply
    monkeypatch.setattr(GatedLoraDown, "apply", lambda *a: calls.append(1) or apply(*a))
    if not gated:
        monkeypatch.setattr(torch_loss, "lean_gated_mlps", lambda *a, **k: nullcontext())
    cfg = Config(model=str(tiny_qwen), lora_r=4, dtype=dtype, max_grad_norm=0.0)
    b = TorchBackend(tiny_qwen, cfg, adapter=name, device="cpu", log=lambda m: None)
    b.reset(4)
    with torch.no_grad():  # B off zero, so that every gradient is exercised
        for p in b.params:
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(7)) * 0.05)
    samples = [
        Sample(MSGS, b.encode_completion(t, finished=True, max_new_tokens=16), adv)
        for t, adv in (("<answer>5</answer>", 1.0), ("it is 7", -1.0))
    ]
    seen = []
    b.optimizer.step = lambda: seen.extend(p.grad.clone() for p in b.params)
    b.train_step(samples)
    assert not [n for n, m in b.model.named_modules() if type(m).__name__ == "_LeanGatedMlp"]
    b.close()
    monkeypatch.undo()
    return len(calls), torch.cat([g.flatten() for g in seen])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_step_runs_it_with_the_same_gradients(tiny_qwen, monkeypatch, dtype):
    """Every MLP of the tiny Qwen runs as the one op in the step (2 layers x 3 passes: the
    shared prompt prefix and one completion row at a time), and the LoRA gradients are the modeling code's: the same
    numbers (the same ops), float32 and a bfloat16 base."""
    calls, got = _step_grads(tiny_qwen, f"gated_{dtype}", dtype, monkeypatch, gated=True)
    none, want = _step_grads(tiny_qwen, f"plain_{dtype}", dtype, monkeypatch, gated=False)
    assert calls == 2 * 3 and none == 0
    assert want.abs().sum() > 0
    assert (got - want).abs().max() <= 1e-6 * want.abs().max()


@pytest.mark.parametrize(
    ("module", "cls"),
    [
        ("llama", "LlamaMLP"),
        ("qwen2", "Qwen2MLP"),
        ("qwen3", "Qwen3MLP"),
        ("mistral", "MistralMLP"),
    ],
)
def test_the_swapped_classes_still_compute_what_the_op_does(module, cls):
    """The swap goes by class name: each class's forward in the installed transformers must
    still be down(act(gate(x)) * up(x)), or a new release changed what the op stands in for."""
    import importlib
    import inspect

    from sapo_edge.backends.gated_mlp import _GATED_MLPS

    assert cls in _GATED_MLPS
    mod = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
    body = "".join(inspect.getsource(getattr(mod, cls).forward).split())
    assert body == (
        "defforward(self,x):"
        "down_proj=self.down_proj(self.act_fn(self.gate_proj(x))*self.up_proj(x))"
        "returndown_proj"
    )


def test_every_swapped_class_is_checked_above():
    from sapo_edge.backends.gated_mlp import _GATED_MLPS

    assert {"LlamaMLP", "Qwen2MLP", "Qwen3MLP", "MistralMLP"} == _GATED_MLPS
