"""head_logps.py: the completion tokens' log-probs through the LM head in chunks of tokens, against
the unchunked computation (the head over the whole micro-batch, then a float32 log-softmax per
row): the same numbers in float32 and bfloat16, gradients to rounding, and no full-vocabulary
tensor larger than a chunk in the train step's forward and backward."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from sapo_edge.backends import head_logps as hl  # noqa: E402
from sapo_edge.backends.base import Sample  # noqa: E402
from sapo_edge.backends.torch_backend import TorchBackend  # noqa: E402
from sapo_edge.config.settings import Config  # noqa: E402


def _unchunked(hidden, weight, targets, temperature):
    """The step's computation before: logits of every position at once, float32, scaled, then
    log p(target) = logit - logsumexp per row."""
    rows = []
    for h, t in zip(F.linear(hidden, weight), targets, strict=True):
        h = h.float()
        h = h / temperature if temperature != 1.0 else h
        rows.append(h.gather(-1, t[:, None]).squeeze(-1) - torch.logsumexp(h, -1))
    return torch.stack(rows)


@pytest.mark.parametrize("n", [1, 7, 8, 9, 100, 1000])
@pytest.mark.parametrize("per", [1, 8, 33])
def test_chunks_cover_the_tokens_once_and_stay_under_the_bound(n, per):
    vocab = 50
    chunks = hl.chunk_rows(n, vocab, per * 4 * vocab)
    assert chunks[0][0] == 0 and chunks[-1][1] == n
    assert all(a < b for a, b in chunks)
    assert all(chunks[i][1] == chunks[i + 1][0] for i in range(len(chunks) - 1))
    most = max(per, 2 * hl.MIN_CHUNK)
    assert all(b - a <= most for a, b in chunks)
    if n >= hl.MIN_CHUNK:  # no small remainder: every GEMM has at least MIN_CHUNK rows
        assert all(b - a >= hl.MIN_CHUNK for a, b in chunks)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("seed", range(3))
def test_same_log_probs_as_the_unchunked_head_and_gradients_to_rounding(dtype, temperature, seed):
    gen = torch.Generator().manual_seed(seed)
    rows, width = (int(v) for v in torch.randint(2, 12, (2,), generator=gen))
    hidden_size, vocab = 48, int(torch.randint(300, 900, (), generator=gen))
    weight = (torch.randn(vocab, hidden_size, generator=gen) * 0.3).to(dtype)
    hidden = torch.randn(rows, width, hidden_size, generator=gen).to(dtype).requires_grad_()
    targets = torch.randint(0, vocab, (rows, width), generator=gen)
    lengths = torch.randint(1, width + 1, (rows,), generator=gen)
    where = torch.arange(width)[None, :] < lengths[:, None]  # right padding, as the step
    ref_hidden = hidden.detach().clone().requires_grad_()
    ref = _unchunked(ref_hidden, weight, targets, temperature)[where]
    # chunks of 8-20 tokens: several per call, near-equal
    got = hl.head_logps(hidden[where], weight, targets[where], temperature, 4 * vocab * 20)
    assert len(hl.chunk_rows(int(where.sum()), vocab, 4 * vocab * 20)) > 1 or where.sum() < 28
    assert got.dtype == torch.float32
    assert torch.equal(got, ref)
    up = torch.randn(ref.shape, generator=gen)
    got.backward(up)
    ref.backward(up)
    assert hidden.grad.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 2.0**-7
    scale = float(ref_hidden.grad.abs().max())
    assert float((hidden.grad.float() - ref_hidden.grad.float()).abs().max()) <= 2 * tol * scale
    with torch.no_grad():  # without gradients: the same numbers, no graph
        again = hl.head_logps(hidden[where], weight, targets[where], temperature, 4 * vocab * 20)
    assert torch.equal(again, ref.detach()) and not again.requires_grad


def test_gradient_passes_float64_gradcheck():
    gen = torch.Generator().manual_seed(5)
    weight = torch.randn(40, 6, generator=gen, dtype=torch.float64)
    hidden = torch.randn(11, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 40, (11,), generator=gen)
    assert torch.autograd.gradcheck(
        lambda h: hl.head_logps(h, weight, targets, 0.8, 4 * 40 * 3), (hidden,)
    )


def test_a_trainable_head_is_refused():
    w = torch.zeros(5, 3, requires_grad=True)
    with pytest.raises(ValueError, match="frozen head"):
        hl.head_logps(torch.zeros(2, 3), w, torch.zeros(2, dtype=torch.long))


class _Largest(TorchDispatchMode):
    """The largest tensor any op makes with a last dimension of `vocab` (logits-shaped; views,
    such as the transposed head weight, are not new tensors)."""

    def __init__(self, vocab: int):
        super().__init__()
        self.vocab, self.most = vocab, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.is_view:
            return out
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.dim() and t.shape[-1] == self.vocab:
                self.most = max(self.most, t.numel())
        return out


MSGS = [{"role": "user", "content": "Calculate 2 + 3."}]
TEXTS = [
    ("<answer>5</answer>", 1.0),
    ("it is 7, no 8, no 9, or 10; the sum of 2 and 3 is 5, so the answer is 5", -1.0),
    ("5", 1.0),
]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_step_log_probs_are_the_unchunked_ones_with_smaller_logits(
    tiny_qwen, dtype, monkeypatch
):
    """_completion_logps through head_logps against the model's own forward (the head over every
    position): the same log-probs at every completion token, in float32 and bfloat16, the same
    LoRA gradients to rounding; the largest vocabulary-wide tensor of the forward and backward
    is one chunk, where the model's forward makes one for every position of the micro-batch."""
    cfg = Config(model=str(tiny_qwen), lora_r=4, dtype=dtype)
    b = TorchBackend(tiny_qwen, cfg, adapter=f"head_{dtype}", device="cpu", log=lambda m: None)
    b.reset(3)
    with torch.no_grad():  # B off zero: the LoRA gradients all non-zero
        for p in b.params:
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)) * 0.05)
    samples = [
        Sample(MSGS, b.encode_completion(t, finished=True, max_new_tokens=48), a) for t, a in TEXTS
    ]
    (prompt, comp, _), *_ = seqs = b._sequences(samples)
    comps = [c for _, c, _ in seqs]
    vocab = b.lm.get_output_embeddings().weight.shape[0]
    per = 2 * hl.MIN_CHUNK
    monkeypatch.setattr(hl, "CHUNK_BYTES", 4 * vocab * per)
    b._activate()
    b.model.train()
    results = {}
    for chunked in (True, False):
        if not chunked:
            monkeypatch.setattr(b, "_plain_head", lambda: None)
        largest = _Largest(vocab)
        with largest:
            logp, mask = b._completion_logps(b._prefix(prompt), prompt[-1], comps)
            (logp * mask).sum().backward()
        results[chunked] = (logp.detach(), mask, [p.grad.clone() for p in b.params], largest.most)
        b.model.zero_grad(set_to_none=True)
    (got, mask, got_g, got_most), (want, _, want_g, want_most) = results[True], results[False]
    where = mask.bool()
    assert int(where.sum()) > 2 * per  # several chunks
    assert torch.equal(got[where], want[where])
    assert (got[~where] == 0).all()
    tol = 1e-5 if dtype == "float32" else 2e-2
    flat_got, flat_want = (
        torch.cat([g.flatten() for g in got_g]),
        torch.cat([g.flatten() for g in want_g]),
    )
    assert flat_want.abs().sum() > 0
    assert (flat_got - flat_want).norm() <= tol * flat_want.norm()
    assert got_most <= per * vocab < want_most
    assert want_most >= where.numel() * vocab
    b.close()


# One chunk of 64 tokens x a 200,000-token vocabulary: 51 MB of float32 logits, each block above
# glibc's largest mmap threshold, so its pages count in the peak only while it lives. Measured in
# a fresh process: VmHWM is process-wide, and what the tests an xdist worker ran before left in
# the allocator moved it by 20-35 MB.
_PEAK = """
import torch
from sapo_edge.backends import head_logps as hl

def hwm_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024

gen = torch.Generator().manual_seed(3)
vocab, n = 200_000, 64
weight = torch.randn(vocab, 8, generator=gen)
hidden = torch.randn(n, 8, generator=gen).requires_grad_()
targets = torch.randint(0, vocab, (n,), generator=gen)
hl.head_logps(hidden, weight, targets, 1.0, 4 * vocab * n)  # what a first call sets up for good
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")
before = hwm_mb()
hl.head_logps(hidden, weight, targets, 1.0, 4 * vocab * n)
print(hwm_mb() - before)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="Linux's peak RSS reset")
def test_the_log_sum_exp_is_torch_s_with_no_second_copy_of_the_logits():
    gen = torch.Generator().manual_seed(3)
    small = (torch.randn(5 * hl.LSE_ROWS + 3, 3000, generator=gen) * 4).to(torch.bfloat16)
    for logits in (small, small.float()):
        assert torch.equal(hl.logsumexp_rows(logits), torch.logsumexp(logits, -1))
    logits_mb = 4 * 64 * 200_000 / 2**20
    # glibc serves blocks above a threshold it moves at run time (up to 32 MB) from mmap, the
    # rest from its heap, which it keeps: which the chunk's temporaries got varied from process
    # to process and the peak read 48.7, 73.1 or 85.2 MB (the bound is 73.2). A fixed threshold
    # returns every large block when freed: 60.9 MB in every run, 97.6 with torch.logsumexp.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "131072"}
    out = subprocess.run(
        [sys.executable, "-c", _PEAK], capture_output=True, text=True, env=env, check=True
    )
    grew = float(out.stdout.split()[-1])
    # torch.logsumexp over the chunk takes a temporary as large as the logits (~2x in all)
    assert grew < 1.5 * logits_mb, grew
