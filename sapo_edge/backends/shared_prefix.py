"""A prompt's KV cache computed once per train step and shared by all its micro-batches, with
gradients flowing through it exactly once.

The train step runs the completions of one prompt in micro-batches. Each micro-batch needs the
prompt's keys and values, and the loss depends on them through the LoRA layers, so they carry a
graph. Running the prompt again for every micro-batch costs a forward and backward of the prompt
per micro-batch: at micro-batch 1 and G=8, eight passes of a 46-token prompt for completions of
~65 tokens on average.

Instead the prompt runs once. Each micro-batch gets the prompt's keys and values as detached
leaves, so its backward stops there and adds its share into the leaves' `.grad` (float32 leaves,
so a bfloat16 model's shares add up in float32); after the last micro-batch, `backward()` sends
the summed gradient through the prompt's graph once. The gradient of a sum is the sum of the
gradients, so this is the same update as one pass per micro-batch, to float rounding
(tests/test_training_integrity.py checks it against a full-sequence reference). With LoRA
dropout on, the prompt now draws one dropout mask per step instead of one per micro-batch.

Only caches made of plain full-attention layers are shared this way. Sliding windows, linear
attention or layers that borrow another layer's keys keep transformers' own cache handling: the
prefix then runs again for every micro-batch, as before.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from .torch_decode import kv_cache


class SharedPrefix:
    """All but the last token of a prompt, run once through the decoder (with the graph when
    gradients are on); `cache(m)` hands m rows of it to a micro-batch."""

    def __init__(self, decoder: torch.nn.Module, config, ids: list[int], device) -> None:
        self.decoder, self.config, self.ids, self.device = decoder, config, ids, device
        self.length = len(ids)
        self._graph: list[torch.Tensor] = []
        self._leaves: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._spare: DynamicCache | None = None  # the first run, when it cannot be shared
        self.shared = True
        if not ids:
            return
        cache = self._run()
        if not all(type(layer) is DynamicLayer for layer in cache.layers):
            self.shared, self._spare = False, cache
            return
        self.dtype = cache.layers[0].keys.dtype
        for layer in cache.layers:
            for t in (layer.keys, layer.values):
                self._graph.append(t)
                self._leaves.append(t.detach().float().requires_grad_(t.requires_grad))

    def _run(self) -> DynamicCache:
        cache = DynamicCache(config=self.config)
        ids = torch.tensor([self.ids], device=self.device)
        self.decoder(input_ids=ids, **kv_cache(self.decoder, cache))
        return cache

    def cache(self, rows: int) -> DynamicCache:
        """A fresh cache holding the prefix for `rows` rows (the micro-batch appends to it)."""
        if not self.shared:  # run the prefix again (the first run's cache is used once)
            cache = self._spare if self._spare is not None else self._run()
            self._spare = None
            cache.batch_repeat_interleave(rows)
            return cache
        cache = DynamicCache(config=self.config)
        for i in range(len(self._leaves) // 2):
            k, v = (
                t.to(self.dtype).expand(rows, -1, -1, -1) for t in self._leaves[2 * i : 2 * i + 2]
            )
            cache.update(k, v, i)
        return cache

    def backward(self) -> None:
        """Send the gradient the micro-batches left on the leaves through the prefix's graph,
        then let go of it (call once, after the last micro-batch's backward)."""
        pairs = [
            (t, leaf.grad.to(t.dtype))
            for t, leaf in zip(self._graph, self._leaves, strict=True)
            if t.requires_grad and leaf.grad is not None
        ]
        self._graph, self._leaves = [], []
        if pairs:
            torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])
