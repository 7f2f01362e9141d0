"""A prompt's KV cache computed once per train step and shared by all its micro-batches, with
gradients flowing through it exactly once.

The train step runs the completions of one prompt in micro-batches. Each micro-batch needs the
prompt's keys and values, and the loss depends on them through the LoRA layers, so they carry a
graph. Running the prompt again for every micro-batch costs a forward and backward of the prompt
per micro-batch: at micro-batch 1 and G=8, eight passes of a 46-token prompt for completions of
~65 tokens on average.

Instead the prompt runs once. Each micro-batch gets the prompt's keys and values as detached
leaves, so its backward stops there and adds its share into the leaves' `.grad`; after the last
micro-batch, `backward()` sends the summed gradient through the prompt's graph once. The
gradient of a sum is the sum of the gradients, so this is the same update as one pass per
micro-batch, to float rounding (tests/test_training_integrity.py checks it against a
full-sequence reference).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from .torch_decode import kv_cache


def _layers_kv(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's (keys, values) of a filled DynamicCache (transformers >= 4.56 keeps them in
    `layers`, older releases in `key_cache` / `value_cache`)."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return [(layer.keys, layer.values) for layer in layers]
    return list(zip(cache.key_cache, cache.value_cache, strict=True))


class SharedPrefix:
    """All but the last token of a prompt, run once through the decoder (with the graph when
    gradients are on); `cache(m)` hands m rows of it to a micro-batch."""

    def __init__(self, decoder: torch.nn.Module, config, ids: list[int], device) -> None:
        self.config, self.length = config, len(ids)
        self._graph: list[torch.Tensor] = []
        self._leaves: list[tuple[torch.Tensor, torch.Tensor]] = []
        if not ids:
            return
        cache = DynamicCache(config=config)
        decoder(input_ids=torch.tensor([ids], device=device), **kv_cache(decoder, cache))
        for k, v in _layers_kv(cache):
            self._graph += [k, v]
            self._leaves.append(
                (
                    k.detach().requires_grad_(k.requires_grad),
                    v.detach().requires_grad_(v.requires_grad),
                )
            )

    def cache(self, rows: int) -> DynamicCache:
        """A fresh cache holding the prefix for `rows` rows (the micro-batch appends to it)."""
        cache = DynamicCache(config=self.config)
        for i, (k, v) in enumerate(self._leaves):
            cache.update(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1), i)
        return cache

    def backward(self) -> None:
        """Send the gradient the micro-batches left on the leaves through the prefix's graph,
        then let go of it (call once, after the last micro-batch's backward)."""
        pairs = [
            (t, leaf.grad)
            for t, leaf in zip(self._graph, (x for kv in self._leaves for x in kv), strict=True)
            if t.requires_grad and leaf.grad is not None
        ]
        self._graph, self._leaves = [], []
        if pairs:
            torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])
