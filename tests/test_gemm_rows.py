"""Half-precision GEMMs on the CPU run at a few row counts (backends/gemm_rows.py): the ladder,
the products, and that a run's many row counts reach oneDNN as a few dozen."""

import pytest
import torch
from torch.nn import functional as F

from sapo_edge.backends import gemm_rows
from sapo_edge.backends.gemm_rows import bucket, linear_rows, mm_rows


def test_the_ladder_rounds_up_by_at_most_an_eighth_past_64_and_stays_short():
    for m in range(1, 20_000):
        b = bucket(m)
        assert b == m if m <= 8 else b >= m and b % 8 == 0
        assert b - m < (8 if m <= 64 else m / 8 + 1)
        assert bucket(b) == b  # a size on the ladder stays
    assert len({bucket(m) for m in range(1, 8193)}) <= 72  # a whole run's row counts


@pytest.mark.parametrize("rows", [1, 3, 8, 13, 64, 65, 130, 257])
def test_padded_products_are_the_products(rows):
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 24, generator=g)
    w, bias = torch.randn(40, 24, generator=g), torch.randn(40, generator=g)
    for dtype in (torch.float32, torch.bfloat16):
        xd, wd, bd = x.to(dtype), w.to(dtype), bias.to(dtype)
        got = linear_rows(xd[None], wd, bd)[0]  # any rank
        assert got.shape == (rows, 40) and got.dtype == dtype
        want = F.linear(xd, wd, bd)
        if dtype == torch.float32:
            assert torch.equal(got, want)  # float32 is not padded
        else:
            torch.testing.assert_close(got.float(), want.float(), rtol=1e-2, atol=1e-2)
        out = torch.empty(rows, 24, dtype=dtype)
        g2 = torch.randn(rows, 40, generator=g).to(dtype)
        assert mm_rows(g2, wd, out=out) is out
        torch.testing.assert_close(out.float(), (g2 @ wd).float(), rtol=1e-2, atol=1e-2)


def test_a_runs_many_row_counts_reach_the_gemm_as_a_few(monkeypatch):
    seen = set()
    mm = torch.mm

    def recorded(x, w, *a, **k):
        seen.add(len(x))
        return mm(x, w, *a, **k)

    monkeypatch.setattr(gemm_rows.torch, "mm", recorded)
    w = torch.randn(16, 8, dtype=torch.bfloat16)
    for rows in range(1, 1001):
        linear_rows(torch.randn(rows, 8, dtype=torch.bfloat16), w)
    assert seen == {bucket(r) for r in range(1, 1001) if bucket(r) != r} and len(seen) <= 40
