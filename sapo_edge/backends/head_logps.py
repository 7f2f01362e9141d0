"""log p(target) of the completion tokens from the decoder's hidden states, in chunks of tokens.

The train step needs one number per completion token: its log-probability under the policy.
Run through the model's forward, the LM head makes logits for every position of every row,
padding included ([rows, width, vocabulary]: 151,936 entries a token for Qwen), a float32 copy
of them, and autograd keeps that copy for the backward. Here only the tokens the loss counts go
through the head, a chunk of them at a time (CHUNK_BYTES of float32 logits), and each chunk's
logits are freed before the next: the forward keeps, for the backward, one hidden-sized row a
token, d log p / d hidden up to the incoming gradient's factor:

    d log p_t / d h_t = (onehot(t) - softmax(W h_t / T)) W / T

so the backward is a multiply, not a second pass through the head. The log-probs are the same
numbers as the head over the whole micro-batch (the same GEMM per row, the same float32
log-softmax); the gradient is the same to rounding (the product with W is taken before, not
after, the incoming gradient's factor).
"""

from __future__ import annotations

import torch

from .gemm_rows import linear_rows, mm_rows

CHUNK_BYTES = 32 << 20  # float32 logits per chunk: 55 tokens of Qwen's vocabulary, 170 of SmolLM2's
MIN_CHUNK = 8  # rows per GEMM: fewer can take a BLAS path that rounds differently (M < 4 here)
LSE_ROWS = 16  # rows per log-sum-exp: torch's makes a temporary as large as its input


def chunk_rows(n: int, vocab: int, chunk_bytes: int) -> list[tuple[int, int]]:
    """[start, end) of near-equal chunks covering n tokens, each at most chunk_bytes of float32
    logits (or 2 * MIN_CHUNK rows, if more) and, where n allows, at least MIN_CHUNK rows: no
    small remainder at the end (near-equal chunks of at most `per` rows have at least per / 2)."""
    per = max(2 * MIN_CHUNK, chunk_bytes // (4 * vocab))
    count = max(1, -(-n // per))
    bounds = [round(i * n / count) for i in range(count + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(count) if bounds[i + 1] > bounds[i]]


def _chunk_logps(h, weight, targets, temperature: float):
    """Float32 logits of a chunk (scaled by 1/T), their log-sum-exp, and log p of each target."""
    logits = linear_rows(h, weight)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # float64 stays
    if temperature != 1.0:
        logits = logits / temperature
    lse = logsumexp_rows(logits)
    return logits, lse, logits.gather(-1, targets[:, None]).squeeze(-1) - lse


def logsumexp_rows(logits: torch.Tensor) -> torch.Tensor:
    """torch.logsumexp over the last dimension, LSE_ROWS rows at a time: the same numbers (each
    row's reduction is its own), with a temporary of LSE_ROWS rows instead of a second copy of
    the chunk's logits (25 MB for 128 tokens of SmolLM2's vocabulary, 32 MB for Qwen's chunks)."""
    return torch.cat([torch.logsumexp(part, -1) for part in logits.split(LSE_ROWS)])


def _out_dtype(hidden: torch.Tensor) -> torch.dtype:
    return torch.promote_types(hidden.dtype, torch.float32)


class _HeadLogps(torch.autograd.Function):
    """log p(target) per token from hidden states [tokens, hidden] and a frozen head weight."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature: float, chunk_bytes: int):  # noqa: PLR0913
        out = hidden.new_empty(len(hidden), dtype=_out_dtype(hidden))
        dh = torch.empty_like(hidden)  # (onehot - softmax) W per token: the backward's rows
        for a, b in chunk_rows(len(hidden), weight.shape[0], chunk_bytes):
            logits, lse, out[a:b] = _chunk_logps(hidden[a:b], weight, targets[a:b], temperature)
            # onehot - softmax, in place in the logits: exp(logits - lse), negated, + 1 at the target
            q = logits.sub_(lse[:, None]).exp_().neg_()
            q.scatter_add_(-1, targets[a:b, None], q.new_ones(b - a, 1))
            mm_rows(q.to(weight.dtype), weight, out=dh[a:b])
            del logits, q
        ctx.save_for_backward(dh)
        ctx.temperature = temperature
        return out

    @staticmethod
    def backward(ctx, grad):
        (dh,) = ctx.saved_tensors
        g = (grad / ctx.temperature)[:, None]
        return (dh.float() * g).to(dh.dtype), None, None, None, None


def head_logps(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    chunk_bytes: int | None = None,
) -> torch.Tensor:
    """log p(targets[i]) under softmax(weight @ hidden[i] / temperature), float32 (float64 for
    float64 hidden), one per row
    of hidden [tokens, hidden]; differentiable in hidden (the head weight is frozen). Chunks
    of at most chunk_bytes (CHUNK_BYTES) of float32 logits."""
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    if weight.requires_grad:
        raise ValueError("head_logps takes a frozen head weight (no gradient for it is computed)")
    if torch.is_grad_enabled() and hidden.requires_grad:
        return _HeadLogps.apply(hidden, weight, targets, temperature, chunk_bytes)
    out = hidden.new_empty(len(hidden), dtype=_out_dtype(hidden))
    for a, b in chunk_rows(len(hidden), weight.shape[0], chunk_bytes):
        out[a:b] = _chunk_logps(hidden[a:b], weight, targets[a:b], temperature)[2]
    return out
