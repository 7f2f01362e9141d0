"""Half-precision GEMMs on the CPU with their row count rounded up to a few sizes.

oneDNN builds (JIT-compiles) a bfloat16 matmul kernel for every new shape and keeps it: in torch
2.13 each new row count of one weight held ~0.7 MB for good (800 row counts of a 576 x 1536
weight: +558 MB; ~300 MB with oneDNN's primitive cache off, so not only that cache). A round meets
new row counts all the time: a micro-batch's tokens, a prompt's prefill, the rows still decoding,
a chunk of the LM head. So a bfloat16 run's memory crept by ~100 MB a round (SmolLM2-135M,
706 -> 1,534 MB resident over 7 rounds; AMD EPYC with avx512_bf16), and every new count paid a
kernel build. Here the rows are padded with zeros to the next size of a short ladder (a multiple
of 8 from 9 to 64 rows, then 8 sizes per doubling: at most 12.5% more rows), so one weight meets a few
dozen row counts in a whole run. The padded rows are computed and dropped: the real rows get
the same products (oneDNN's result for a row does not depend on the rows beside it, up to the
rounding of a kernel chosen for another size: tests/test_gemm_rows.py).

float32 is left alone: torch runs it through MKL, whose memory does not grow with new shapes.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

_HALF = (torch.bfloat16, torch.float16)


def bucket(rows: int) -> int:
    """The row count a GEMM of `rows` rows runs at: itself up to 8 (padding 1 row to 8 cost a
    decode step of one row 15-28% at SmolLM2's and Qwen's shapes), a multiple of 8 up to 64, then
    the next of 8 evenly spaced sizes per doubling."""
    if rows <= 8:
        return rows
    if rows <= 64:
        return -(-rows // 8) * 8
    step = 1 << (rows.bit_length() - 4)
    return -(-rows // step) * step


def _wanted(x2: torch.Tensor) -> bool:
    """Whether x2's GEMM would be padded: half precision on the CPU, off its bucket."""
    return x2.device.type == "cpu" and x2.dtype in _HALF and bucket(len(x2)) != len(x2)


def _padded(x2: torch.Tensor) -> torch.Tensor | None:
    """x2 [rows, k] with zero rows up to its bucket, or None where no padding is wanted."""
    if not _wanted(x2):
        return None
    rows = x2.shape[0]
    out = x2.new_zeros(bucket(rows), x2.shape[1])
    out[:rows] = x2
    return out


def mm_rows(
    x2: torch.Tensor,
    w: torch.Tensor,
    bias: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """x2 @ w (+ bias) for 2-D x2, written into `out` when given, at x2's bucketed row count."""
    xp = _padded(x2)
    if xp is None:
        if bias is None:
            return torch.mm(x2, w, out=out) if out is not None else torch.mm(x2, w)
        return torch.addmm(bias, x2, w, out=out) if out is not None else torch.addmm(bias, x2, w)
    full = torch.mm(xp, w) if bias is None else torch.addmm(bias, xp, w)
    if out is None:
        return full[: len(x2)]
    return out.copy_(full[: len(x2)])


def linear_rows(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None):
    """F.linear(x, weight, bias) for x of any rank, at its rows' bucketed count."""
    x2 = x.reshape(-1, x.shape[-1])
    if not _wanted(x2):
        return F.linear(x, weight, bias)
    return mm_rows(x2, weight.t(), bias).view(*x.shape[:-1], weight.shape[0])
