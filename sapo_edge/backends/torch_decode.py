"""The torch decode loop's three fast paths: LoRA folded into the base weights while sampling, a
KV cache that grows in place, and sampling by inverse CDF.

Each one does the same arithmetic as the slow path it replaces, to float rounding:
- `merged_lora` swaps every LoRA-wrapped Linear for a lean layer computing W x + s B (A x)
  (lora_fused.py; A and B in float32 in a bfloat16 model), or, in float32 with `lean`
  off, for a plain Linear whose weight is W + s B @ A, computed once per generate() call. The
  shared base weights are never written: the peft modules go back in place afterwards. The
  lean layers are differentiable in A and B, so the train step runs in them too.
- `growing_cache` writes the KV cache in place into buffers with a margin, where DynamicCache
  concatenates (copies) the cache of every layer at every step.
- `sample` draws one token per row from the categorical distribution with one uniform per row
  (inverse CDF, in two levels: blocks, then a token within the block), where torch.multinomial
  draws an exponential per vocabulary entry.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from contextlib import contextmanager
from functools import cache

import torch
from torch import nn
from torch.nn import functional as F
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from .lora_fused import lora_linear

BLOCK = 256  # vocabulary entries per block of the two-level inverse CDF


def kv_cache(module: nn.Module, cache_obj) -> dict:
    """The keyword argument that hands a KV cache to a transformers model or decoder: `cache` where
    its forward takes it (transformers 5.24 renamed `past_key_values`, warns on the old name and
    drops it in 5.40), `past_key_values` on older releases."""
    return {_cache_keyword(type(module)): cache_obj, "use_cache": True}


@cache
def _cache_keyword(cls: type) -> str:
    params = inspect.signature(cls.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def sample(logits: torch.Tensor, top_p: float, gen: torch.Generator) -> torch.Tensor:
    """One token per row from temperature-scaled logits, nucleus-filtered when top_p < 1."""
    if top_p < 1.0:
        probs = torch.softmax(logits, -1)
        sorted_p, order = probs.sort(-1, descending=True)
        drop = sorted_p.cumsum(-1) - sorted_p > top_p  # keep the smallest set reaching top_p
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p.masked_fill(drop, 0.0))
        return inverse_cdf(probs, gen)
    # unnormalised probabilities: the inverse CDF scales its uniform by their total
    return blocked_inverse_cdf((logits - logits.amax(-1, keepdim=True)).exp_(), gen)


def inverse_cdf(probs: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """The first token whose cumulative probability passes u * total, u uniform in [0, 1), one
    per row: a zero-probability token never does."""
    cdf = probs.cumsum(-1, dtype=torch.float64)
    u = torch.rand(len(cdf), 1, generator=gen, dtype=torch.float64, device=cdf.device)
    picked = torch.searchsorted(cdf, u * cdf[:, -1:], right=True)
    return picked.clamp_(max=probs.shape[-1] - 1).squeeze(1)


def blocked_inverse_cdf(probs: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """`inverse_cdf` in two levels, with the same uniform: the block (of BLOCK tokens) whose
    cumulative sum passes u * total, then the token within it. Only the block sums and one
    block per row are summed in float64, not the whole vocabulary (a float64 cumsum over 49,152
    entries per row cost more than the rest of sampling)."""
    n, v = probs.shape
    nb = -(-v // BLOCK)
    if nb * BLOCK != v:
        probs = F.pad(probs, (0, nb * BLOCK - v))
    blocks = probs.view(n, nb, BLOCK)
    cdf = blocks.sum(-1, dtype=torch.float64).cumsum(-1)
    u = torch.rand(n, 1, generator=gen, dtype=torch.float64, device=cdf.device)
    target = u * cdf[:, -1:]
    j = torch.searchsorted(cdf, target, right=True).clamp_(max=nb - 1)
    before = torch.where(j > 0, cdf.gather(1, (j - 1).clamp(min=0)), torch.zeros_like(target))
    inner = blocks.gather(1, j[:, :, None].expand(n, 1, BLOCK)).squeeze(1)
    k = torch.searchsorted(inner.cumsum(-1, dtype=torch.float64), target - before, right=True)
    # rounding can put the residual at or past the block's own sum: its last non-zero token then
    last = (torch.arange(BLOCK, device=inner.device) * (inner > 0)).argmax(-1, keepdim=True)
    return (j * BLOCK + torch.minimum(k, last)).squeeze(1)


class _GrowingLayer(DynamicLayer):
    """A DynamicLayer that writes new keys/values into a buffer with room to spare and hands out
    views of its filled part. The buffer holds what is filled plus a margin (a quarter of it, at
    least MARGIN tokens, never past the call's planned length until the call outgrows it): a
    completion leaves the batch when it ends, so a cache sized for every row's longest possible
    completion held about 3x what the live rows needed (SmolLM2, 32 rows of addition: 257 MB
    against a live peak of ~85 MB). Growing copies the filled part, once per margin."""

    MARGIN = 16

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity, self.length = capacity, 0

    def _room(self, end: int) -> int:
        """The length of a buffer holding `end` tokens and its margin."""
        want = end + max(self.MARGIN, end // 4)
        return want if end > self.capacity else min(want, self.capacity)

    def _alloc(self, like: torch.Tensor, batch: int, capacity: int) -> torch.Tensor:
        return like.new_empty(batch, like.shape[1], capacity, like.shape[3])

    def _views(self) -> None:
        self.keys = self._k[:, :, : self.length]
        self.values = self._v[:, :, : self.length]

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.dtype, self.device = key_states.dtype, key_states.device
            self.is_initialized = True
            b, cap = key_states.shape[0], self._room(key_states.shape[-2])
            self._k = self._alloc(key_states, b, cap)
            self._v = self._alloc(value_states, b, cap)
        new = key_states.shape[-2]
        end = self.length + new
        if end > self._k.shape[2]:  # full: a longer buffer, the filled part copied
            rows = torch.arange(self._k.shape[0], device=self._k.device)
            self._k, self._v = (self._copy(t, rows, self._room(end)) for t in (self._k, self._v))
        self._k[:, :, self.length : end] = key_states
        self._v[:, :, self.length : end] = value_states
        self.length = end
        self._views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Each row `repeats` times over; only the filled part is copied (the margin is left
        unwritten, so its pages stay unused until decoding reaches them)."""
        if self.length:
            rows = torch.arange(self._k.shape[0], device=self._k.device)
            self._select_rows(rows.repeat_interleave(repeats))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows `indices`: only the filled part of the buffer is copied."""
        if self.length:
            self._select_rows(indices)

    def _select_rows(self, rows: torch.Tensor) -> None:
        self._k, self._v = (self._copy(t, rows, t.shape[2]) for t in (self._k, self._v))
        self._views()

    def _copy(self, buf: torch.Tensor, rows: torch.Tensor, capacity: int) -> torch.Tensor:
        """A new buffer of `capacity` tokens holding the filled part of `buf`'s rows `rows`."""
        out = self._alloc(buf, len(rows), capacity)
        torch.index_select(buf[:, :, : self.length], 0, rows, out=out[:, :, : self.length])
        return out


def growing_cache(config, capacity: int) -> DynamicCache:
    """A DynamicCache whose full-attention layers grow in place, planned for `capacity` tokens (a
    model with other layer kinds, sliding windows say, keeps transformers' own layers)."""
    cache = DynamicCache(config=config)
    if cache.layers and all(type(layer) is DynamicLayer for layer in cache.layers):
        cache.layers = [_GrowingLayer(capacity) for _ in cache.layers]
    return cache


class _MergedLinear(nn.Module):
    """A Linear with LoRA folded in: the weight is W + scale * B @ A, the bias the base's own."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.weight, self.bias = weight, bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class LeanLora(nn.Module):
    """W x + scale * B (A x) with the adapter's own A and B (float32 in a bfloat16 model), peft's
    arithmetic without its per-call checks, dropout and adapter dispatch. Differentiable in A
    and B: the train step runs it too, as one op (lora_fused.py; float32 A and B under a bfloat16
    base included). Measured on a CPU with native bf16: tiny bfloat16 matmuls ([rows, 576] x
    [576, 16]) cost more than the same in float32 plus the casts (1.5x at 32 rows, 3-4x at 1-8
    rows)."""

    def __init__(self, base: nn.Linear, a: torch.Tensor, b: torch.Tensor, scale: float):
        super().__init__()
        self.base, self.a, self.b, self.scale = base, a, b, scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return lora_linear(x, self.base.weight, self.base.bias, self.a, self.b, self.scale)


_LORA_VARIANTS = ("lora_variant", "use_dora", "lora_bias")  # peft's per-adapter dicts


def _lora_linears(model: nn.Module, adapter: str):
    """(parent, attribute name, peft layer) of every plain LoRA-wrapped nn.Linear carrying
    `adapter`: a layer with a LoRA variant (DoRA...) or a LoRA bias keeps peft's own forward."""
    for name, module in model.named_modules():
        lora_a = getattr(module, "lora_A", None)
        base = getattr(module, "base_layer", None)
        if lora_a is None or adapter not in lora_a or type(base) is not nn.Linear:
            continue
        if not any(getattr(module, attr, {}).get(adapter) for attr in _LORA_VARIANTS):
            parent_name, _, attr = name.rpartition(".")
            yield model.get_submodule(parent_name), attr, module


@contextmanager
def merged_lora(model: nn.Module, adapter: str, enabled: bool = True, lean: bool = False):
    """For the duration, each LoRA layer of `adapter` is a plain Linear with the merged weight in
    float32; in half precision, where W + delta would round a small LoRA update away, a lean
    W x + B (A x) with A and B in float32, as peft computes it (other adapters' layers are bypassed too:
    generate for one adapter at a time). `lean` runs float32 the lean way too: no merged copy
    of the projections (about 425 MB for SmolLM2-135M), at some cost in tokens/s. The lean
    layers are differentiable in A and B: the train step runs its forward and backward in them."""
    if not enabled:
        yield
        return
    swapped = []
    try:
        with torch.no_grad():
            for parent, attr, layer in _lora_linears(model, adapter):
                base = layer.base_layer
                dtype = base.weight.dtype
                if dtype == torch.float32 and not lean:
                    delta = layer.get_delta_weight(adapter).to(dtype)
                    swap: nn.Module = _MergedLinear(base.weight + delta, base.bias)
                else:
                    a, b = layer.lora_A[adapter].weight, layer.lora_B[adapter].weight
                    swap = LeanLora(base, a, b, layer.scaling[adapter])
                setattr(parent, attr, swap)
                swapped.append((parent, attr, layer))
        yield
    finally:
        for parent, attr, layer in swapped:
            setattr(parent, attr, layer)


class GrowingDecoder:
    """One generate() call's decode on a growing cache (the CPU's): the prompts prefilled once
    each, their cache repeated for the n completions, finished rows leaving the batch."""

    def __init__(self, model, lm, ids, mask, pos, n: int, max_new_tokens: int):
        self.model, self.width = model, ids.shape[1]
        self.cache = growing_cache(model.config, self.width + max_new_tokens)
        if self.width > 1:  # all but the last prompt token, once per prompt
            # the decoder alone, no LM head (no logits are needed, and in bfloat16 torch copies
            # the whole head weight for a strided 3-D input)
            decoder = lm.get_decoder()
            decoder(
                input_ids=ids[:, :-1],
                attention_mask=mask[:, :-1],
                position_ids=pos[:, :-1],
                **kv_cache(decoder, self.cache),
            )
            self.cache.batch_repeat_interleave(n)
        self.cur, mask, self.pos = (
            t.repeat_interleave(n, 0) for t in (ids[:, -1:], mask, pos[:, -1:])
        )
        # the attention mask of the whole call, its columns used as the cache fills
        self.mask = torch.cat([mask, mask.new_ones(len(mask), max_new_tokens)], 1)
        self.cache_kw = kv_cache(lm, self.cache)
        self.filled = self.width  # columns of the mask in use, this step's token included

    def run(self) -> torch.Tensor:
        """float32 logits of the next token, one row per running completion."""
        logits = self.model(
            input_ids=self.cur,
            attention_mask=self.mask[:, : self.filled],
            position_ids=self.pos,
            **self.cache_kw,
        ).logits[:, -1]
        return logits.float()

    def drop(self, keep: torch.Tensor) -> None:
        """Only the rows `keep` (indices into the running ones) go on."""
        self.cache.batch_select_indices(keep)
        self.cur, self.mask, self.pos = self.cur[keep], self.mask[keep], self.pos[keep]

    def advance(self, tok: torch.Tensor) -> None:
        self.cur, self.pos, self.filled = tok[:, None], self.pos + 1, self.filled + 1


def decode_loop(
    dec,
    max_new_tokens: int,
    *,
    temperature: float,
    top_p: float,
    gen: torch.Generator,
    eos: torch.Tensor,
    progress: Callable[[int, int], None] | None,
    pace: Callable[[], None] = lambda: None,
) -> list[list[int]]:
    """The sampled ids of every row of `dec` (a GrowingDecoder or static_decode.StaticDecoder),
    each up to and including its end token: one token per running row per step, drawn from its
    logits in row order (the random stream is the same whichever decoder runs)."""
    rows = torch.arange(len(dec.cur), device=dec.cur.device)  # which completion each row is
    out: list[list[int]] = [[] for _ in range(len(rows))]
    for step in range(1, max_new_tokens + 1):
        logits = dec.run()
        nxt = sample(logits / temperature if temperature != 1.0 else logits, top_p, gen)
        done = torch.isin(nxt, eos)
        for r, t in zip(rows.tolist(), nxt.tolist(), strict=True):
            out[r].append(t)
        if progress is not None:  # may raise to abandon the call (a stop request)
            progress(step, sum(map(len, out)))
        pace()
        if done.all():
            break
        if done.any():  # finished completions leave the batch
            keep = (~done).nonzero().squeeze(1)
            dec.drop(keep)
            rows, nxt = rows[keep], nxt[keep]
        dec.advance(nxt)
    return out
