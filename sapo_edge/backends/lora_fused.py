"""A LoRA linear layer, W x + bias + s * B (A x), as one autograd op.

peft computes it as five: the base linear, lora_A, lora_B, a multiply by s over the whole
[tokens, out] output and an add, each with its own backward node, and autograd then adds the two
gradients that reach x. Here the scale goes on the small [tokens, r] product, the LoRA term is
added into the base output by the same matmul (addmm), and the backward writes each gradient
once: W's and the bias' are never computed (the base is frozen). The train step of the
benchmark's work (SmolLM2-135M, float32, 2 cores) took ~9% less time with it (medians of three
A/B pairs: 38.1 s -> 34.5 s); the arithmetic is the same to float rounding
(tests/test_lora_fused.py checks it against peft's op-by-op arithmetic and float64 gradcheck).
A bfloat16 base with float32 A and B (how peft keeps LoRA in a bfloat16 model) runs as one op
too: before, that mix took peft's five ops plus their dtype casts and whole-output multiplies.
"""

from __future__ import annotations

import torch

from .gemm_rows import linear_rows, mm_rows


def lora_forward(x2, weight, bias, a, b, scale: float, out: torch.Tensor):
    """out[tokens, out_features] = x2 W^T + bias + s (x2 A^T) B^T for 2-D x2, written into `out`;
    returns h = s (x2 A^T) [tokens, r], in A's dtype, which the backward needs.

    A and B may be float32 under a bfloat16 (or float16) base, as peft keeps them: the LoRA
    term is then computed in A's dtype, x2 cast to it for the small matmul only, and added
    into the base output in float32 before that is rounded to the base dtype (an in-place add of
    a float32 tensor into a bfloat16 one computes in float32), which is peft's own arithmetic:
    the base result plus the float32 LoRA term, cast back."""
    h = torch.mm(x2.to(a.dtype), a.t()).mul_(scale)  # [tokens, r]: s (A x), in A's dtype
    mm_rows(x2, weight.t(), bias, out=out)  # (a half-precision base at bucketed row counts)
    if h.dtype == out.dtype:
        out.addmm_(h, b.t())
    else:  # float32 LoRA term, summed in float32, rounded once to the base dtype
        out.add_(torch.mm(h, b.t()))
    return h


def lora_backward(g, x2, h, weight, a, b, scale: float, need: tuple[bool, bool, bool]):
    """Gradients (dL/dx2, dL/dA, dL/dB) of lora_forward from dL/dout `g` [tokens, out_features],
    each None where `need` (x, A, B) says so; the LoRA ones in LoRA's dtype, the incoming
    gradient cast to it for the small matmuls only, dL/dx2 in the base dtype with the LoRA part
    added in float32 before one rounding, as in the forward."""
    need_x, need_a, need_b = need
    gl = g.to(b.dtype)  # the incoming gradient in LoRA's dtype (no copy when they agree)
    gb = torch.mm(gl.t(), h) if need_b else None  # dL/dB = g^T s (A x)
    if not (need_x or need_a):
        return None, None, gb
    gh = torch.mm(gl, b).mul_(scale)  # dL/d(A x) = s g B
    ga = torch.mm(gh.t(), x2.to(a.dtype)) if need_a else None
    gx = None
    if need_x:
        gx = mm_rows(g, weight)
        if gh.dtype == gx.dtype:
            gx.addmm_(gh, a)
        else:  # as in the forward: the LoRA part in float32, added before one rounding
            gx.add_(torch.mm(gh, a))
    return gx, ga, gb


class LoraLinear(torch.autograd.Function):
    """y = x W^T + bias + scale * (x A^T) B^T, with gradients for x, A and B only (lora_forward
    and lora_backward: float32 A and B under a bfloat16 base as peft computes them)."""

    @staticmethod
    def forward(ctx, x, weight, bias, a, b, scale: float):  # noqa: PLR0913
        x2 = x.reshape(-1, x.shape[-1])
        # the output in its own shape, written through a 2-D view: a view returned from a
        # Function could not be changed in place later (OLMo clamps q/k/v in place)
        out = x.new_empty(*x.shape[:-1], weight.shape[0])
        h = lora_forward(x2, weight, bias, a, b, scale, out.view(-1, weight.shape[0]))
        ctx.save_for_backward(x2, h, weight, a, b)
        ctx.scale, ctx.x_shape = scale, x.shape
        return out

    @staticmethod
    def backward(ctx, grad):
        x2, h, weight, a, b = ctx.saved_tensors
        need_x, _, _, need_a, need_b, _ = ctx.needs_input_grad
        g = grad.reshape(-1, grad.shape[-1])
        gx, ga, gb = lora_backward(g, x2, h, weight, a, b, ctx.scale, (need_x, need_a, need_b))
        return None if gx is None else gx.view(ctx.x_shape), None, None, ga, gb, None


def fusable(x, weight, bias, a, b) -> bool:
    """Whether the one-op path applies: gradients on, a frozen base whose dtype x shares, and A
    and B of one dtype (float32 under a bfloat16 base included)."""
    frozen = not weight.requires_grad and (bias is None or not bias.requires_grad)
    return torch.is_grad_enabled() and frozen and x.dtype == weight.dtype and a.dtype == b.dtype


def lora_linear(x, weight, bias, a, b, scale: float) -> torch.Tensor:
    """LoraLinear where it pays: with gradients and a frozen base whose dtype x shares (A and B in
    that dtype or another, float32 under a bfloat16 base). Otherwise peft's own arithmetic (x
    cast to A's dtype for the LoRA term, the sum cast back to x's): without gradients (sampling)
    the one op saved nothing and the Function call cost ~7% of tokens/s (SmolLM2, float32, 2
    cores)."""
    if fusable(x, weight, bias, a, b):
        return LoraLinear.apply(x, weight, bias, a, b, scale)
    lora = torch.nn.functional.linear(torch.nn.functional.linear(x.to(a.dtype), a), b) * scale
    return (linear_rows(x, weight, bias) + lora).to(x.dtype)
