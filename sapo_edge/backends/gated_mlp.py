"""A gated MLP's output, down(silu(gate(x)) * up(x)), as one autograd op from gate(x) and up(x)
that keeps only those two for the backward.

Run op by op, autograd keeps four tensors of the MLP's intermediate width per token and layer
for the backward: gate(x) (for SiLU's), silu(gate(x)) and up(x) (for the product's), and the
product (for the LoRA down projection's dL/dA). Those are most of a train step's activations:
at Qwen2.5-0.5B's shapes (intermediate 4,864 wide, hidden 896), float32, a 128-token completion
row kept ~332 MB, ~228 MB of it these. Here the op keeps gate(x) and up(x) and recomputes
silu(gate(x)) * up(x) in the backward (two elementwise passes, no GEMM): ~217 MB a row, and the
step's peak above the resting process 521 -> 369 MB (4 rows; SmolLM2-135M, 8 rows: 307 -> 246).

The arithmetic is the modeling code's own, op for op: SiLU and the product in the model's
dtype, the down projection as lora_fused.py's (float32 A and B under a bfloat16 base, as peft),
the product's and SiLU's backward as autograd's (aten's silu_backward); tests/test_gated_mlp.py
checks it against the modeling code's MLP run by autograd, and in float64 by gradcheck.
Only MLPs whose forward is exactly that (the classes below, their activation SiLU) and whose
down projection is a lean LoRA layer (torch_decode.merged_lora) are swapped, for the duration.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn
from torch.nn import functional as F

from .lora_fused import fusable, lora_backward, lora_forward

# modeling classes whose forward is down_proj(act_fn(gate_proj(x)) * up_proj(x)) and nothing else
_GATED_MLPS = frozenset({"LlamaMLP", "Qwen2MLP", "Qwen3MLP", "MistralMLP"})


def _silu_module(act: nn.Module) -> bool:
    """nn.SiLU or transformers' SiLUActivation (the same F.silu), not a hub kernel in its place."""
    if type(act) is nn.SiLU:
        return True
    return type(act).__name__ == "SiLUActivation" and type(act).forward.__qualname__ == (
        "SiLUActivation.forward"
    )


class GatedLoraDown(torch.autograd.Function):
    """y = W p + bias + s B (A p) with p = silu(g) * u: gradients for g, u, A and B, from a
    backward that keeps g and u (and the small [tokens, r] product s A p), not p or silu(g)."""

    @staticmethod
    def forward(ctx, g, u, weight, bias, a, b, scale: float):  # noqa: PLR0913
        p = (F.silu(g) * u).reshape(-1, g.shape[-1])
        out = g.new_empty(*g.shape[:-1], weight.shape[0])
        h = lora_forward(p, weight, bias, a, b, scale, out.view(-1, weight.shape[0]))
        ctx.save_for_backward(g, u, h, weight, a, b)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad):
        g, u, h, weight, a, b = ctx.saved_tensors
        need_g, need_u, _, _, need_a, need_b, _ = ctx.needs_input_grad
        act = F.silu(g)  # the forward's own numbers again: the same ops on the same inputs
        p = (act * u).reshape(-1, g.shape[-1])
        gp, ga, gb = lora_backward(
            grad.reshape(-1, grad.shape[-1]),
            p,
            h,
            weight,
            a,
            b,
            ctx.scale,
            (need_g or need_u, need_a, need_b),
        )
        del p
        gg = gu = None
        if gp is not None:
            gp = gp.view(g.shape)
            gu = gp * act if need_u else None  # d(act * u)/du, as autograd's mul
            # d/dg: the product's gradient for act, then SiLU's backward, as autograd runs them
            gg = torch.ops.aten.silu_backward(gp * u, g) if need_g else None
        return gg, gu, None, None, ga, gb, None


class _LeanGatedMlp(nn.Module):
    """The MLP `mlp` with its product and down projection as GatedLoraDown (its gate and up
    projections are the MLP's own modules, lean LoRA layers under merged_lora)."""

    def __init__(self, mlp: nn.Module):
        super().__init__()
        self.mlp = mlp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = self.mlp
        g, u, down = m.gate_proj(x), m.up_proj(x), m.down_proj
        base = down.base
        if g.dtype == u.dtype and fusable(g, base.weight, base.bias, down.a, down.b):
            return GatedLoraDown.apply(g, u, base.weight, base.bias, down.a, down.b, down.scale)
        return down(m.act_fn(g) * u)


def _gated_mlps(model: nn.Module, lean_layer: type):
    """(parent, attribute, mlp) of every gated SiLU MLP whose down projection is `lean_layer`."""
    for name, module in model.named_modules():
        if type(module).__name__ not in _GATED_MLPS:
            continue
        if not _silu_module(getattr(module, "act_fn", None)):
            continue
        if type(getattr(module, "down_proj", None)) is not lean_layer:
            continue
        parent_name, _, attr = name.rpartition(".")
        yield model.get_submodule(parent_name), attr, module


@contextmanager
def lean_gated_mlps(model: nn.Module, lean_layer: type, enabled: bool = True):
    """For the duration, every gated SiLU MLP whose down projection is a `lean_layer` (the lean
    LoRA layer merged_lora swaps in, with .base, .a, .b and .scale) runs as _LeanGatedMlp."""
    if not enabled:
        yield
        return
    swapped = []
    try:
        for parent, attr, mlp in list(_gated_mlps(model, lean_layer)):  # found, then swapped
            setattr(parent, attr, _LeanGatedMlp(mlp))
            swapped.append((parent, attr, mlp))
        yield
    finally:
        for parent, attr, mlp in swapped:
            setattr(parent, attr, mlp)
