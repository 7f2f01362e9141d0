"""Which attention kernels torch may pick on a CUDA GPU: flash, memory-efficient or plain, never
cuDNN's.

cuDNN's scaled-dot-product attention builds an execution plan for every new input shape and
caches it. Sampling meets a new shape at every decode step (the key/value length grows by one, and
rows leave the batch as their completions end), and the train step's micro-batches differ from
round to round, so the plans are built all the time. On an H100 (torch 2.11, bfloat16, Qwen2.5-0.5B's
shapes, 32 rows x 200 new tokens) a generation at lengths not seen before took 16.1 s with cuDNN
allowed and 8.3 s without (7.1 s and 6.7 s once every length had its plan): docs/cuda.md. Flash and
memory-efficient attention need no plan. The CPU is left as it is.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext


def attention_kernels(device: str) -> AbstractContextManager:
    """For the duration: on a CUDA device, scaled-dot-product attention without cuDNN's kernel;
    elsewhere nothing changes."""
    if not device.startswith("cuda"):
        return nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(
        [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    )
