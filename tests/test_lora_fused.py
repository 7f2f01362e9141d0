"""lora_fused.py: W x + bias + s B (A x) as one autograd op, against float64 gradcheck and
against the plain ops peft's LoRA Linear runs (`_plain`); that the train step runs it, and not
where peft's own layer is needed."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from sapo_edge.backends.base import Sample  # noqa: E402
from sapo_edge.backends.lora_fused import LoraLinear, lora_linear  # noqa: E402
from sapo_edge.backends.torch_backend import TorchBackend  # noqa: E402
from sapo_edge.config.settings import Config  # noqa: E402


def _inputs(dtype, *, bias: bool, shape=(3, 5), seed=0, n_in=7, n_out=6, r=2):
    gen = torch.Generator().manual_seed(seed)

    def rand(*s, grad=False):
        return torch.randn(*s, generator=gen, dtype=dtype).requires_grad_(grad)

    x = rand(*shape, n_in, grad=True)
    w = rand(n_out, n_in)
    b = rand(n_out) if bias else None
    return x, w, b, rand(r, n_in, grad=True), rand(n_out, r, grad=True)


def _plain(x, w, b, a, lb, s):
    """The reference: peft's arithmetic, op by op."""
    return F.linear(x, w, b) + F.linear(F.linear(x, a), lb) * s


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(4,), (3, 5), (2, 3, 4)])
def test_gradients_pass_float64_gradcheck(bias, shape):
    x, w, b, a, lb = _inputs(torch.float64, bias=bias, shape=shape)
    assert torch.autograd.gradcheck(
        lambda x, a, lb: LoraLinear.apply(x, w, b, a, lb, 0.7), (x, a, lb)
    )


@pytest.mark.parametrize("seed", range(6))
def test_forward_and_gradients_match_peft_arithmetic(seed):
    """Random shapes, a random upstream gradient; float32 to rounding."""
    gen = torch.Generator().manual_seed(100 + seed)
    n_in, n_out, r, t = (int(v) for v in torch.randint(1, 40, (4,), generator=gen))
    bias, s = bool(seed % 2), float(torch.rand((), generator=gen)) * 4
    got_in = _inputs(torch.float32, bias=bias, shape=(2, t), seed=seed, n_in=n_in, n_out=n_out, r=r)
    ref_in = [
        v.detach().clone().requires_grad_(v.requires_grad) if v is not None else None
        for v in got_in
    ]
    got, ref = lora_linear(*got_in, s), _plain(*ref_in, s)

    def close(a, b):  # float32 rounding, at the scale of the values (sums of up to 40 terms)
        return (a - b).abs().max() <= 1e-5 * b.abs().max() + 1e-6

    assert close(got, ref)
    up = torch.randn(ref.shape, generator=gen)
    got.backward(up)
    ref.backward(up)
    for g, want in ((got_in[0], ref_in[0]), (got_in[3], ref_in[3]), (got_in[4], ref_in[4])):
        assert close(g.grad, want.grad)


def test_its_output_can_be_changed_in_place_as_modeling_code_does():
    """OLMo clamps q/k/v projections in place (clip_qkv): the output must be a plain tensor,
    not a view made inside the Function (autograd forbids in-place ops on those)."""
    x, w, b, a, lb = _inputs(torch.float32, bias=True, shape=(2, 3))
    ref_in = [v.detach().clone().requires_grad_(v.requires_grad) for v in (x, w, b, a, lb)]
    out = lora_linear(x, w, b, a, lb, 2.0)
    assert out.grad_fn.name() == "LoraLinearBackward"
    out.clamp_(-1.0, 1.0).mul_(3.0).sum().backward()
    _plain(*ref_in, 2.0).clamp(-1.0, 1.0).mul(3.0).sum().backward()
    for got, want in zip((x, a, lb), (ref_in[0], ref_in[3], ref_in[4]), strict=True):
        assert torch.allclose(got.grad, want.grad, atol=1e-5)


def _peft_mixed(x, w, b, a, lb, s):
    """peft's LoRA Linear in a bfloat16 model with float32 A and B: x cast to A's dtype for the
    LoRA term, the base result plus the float32 term, the sum cast back to x's dtype."""
    lora = F.linear(F.linear(x.to(a.dtype), a), lb) * s
    return (F.linear(x, w, b) + lora).to(x.dtype)


def _mixed_inputs(seed, base_dtype=torch.bfloat16):
    """Random shapes; x, W and the bias in base_dtype, A and B float32 (LoRA as peft keeps it);
    two copies, each with its own leaves."""
    gen = torch.Generator().manual_seed(200 + seed)
    n_in, n_out, t = (int(v) for v in torch.randint(1, 80, (3,), generator=gen))
    r = int(torch.randint(1, 17, (), generator=gen))
    bias, s = bool(seed % 2), float(torch.rand((), generator=gen)) * 4
    x, w, b, a, lb = _inputs(
        torch.float32, bias=bias, shape=(2, t), seed=seed, n_in=n_in, n_out=n_out, r=r
    )
    x, w = (x.detach().to(base_dtype) for x in (x, w))
    b = b.to(base_dtype) if b is not None else None
    copies = []
    for _ in range(2):
        copies.append(
            (
                x.clone().requires_grad_(),
                w,
                b,
                a.detach().clone().requires_grad_(),
                lb.detach().clone().requires_grad_(),
            )
        )
    return copies, s, gen


def _err(got, want):
    return float((got.double() - want.double()).abs().max())


@pytest.mark.parametrize("seed", range(8))
def test_a_bfloat16_base_with_float32_lora_is_one_op_matching_peft(seed):
    """The mix peft runs in a bfloat16 model (base bfloat16, A and B float32) is one op, and it
    gives peft's numbers: the output and x's gradient within bfloat16 rounding (a unit or two in
    the last place of the largest value), A's and B's gradients, float32 as before, to float32
    rounding; each no farther from a float64 computation of the same values than peft's."""
    (got_in, ref_in), s, gen = _mixed_inputs(seed)
    got, ref = lora_linear(*got_in, s), _peft_mixed(*ref_in, s)
    assert got.grad_fn.name() == "LoraLinearBackward"
    assert got.dtype == ref.dtype == torch.bfloat16
    up = torch.randn(ref.shape, generator=gen).to(torch.bfloat16)
    got.backward(up)
    ref.backward(up)
    exact = [v.detach().double().requires_grad_() if v is not None else None for v in ref_in]
    truth = _plain(*exact, s)
    truth.backward(up.double())
    bf16_ulp = 2.0**-7
    for mine, peft, true, tol in (
        (got, ref, truth, bf16_ulp),
        (got_in[0].grad, ref_in[0].grad, exact[0].grad, bf16_ulp),
        (got_in[3].grad, ref_in[3].grad, exact[3].grad, 1e-5),
        (got_in[4].grad, ref_in[4].grad, exact[4].grad, 1e-5),
    ):
        scale = float(true.detach().abs().max()) + 1e-6
        assert mine.dtype == peft.dtype
        assert _err(mine, peft) <= 2 * tol * scale
        assert _err(mine, true) <= 1.5 * _err(peft, true) + tol * scale * 0.5
    assert got_in[3].grad.dtype == got_in[4].grad.dtype == torch.float32


def test_the_mixed_op_is_the_same_arithmetic_in_float64():
    """The mixed path's formulas at full precision: a float32 base with float64 A and B runs the
    same code (casts, the float64 term added before the one rounding); its LoRA gradients, taken
    in float64, pass against a float64 computation of the whole layer."""
    (got_in, _), s, gen = _mixed_inputs(3, base_dtype=torch.float32)
    x, w, b, a, lb = got_in
    a64, b64 = (v.detach().double().requires_grad_() for v in (a, lb))
    out = lora_linear(x, w, b, a64, b64, s)
    assert out.grad_fn.name() == "LoraLinearBackward" and out.dtype == torch.float32
    up = torch.randn(out.shape, generator=gen)
    out.backward(up)
    ref_a, ref_b = (v.detach().clone().requires_grad_() for v in (a64, b64))
    x64 = x.detach().double().requires_grad_()
    _plain(x64, w.double(), b.double() if b is not None else None, ref_a, ref_b, s).backward(
        up.double()
    )
    assert torch.allclose(a64.grad, ref_a.grad, rtol=1e-6, atol=1e-6)
    assert torch.allclose(b64.grad, ref_b.grad, rtol=1e-6, atol=1e-6)
    assert torch.allclose(x.grad.double(), x64.grad, rtol=1e-5, atol=1e-5)


def test_the_mixed_output_can_be_changed_in_place():
    (got_in, ref_in), s, _ = _mixed_inputs(1)
    out = lora_linear(*got_in, s)
    assert out.grad_fn.name() == "LoraLinearBackward"
    out.clamp_(-1.0, 1.0).mul_(3.0).float().sum().backward()
    _peft_mixed(*ref_in, s).clamp(-1.0, 1.0).mul(3.0).float().sum().backward()
    for i in (0, 3, 4):
        want = ref_in[i].grad
        assert _err(got_in[i].grad, want) <= 2 * 2.0**-7 * (float(want.abs().max()) + 1e-6)


def test_a_trainable_base_or_no_gradients_take_peft_arithmetic():
    x, w, b, a, lb = _inputs(torch.float32, bias=True)
    w.requires_grad_(True)  # a trainable base: its gradient must not be dropped
    out = lora_linear(x, w, b, a, lb, 2.0)
    assert out.grad_fn.name() != "LoraLinearBackward"
    out.sum().backward()
    assert w.grad is not None and w.grad.abs().sum() > 0
    with torch.no_grad():  # sampling: peft's arithmetic, bfloat16 base and float32 LoRA
        xb, wb, bb = (v.detach().to(torch.bfloat16) for v in (x, w, b))
        out = lora_linear(xb, wb, bb, a, lb, 2.0)
        assert out.dtype == torch.bfloat16
        assert torch.equal(out, _peft_mixed(xb, wb, bb, a, lb, 2.0))


def test_under_inference_mode_it_makes_no_graph():
    x, w, b, a, lb = _inputs(torch.float32, bias=True)
    with torch.inference_mode():
        out = lora_linear(x, w, b, a, lb, 2.0)
    assert not out.requires_grad
    assert torch.allclose(out, _plain(x, w, b, a, lb, 2.0).detach(), atol=1e-5)


MSGS = [{"role": "user", "content": "Calculate 2 + 3."}]


def test_the_step_runs_fused_layers_and_keeps_peft_dropout_where_it_is_on(tiny_qwen, monkeypatch):
    """Every LoRA layer runs as one op in a plain step (forward and backward); the fused layer
    has no dropout, so with lora_dropout on the step must run peft's layers (same seed, same
    samples: dropout 0.5 and dropout 0 give different updates). peft's layers are back after."""
    calls = []
    apply = LoraLinear.apply
    monkeypatch.setattr(LoraLinear, "apply", lambda *a: calls.append(1) or apply(*a))
    after, fused = {}, {}
    for drop in (0.0, 0.5):
        cfg = Config(model=str(tiny_qwen), lora_r=4, learning_rate=1e-2, lora_dropout=drop)
        name = f"fused_drop{drop}".replace(".", "_")
        b = TorchBackend(tiny_qwen, cfg, adapter=name, device="cpu", log=lambda m: None)
        b.reset(4)
        samples = [
            Sample(MSGS, b.encode_completion(t, finished=True, max_new_tokens=16), adv)
            for t, adv in (("<answer>5</answer>", 1.0), ("it is 7", -1.0))
        ]
        calls.clear()
        b.train_step(samples)
        fused[drop] = len(calls)
        peft_layers = [n for n, m in b.model.named_modules() if type(m).__name__ == "LeanLora"]
        assert peft_layers == []  # the swap is undone
        after[drop] = torch.cat([p.detach().flatten() for p in b.params])
        b.close()
    targets = len(Config().lora_targets)
    # 2 rows, each its prompt's prefix and its completion: 2 layers x 7 projections per pass
    assert fused[0.0] >= 2 * targets * 2 and fused[0.5] == 0
    assert after[0.0].abs().sum() > 0
    assert not torch.allclose(after[0.0], after[0.5])


@pytest.mark.parametrize(
    ("extra", "swapped"),
    [({}, 1), ({"use_dora": True}, 0), ({"lora_bias": True}, 0)],
)
def test_only_plain_lora_layers_are_swapped(extra, swapped):
    """DoRA or a LoRA bias keep peft's own forward (the lean layer computes plain
    W x + s B (A x) only)."""
    from peft import LoraConfig, get_peft_model

    from sapo_edge.backends.torch_decode import _lora_linears

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(6, 5)

        def forward(self, x):
            return self.lin(x)

    model = get_peft_model(Net(), LoraConfig(r=2, target_modules=["lin"], **extra))
    assert len(list(_lora_linears(model, "default"))) == swapped


def test_a_bfloat16_step_runs_fused_layers_with_peft_gradients(tiny_qwen, monkeypatch):
    """In a bfloat16 model (LoRA float32, as peft keeps it) the step runs every LoRA layer as one
    op, and the LoRA gradients it hands the optimizer are peft's own layers' to bfloat16
    rounding (the same samples with the fused layers off), float32 both."""
    calls = []
    apply = LoraLinear.apply
    monkeypatch.setattr(LoraLinear, "apply", lambda *a: calls.append(1) or apply(*a))
    grads = {}
    for fuse in (True, False):
        cfg = Config(model=str(tiny_qwen), lora_r=4, dtype="bfloat16", max_grad_norm=0.0)
        b = TorchBackend(tiny_qwen, cfg, adapter=f"bf16_{fuse}", device="cpu", log=lambda m: None)
        assert b.dtype == "bfloat16"
        b.reset(4)
        with torch.no_grad():  # B off zero, so that every gradient is exercised
            for p in b.params:
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(7)) * 0.05)
        b.fuse_lora = fuse
        samples = [
            Sample(MSGS, b.encode_completion(t, finished=True, max_new_tokens=16), adv)
            for t, adv in (("<answer>5</answer>", 1.0), ("it is 7", -1.0))
        ]
        seen = []
        b.optimizer.step = lambda seen=seen, b=b: seen.extend(p.grad.clone() for p in b.params)
        calls.clear()
        b.train_step(samples)
        assert (len(calls) > 0) == fuse
        grads[fuse] = torch.cat([g.flatten() for g in seen])
        assert all(g.dtype == torch.float32 for g in seen)
        b.close()
    got, want = grads[True], grads[False]
    assert want.abs().sum() > 0
    assert (got - want).norm() <= 2e-2 * want.norm()
