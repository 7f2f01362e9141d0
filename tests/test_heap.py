"""backends/heap.py: inside the train step, a block of 64 KB or more that the heap cannot serve
from free space is mapped on its own (so free() gives it back to the OS) instead of growing the
heap; outside it, glibc grows the heap for blocks up to 32 MB; elsewhere than glibc it does
nothing. The blocks here are 24 MB, or larger than all the free space the test process's heap
holds where earlier tests in the same worker left more: glibc must either map them or grow the
heap (returned_heap trims the heap's top first). (A fixed 24 MB failed once in `make test`: a
test before it in the same xdist worker had left a bigger hole, which served the block.)"""

from __future__ import annotations

import ctypes

import pytest

from sapo_edge.backends import heap

BLOCK = 24 * 2**20


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def _libc():
    libc = heap.glibc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        pytest.skip("needs glibc 2.33 or later (mallinfo2)")
    libc.mallinfo2.restype = _Mallinfo2
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    return libc


def _mapped_by(libc, size: int) -> int:
    """Bytes glibc holds in mmapped blocks while one block of `size` is allocated."""
    libc.malloc_trim(0)  # the heap's top down to its pad: a big block cannot come from it
    before = libc.mallinfo2().hblkhd
    p = libc.malloc(size)
    try:
        return libc.mallinfo2().hblkhd - before
    finally:
        libc.free(p)


def _beyond_free(libc) -> int:
    """A block the heap cannot serve from free space: BLOCK, or 1 MB more than all it holds."""
    libc.malloc_trim(0)
    return max(BLOCK, libc.mallinfo2().fordblks + 2**20)


def _under_ceiling(size: int) -> int:
    """The same size for the check outside a step, kept below glibc's mmap ceiling (above it
    glibc maps every block, whatever the threshold)."""
    return min(size, heap.CEILING - 2**20)


def test_inside_the_step_a_block_is_its_own_mapping_and_outside_it_comes_from_the_heap():
    libc = _libc()
    size = _beyond_free(libc)
    with heap.returned_heap():
        assert _mapped_by(libc, size) >= size  # mapped, so free() unmaps it
    assert _mapped_by(libc, _under_ceiling(size)) == 0  # threshold back at glibc's ceiling


def test_nested_and_concurrent_steps_keep_the_low_threshold_until_the_last_ends():
    libc = _libc()
    size = _beyond_free(libc)
    with heap.returned_heap():
        with heap.returned_heap():
            pass
        assert _mapped_by(libc, size) >= size
    assert _mapped_by(libc, _under_ceiling(size)) == 0


def test_disabled_or_without_glibc_it_changes_nothing(monkeypatch):
    libc = _libc()
    libc.mallopt(heap.M_MMAP_THRESHOLD, heap.CEILING)  # as after a step, whatever ran before
    with heap.returned_heap(enabled=False):
        assert _mapped_by(libc, BLOCK) == 0
    monkeypatch.setattr(heap, "glibc", lambda: None)
    with heap.returned_heap():
        assert _mapped_by(libc, BLOCK) == 0
    heap.trim()  # a no-op without glibc


def test_glibc_is_only_looked_for_on_linux_glibc(monkeypatch):
    heap.glibc.cache_clear()
    monkeypatch.setattr(heap.platform, "libc_ver", lambda: ("", ""))  # musl, or macOS
    try:
        assert heap.glibc() is None
    finally:
        heap.glibc.cache_clear()


def test_a_threshold_the_user_set_is_left_alone(monkeypatch):
    heap.glibc.cache_clear()
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    try:
        assert heap.glibc() is None
    finally:
        heap.glibc.cache_clear()
