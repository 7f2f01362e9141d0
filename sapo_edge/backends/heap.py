"""Give the train step's freed memory back to the operating system (glibc only; a no-op
elsewhere).

On the CPU every tensor is a malloc. glibc serves blocks below its mmap threshold from its heap,
and that threshold rises, up to 32 MB, each time a larger mmapped block is freed: after the first
logits tensor is freed, a step's activations (0.3-3 MB each) all come from the heap. Freed in a
different order than they were taken, they leave holes the heap keeps, so resident memory
creeps up micro-batch after micro-batch: measured on SmolLM2-135M in float32 at micro-batch 1,
the step rose 860 MB above resting memory for about 250 MB of live tensors (bench/rss_phases.py).

`returned_heap()` trims the heap and fixes the threshold at 64 KB for the step, so each
activation is its own mapping and goes back to the OS when freed, then puts the threshold at
glibc's own ceiling (fixed from then on: the dynamic one is off) and trims the heap again.
glibc consults the threshold only when the heap has no free space that fits, so holes are still
reused first. Generation keeps the heap: its tensors are small and many, and a mapping per
tensor made it slower (46 s against 40 s in one measurement). The setting is process-wide:
while one node steps, another node's generation on another thread maps its blocks too. A
threshold the user set (MALLOC_MMAP_THRESHOLD_) is left alone.
"""

from __future__ import annotations

import ctypes
import os
import platform
from contextlib import AbstractContextManager, nullcontext
from functools import cache

from .held_setting import HeldSetting

M_MMAP_THRESHOLD = -3  # mallopt parameter numbers, from glibc's malloc.h
STEP_THRESHOLD = 64 * 1024
# DEFAULT_MMAP_THRESHOLD_MAX, where glibc's dynamic threshold tops out: 32 MB on 64-bit
CEILING = 4 * 1024 * 1024 * ctypes.sizeof(ctypes.c_long)


@cache
def glibc():
    """The C library when it is glibc (mallopt, malloc_trim), else None (macOS, Windows, musl),
    and None when the user set glibc's threshold themselves (MALLOC_MMAP_THRESHOLD_)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
    except (OSError, AttributeError):
        return None
    return libc


def trim() -> None:
    """Hand the heap's free pages back to the OS (glibc's malloc_trim)."""
    libc = glibc()
    if libc is not None:
        libc.malloc_trim(0)


def _step_on() -> None:
    trim()  # what generation freed goes back before the step starts
    glibc().mallopt(M_MMAP_THRESHOLD, STEP_THRESHOLD)


def _step_off() -> None:
    glibc().mallopt(M_MMAP_THRESHOLD, CEILING)
    trim()


_STEP = HeldSetting(_step_on, _step_off)  # steps of one process's nodes may run on threads


def returned_heap(enabled: bool = True) -> AbstractContextManager:
    """For the duration, blocks of 64 KB and more are mapped on their own and unmapped when freed;
    the heap is trimmed before and after. Nested or concurrent uses keep the low threshold until the
    last one ends."""
    return _STEP.held() if enabled and glibc() is not None else nullcontext()
