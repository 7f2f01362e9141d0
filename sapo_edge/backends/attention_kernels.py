"""Which attention kernels torch may pick: on a CUDA GPU flash, memory-efficient or plain, never
cuDNN's; on the CPU, grouped-query attention inside the kernel.

cuDNN's scaled-dot-product attention builds an execution plan for every new input shape and
caches it. Sampling meets a new shape at every decode step (the key/value length grows by one, and
rows leave the batch as their completions end), and the train step's micro-batches differ from
round to round, so the plans are built all the time. On an H100 (torch 2.11, bfloat16, Qwen2.5-0.5B's
shapes, 32 rows x 200 new tokens) a generation at lengths not seen before took 16.1 s with cuDNN
allowed and 8.3 s without (7.1 s and 6.7 s once every length had its plan): docs/cuda.md. Flash and
memory-efficient attention need no plan.

On the CPU, transformers hands a model with fewer key/value heads than query heads (Qwen2.5: 14
and 2, SmolLM2: 9 and 3) to torch's attention after copying every key/value head once for each
query head it serves (`repeat_kv`) whenever more than one query position is given with a mask:
the prompt's prefill and every row of the train step, whose backward keeps the copies (a decode
step folds the query heads instead). torch's CPU kernel groups the heads itself (`enable_gqa`,
torch >= 2.5) with the same result, bit for bit in float32 and bfloat16, and gradients equal to
rounding (tests/test_attention_kernels.py). transformers' switch for it is the environment
variable TRANSFORMERS_SDPA_FORCE_GQA, which a CPU backend sets while it samples, scores or trains
(unless the user set it): on CUDA a mask with grouped heads would fall back to plain attention.
Measured (AMD EPYC, quiet, float32, 128 new tokens): a train step's peak above resting 263 ->
243 MB (SmolLM2, 8 rows) and 365 -> 348 MB (Qwen2.5-0.5B's shapes, 4 rows), its time unchanged
within the noise (9.8 -> 9.3 s, 24.3 -> 24.0 s, medians of 3 and 2).

Once a CPU backend runs, transformers' "sdpa" attention is `cpu_sdpa`, which changes two cases
on the CPU and hands everything else to transformers' own:
- A decode step (one query position per row) with grouped heads: torch's grouped-heads kernel
  was 10x slower there than one call whose query heads are folded onto their key/value head
  (bfloat16, 64 rows x 14 heads over 100 keys: 5.4 ms against 0.5 ms a call; float32 1.1 ms
  against 0.6 ms; AMD EPYC with avx512_bf16, 2 threads): at Qwen2.5-0.5B's shapes it took a
  fifth of a round's generation. transformers folds them itself (`pack_gqa`) only when the
  switch is off and a mask is given, and a batch without padding has none.
- Several query positions in a half-precision model: computed in float32, rounded back once
  (`_float32_sdpa` says why).
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext

import torch
from torch.nn import functional as F

from .held_setting import HeldSetting

GQA_SWITCH = "TRANSFORMERS_SDPA_FORCE_GQA"
_user: list[str | None] = [None]  # the switch's value when the first CPU backend entered


def attention_kernels(device: str) -> AbstractContextManager:
    """For the duration: on a CUDA device, scaled-dot-product attention without cuDNN's kernel;
    on the CPU, grouped-query attention in the kernel; elsewhere nothing changes."""
    if device == "cpu":
        _fold_decode_heads()
        return _GROUPED.held()
    if not device.startswith("cuda"):
        return nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(
        [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    )


def _grouped_on() -> None:
    _user[0] = os.environ.get(GQA_SWITCH)
    if _user[0] is None:  # a value the user set is left alone
        os.environ[GQA_SWITCH] = "1"


def _grouped_off() -> None:
    if _user[0] is None:
        os.environ.pop(GQA_SWITCH, None)


# transformers' switch on until the last concurrent CPU use ends, then as it was
_GROUPED = HeldSetting(_grouped_on, _grouped_off)


def cpu_sdpa(module, query, key, value, attention_mask, *args, **kwargs):
    """transformers' "sdpa" attention, except on the CPU: a decode step with grouped key/value
    heads runs each key/value head's query heads as the query positions of one attention call
    (transformers' pack_gqa arithmetic, whatever the switch says and with or without a mask),
    and a half-precision call over several positions runs in float32 (_float32_sdpa)."""
    groups = getattr(module, "num_key_value_groups", 1)
    plain = not args and not module.training and kwargs.get("softcap") is None
    mask_ok = attention_mask is None or attention_mask.shape[1] == 1  # shared by the heads
    if query.shape[2] == 1 and groups > 1 and query.device.type == "cpu" and plain and mask_ok:
        if kwargs.get("position_bias") is None and not kwargs.get("sliding_window"):
            b, h, _, d = query.shape
            out = F.scaled_dot_product_attention(
                query.reshape(b, h // groups, groups, d),
                key,
                value,
                attn_mask=attention_mask,
                scale=kwargs.get("scaling"),
            )
            return out.reshape(b, h, 1, d).transpose(1, 2).contiguous(), None
    if query.shape[2] > 1 and query.device.type == "cpu" and query.dtype in _HALF:
        return _float32_sdpa(module, query, key, value, attention_mask, *args, **kwargs)
    return _SDPA[0](module, query, key, value, attention_mask, *args, **kwargs)


_HALF = (torch.bfloat16, torch.float16)


def _float32_sdpa(module, query, key, value, attention_mask, *args, **kwargs):
    """Attention over several query positions in a half-precision model on the CPU, computed in
    float32 and rounded back once. torch 2.13's bfloat16 CPU kernel builds a oneDNN micro-kernel
    for every new sequence length and keeps it (fwd+bwd over 400 lengths of SmolLM2's heads:
    +1,455 MB resident, for good) and was slower than float32 with the casts (14.8 s against
    9.0 s; AMD EPYC with avx512_bf16, 2 threads): the prefill, scoring and the train step meet
    a new length with almost every call. A decode step (one position) keeps bfloat16: it neither
    grew nor was slower."""
    if attention_mask is not None and attention_mask.is_floating_point():
        attention_mask = attention_mask.float()
    q, k, v = (t.float() for t in (query, key, value))
    out, weights = _SDPA[0](module, q, k, v, attention_mask, *args, **kwargs)
    return out.to(query.dtype), weights


_SDPA: list = []  # transformers' own "sdpa" attention, once replaced


def _fold_decode_heads() -> None:
    """Register cpu_sdpa as transformers' "sdpa" attention (once per process)."""
    if _SDPA:
        return
    from transformers.modeling_utils import AttentionInterface

    _SDPA.append(AttentionInterface._global_mapping["sdpa"])
    AttentionInterface.register("sdpa", cpu_sdpa)
