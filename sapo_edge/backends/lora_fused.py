"""A LoRA linear layer, W x + bias + s * B (A x), as one autograd op.

peft computes it as five: the base linear, lora_A, lora_B, a multiply by s over the whole
[tokens, out] output and an add, each with its own backward node, and autograd then adds the two
gradients that reach x. Here the scale goes on the small [tokens, r] product, the LoRA term is
added into the base output by the same matmul (addmm), and the backward writes each gradient
once: W's and the bias' are never computed (the base is frozen). The train step of the
benchmark's work (SmolLM2-135M, float32, 2 cores) took ~9% less time with it (medians of three
A/B pairs: 38.1 s -> 34.5 s); the arithmetic is the same to float rounding
(tests/test_lora_fused.py checks it against peft's op-by-op arithmetic and float64 gradcheck).
"""

from __future__ import annotations

import torch


class LoraLinear(torch.autograd.Function):
    """y = x W^T + bias + scale * (x A^T) B^T, with gradients for x, A and B only."""

    @staticmethod
    def forward(ctx, x, weight, bias, a, b, scale: float):  # noqa: PLR0913
        x2 = x.reshape(-1, x.shape[-1])
        h = torch.mm(x2, a.t()).mul_(scale)  # [tokens, r]: s (A x)
        # the output in its own shape, written through a 2-D view: a view returned from a
        # Function could not be changed in place later (OLMo clamps q/k/v in place)
        out = x.new_empty(*x.shape[:-1], weight.shape[0])
        y = out.view(-1, weight.shape[0])
        if bias is not None:
            torch.addmm(bias, x2, weight.t(), out=y)
        else:
            torch.mm(x2, weight.t(), out=y)
        y.addmm_(h, b.t())
        ctx.save_for_backward(x2, h, weight, a, b)
        ctx.scale, ctx.x_shape = scale, x.shape
        return out

    @staticmethod
    def backward(ctx, grad):
        x2, h, weight, a, b = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1])
        need_x, _, _, need_a, need_b, _ = ctx.needs_input_grad
        gb = torch.mm(g.t(), h) if need_b else None  # dL/dB = g^T s (A x)
        if not (need_x or need_a):
            return None, None, None, None, gb, None
        gh = torch.mm(g, b).mul_(ctx.scale)  # dL/d(A x) = s g B
        ga = torch.mm(gh.t(), x2) if need_a else None
        gx = torch.mm(g, weight).addmm_(gh, a).view(ctx.x_shape) if need_x else None
        return gx, None, None, ga, gb, None


def lora_linear(x, weight, bias, a, b, scale: float) -> torch.Tensor:
    """LoraLinear where it pays: with gradients, one dtype throughout and a frozen base.
    Otherwise peft's own arithmetic (x cast to A's dtype for the LoRA term, the sum cast back to
    x's): without gradients (sampling) the one op saved nothing and the Function call cost ~7% of
    tokens/s (SmolLM2, float32, 2 cores)."""
    frozen = not weight.requires_grad and (bias is None or not bias.requires_grad)
    if torch.is_grad_enabled() and frozen and x.dtype == weight.dtype == a.dtype == b.dtype:
        return LoraLinear.apply(x, weight, bias, a, b, scale)
    lora = torch.nn.functional.linear(torch.nn.functional.linear(x.to(a.dtype), a), b) * scale
    return (torch.nn.functional.linear(x, weight, bias) + lora).to(x.dtype)
