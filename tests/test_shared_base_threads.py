"""Two nodes of one process share one base model and may step on two threads (held_setting.py
assumes it). A torch train step swaps the shared model's LoRA layers and gated MLPs for lean ones
(merged_lora, lean_gated_mlps) and sets the active adapter and train mode, all model-wide: a
second node's step inside the first one's wrapped the first's wrapper and crashed
(`'_LeanGatedMlp' object has no attribute 'gate_proj'`); under MLX the second node's weights,
swapped into the shared model, were trained and kept by the first. Generation, log-probs and
steps on a shared base take its lock now. Deterministic: the first step holds still inside its
swap (at its first micro-batch) until the second has stepped or is waiting for the lock."""

from __future__ import annotations

import threading

import pytest
from test_torch_backend import MSGS, _backend, _good_bad

from sapo_edge.backends import torch_backend

WAIT = 60.0


class _Noticing:
    """A lock that says when someone had to wait for it (so the test knows the second node is
    queued behind the first, without guessing how long that takes)."""

    def __init__(self, inner) -> None:
        self.inner, self.waited = inner, threading.Event()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self.inner.acquire(blocking=False):
            return True
        self.waited.set()
        return self.inner.acquire(blocking, timeout)

    def release(self) -> None:
        self.inner.release()

    __enter__ = acquire

    def __exit__(self, *exc) -> None:
        self.release()


def _nodes(kind: str, tiny_qwen, *names: str) -> list:
    if kind == "torch":
        made = [_backend(tiny_qwen, n) for n in names]
        shared = next(s for s in torch_backend._SHARED.bases.values() if s.model is made[0].model)
    else:
        pytest.importorskip("mlx_lm", reason="mlx-lm is not installed")
        from test_mlx_backend import _mlx

        made = [_mlx(tiny_qwen, n) for n in names]
        shared = made[0].shared
    for seed, n in enumerate(made):
        n.reset(seed % 2)
    return [shared, *made]


def _total(b) -> list[float]:
    return [round(sum(t), 4) for t in b.logprobs(_good_bad(b))]


@pytest.mark.parametrize("kind", ["torch", "mlx"])
def test_two_nodes_sharing_a_base_step_on_two_threads(kind, tiny_qwen) -> None:
    shared, a, b, ref_a, ref_b = _nodes(kind, tiny_qwen, "left", "right", "lone-l", "lone-r")
    try:
        ref_a.train_step(_good_bad(ref_a))  # what each one's step makes, alone
        ref_b.train_step(_good_bad(ref_b))
        lock = getattr(shared, "lock", None)  # (none before the fix: b never waits)
        noticing = _Noticing(lock) if lock is not None else None
        if noticing is not None:
            shared.lock = noticing
            for n in (a, b):
                n.model_lock = noticing
        b_done, errors = threading.Event(), {}

        def hold(k: int, _count: int) -> None:  # a, inside its step: b steps (or queues) first
            waits = [b_done] + ([noticing.waited] if noticing is not None else [])
            for _ in range(int(WAIT * 20)):
                if k or any(e.is_set() for e in waits):
                    return
                threading.Event().wait(0.05)

        def run(name: str, node, progress=None, done: threading.Event | None = None) -> None:
            try:
                node.train_step(_good_bad(node), progress)
                node.generate([MSGS], 2, max_new_tokens=4, temperature=1.0, top_p=1.0, seed=1)
            except Exception as e:  # noqa: BLE001 - what the test reports
                errors[name] = e
            finally:
                if done is not None:
                    done.set()

        threads = [
            threading.Thread(target=run, args=("left", a, hold)),
            threading.Thread(target=run, args=("right", b, None, b_done)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT * 3)
        assert not any(t.is_alive() for t in threads)
        assert errors == {}, errors
        assert _total(a) == _total(ref_a) and _total(b) == _total(ref_b)  # each its own step
    finally:
        for n in (a, b, ref_a, ref_b):
            n.close()
