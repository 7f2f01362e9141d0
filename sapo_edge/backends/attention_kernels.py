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
and 2, SmolLM2: 9 and 3) to torch's attention only after copying every key and value head for
each query head it serves (`repeat_kv`), unless no mask is given, and sapo-edge always gives one
(left padding, prefixes). That copies the whole KV cache at every decode step, layer after layer
(SmolLM2, 32 rows x 174 tokens: ~25 MB a layer, 5.3 ms against 0.9 ms with the heads grouped in
the kernel; an AVX2 EPYC, busy), and the train step keeps the copies for its backward. torch's CPU
kernel takes the grouped heads itself (`enable_gqa`, torch >= 2.5) with the same result, bit for
bit in float32 and bfloat16 (tests/test_attention_kernels.py); transformers' own switch for it is
the environment variable TRANSFORMERS_SDPA_FORCE_GQA, which a CPU backend sets for its process
unless the user set it.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext

GQA_SWITCH = "TRANSFORMERS_SDPA_FORCE_GQA"


def attention_kernels(device: str) -> AbstractContextManager:
    """For the duration: on a CUDA device, scaled-dot-product attention without cuDNN's kernel;
    on the CPU, grouped-query attention in the kernel (for the process, from then on: a CUDA
    kernel given a mask and grouped heads would fall back to plain attention, so only the CPU
    sets it)."""
    if not device.startswith("cuda"):
        if device == "cpu":
            os.environ.setdefault(GQA_SWITCH, "1")
        return nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(
        [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    )
