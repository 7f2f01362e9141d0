"""No matrix product the app runs has the layout that dies of SIGFPE in torch 2.13.0 on AMX CPUs
(issue 47): bfloat16 `g @ w.T`, a reduction over the vocabulary whose second operand is a
transposed view (g 32 x 49,152, w 576 x 49,152). Every product of a bfloat16 decode and train
step on the tiny model is recorded (shapes, strides, dtype) by a dispatch mode, and so are
bench/workers.py's timed GEMMs; the crashing expression itself is only recorded on meta
tensors, never run."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from sapo_edge.backends.base import Sample  # noqa: E402
from sapo_edge.backends.torch_backend import TorchBackend  # noqa: E402
from sapo_edge.config.settings import Config  # noqa: E402

aten = torch.ops.aten
# products and where their two factors sit in the arguments
PRODUCTS = {aten.mm: (0, 1), aten.bmm: (0, 1), aten.addmm: (1, 2), aten.baddbmm: (1, 2)}
PRODUCTS |= {aten.matmul: (0, 1), aten.mv: (0, 1), aten.addmv: (1, 2), aten.addbmm: (1, 2)}


@dataclass(frozen=True)
class Product:
    op: str
    dtype: torch.dtype
    a: tuple[tuple[int, ...], tuple[int, ...]]  # shape, strides
    b: tuple[tuple[int, ...], tuple[int, ...]]

    @property
    def k(self) -> int:
        """The length of the reduction: a's last dimension."""
        return self.a[0][-1]

    @property
    def b_transposed(self) -> bool:
        """b (k x n) stored column by column: a transposed view of an n x k tensor."""
        shape, stride = self.b
        return len(shape) >= 2 and shape[-1] > 1 and stride[-2] == 1 and stride[-1] != 1


def crash_layout(p: Product, vocab: int) -> bool:
    """The issue's layout: bfloat16, reducing over the vocabulary, b a transposed view."""
    return p.dtype == torch.bfloat16 and p.k == vocab and p.b_transposed


class Record(TorchDispatchMode):
    """Every matrix product dispatched while active (autograd's backward included)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Product] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        where = PRODUCTS.get(func.overloadpacket)
        if where is not None:
            a, b = args[where[0]], args[where[1]]
            self.seen.append(
                Product(
                    str(func), a.dtype, (tuple(a.shape), a.stride()), (tuple(b.shape), b.stride())
                )
            )
        return func(*args, **(kwargs or {}))


def test_the_predicate_names_the_issue_s_crashing_product() -> None:
    """The reproduction's `g @ w.T`, on meta tensors (nothing is computed), has the layout; the
    app's head backward (onehot - softmax) @ W with W [vocab, hidden] as stored has not."""
    d, meta = torch.bfloat16, "meta"
    with Record() as rec:
        torch.empty(32, 49152, dtype=d, device=meta) @ torch.empty(
            576, 49152, dtype=d, device=meta
        ).T
        torch.empty(32, 49152, dtype=d, device=meta) @ torch.empty(49152, 576, dtype=d, device=meta)
    crash, app = rec.seen
    assert crash_layout(crash, 49152) and not crash_layout(app, 49152)


MSGS = [{"role": "user", "content": "Calculate 2 + 3."}]


def test_no_product_of_a_bfloat16_decode_and_train_step_has_the_crashing_layout(tiny_qwen) -> None:
    cfg = Config(model=str(tiny_qwen), dtype="bfloat16", max_new_tokens=8, lora_r=4)
    b = TorchBackend(tiny_qwen, cfg, adapter="layouts", device="cpu", log=lambda m: None)
    try:
        b.reset(3)
        vocab = b.model.get_output_embeddings().weight.shape[0]
        samples = [
            Sample(MSGS, b.encode_completion(t, finished=True, max_new_tokens=8), adv)
            for t, adv in (("<answer>5</answer>", 1.0), ("the answer is 7", -1.0))
        ]
        with Record() as rec:
            b.generate([MSGS], 3, max_new_tokens=8, temperature=1.0, top_p=1.0, seed=0)
            b.logprobs(samples)
            b.train_step(samples)
    finally:
        b.close()
    bf16 = [p for p in rec.seen if p.dtype == torch.bfloat16]
    # the LM head ran both ways: its forward (n = vocab, a transposed view of the stored
    # weight, reducing over the hidden size) and its backward (reducing over the vocabulary)
    head_forward = [p for p in bf16 if p.b[0][-1] == vocab]
    head_backward = [p for p in bf16 if p.k == vocab]
    assert head_forward and all(p.b_transposed and p.k != vocab for p in head_forward)
    assert head_backward and not [p for p in head_backward if p.b_transposed]
    assert not [p for p in rec.seen if crash_layout(p, vocab)]


def test_bench_times_the_layouts_the_model_runs() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from workers import _time_gemms

    vocab, hidden = 96, 16
    with Record() as rec:
        _time_gemms([(32, (hidden, vocab), 1)], torch.bfloat16, backward=True)
    assert [p.k for p in rec.seen] == [hidden, vocab] * 2  # warm, then timed
    forward, backward = rec.seen[:2]
    assert forward.b_transposed and not backward.b_transposed
    assert not [p for p in rec.seen if crash_layout(p, vocab)]
