"""Decoding with a static KV cache, each step replayed as one CUDA graph on a GPU.

On a GPU the decode loop is launch-bound: a step of Qwen2.5-0.5B is ~1,750 small kernels, and
launching them took 600-750 ms of CPU per 16 steps against 120-140 ms of GPU work (H100,
docs/cuda.md). A CUDA graph launches a captured step at once, but it needs every shape and
address fixed: here the KV cache is allocated once for the call's whole length and written at a
position held in a device tensor, the attention mask is computed inside the step from that
position, and finished rows stay in the batch (their tokens are dropped). The CPU keeps
torch_decode's growing cache and shrinking batch (CUDA graphs are GPU-only, and there the
smaller batch is what saves time).

Same tokens as the growing path for the same seed, to float rounding: the same prefill, the
same per-row positions and masks, and only the rows still running are sampled, in the same order,
so the random stream is consumed exactly as there (tests/test_static_decode.py checks the two on
the CPU, where the step runs without capture; bench/cuda_check.py checks the graph on a GPU).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from .torch_decode import kv_cache


class _StaticLayer(DynamicLayer):
    """A layer's keys and values in buffers of the call's whole length, written in place at the
    positions `where.at` holds (a device tensor: a graph replays the write at the new position);
    the whole buffer is handed to attention, whose mask hides what is not written yet."""

    def __init__(self, where: _Where, capacity: int):
        super().__init__()
        self.where, self.capacity, self.length = where, capacity, 0

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.dtype, self.device = key_states.dtype, key_states.device
            self.is_initialized = True
            b, h, _, d = key_states.shape
            self.keys = key_states.new_zeros(b, h, self.capacity, d)
            self.values = value_states.new_zeros(b, h, self.capacity, d)
        self.keys.index_copy_(2, self.where.at, key_states)
        self.values.index_copy_(2, self.where.at, value_states)
        if not self.length:
            self.length = key_states.shape[-2]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        """The prompt's length, not counting decode steps: every position and mask is given to
        the model, and a number that changed each step would make a compiled step recompile."""
        return self.length

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.is_initialized:
            self.keys = self.keys.repeat_interleave(repeats, 0)
            self.values = self.values.repeat_interleave(repeats, 0)


class _Where:
    """Where the next keys and values go: positions as a device tensor."""

    def __init__(self, at: torch.Tensor):
        self.at = at


def static_cache(config, where: _Where, capacity: int) -> DynamicCache | None:
    """A cache of static layers, or None for a model with other layer kinds (sliding windows)."""
    cache = DynamicCache(config=config)
    if not cache.layers or not all(type(layer) is DynamicLayer for layer in cache.layers):
        return None
    cache.layers = [_StaticLayer(where, capacity) for _ in cache.layers]
    return cache


class StaticDecoder:
    """One generate() call's decode loop on a static cache: prefill, then `step()` per token,
    eager or (graph=True, on CUDA) replayed from a captured CUDA graph."""

    def __init__(self, model, lm, ids, mask, pos, n: int, max_new_tokens: int):
        width = ids.shape[1]
        self.model, self.width = model, width
        self.capacity = width + max_new_tokens
        device = ids.device
        self.where = _Where(torch.arange(width - 1, device=device))
        self.cache = static_cache(lm.config, self.where, self.capacity)
        if self.cache is None:
            raise NotImplementedError("a static cache needs every layer to attend in full")
        self.cache_kw = kv_cache(lm, self.cache)
        prompt_keep = mask.bool()
        if width > 1:  # all but the last prompt token, once per prompt
            decoder = lm.get_decoder()
            keep = self._mask(prompt_keep[:, :-1], width - 1)
            decoder(
                input_ids=ids[:, :-1],
                attention_mask=keep,
                position_ids=pos[:, :-1],
                **kv_cache(decoder, self.cache),
            )
            self.cache.batch_repeat_interleave(n)
        # the step's inputs and output live at fixed addresses (a graph reads and writes them)
        self.cur = ids[:, -1:].repeat_interleave(n, 0).contiguous()
        self.pos = pos[:, -1:].repeat_interleave(n, 0).contiguous()
        self.where.at = torch.full((1,), width - 1, dtype=torch.long, device=device)
        rows = len(self.cur)
        after = torch.ones(rows, max_new_tokens, dtype=torch.bool, device=device)
        self.base_keep = torch.cat([prompt_keep.repeat_interleave(n, 0), after], 1)
        self.columns = torch.arange(self.capacity, device=device)
        self.live = torch.arange(rows, device=device)  # the rows still running, in order
        self.nxt = torch.zeros(rows, dtype=torch.long, device=device)
        self.logits: torch.Tensor | None = None
        self.graph = None

    def _mask(self, keep: torch.Tensor, q: int) -> torch.Tensor:
        """The prefill's 4-D mask: causal over the prompt, padding hidden, the rest of the
        buffer hidden. A padding position sees itself, so that no query row is masked whole
        (its output would be NaN, and later layers' keys and values there with it); no real
        position ever sees a padding one."""
        b, w = keep.shape
        eye = torch.eye(q, w, dtype=torch.bool, device=keep.device)
        causal = torch.ones(q, w, dtype=torch.bool, device=keep.device).tril()
        full = torch.zeros(b, 1, q, self.capacity, dtype=torch.bool, device=keep.device)
        full[:, 0, :, :w] = (causal[None] & keep[:, None, :]) | eye[None]
        return full

    def step(self) -> torch.Tensor:
        """One token for every row from `cur` at `pos`, written at `where.at`: float32 logits."""
        keep = self.base_keep & (self.columns <= self.where.at)
        logits = self.model(
            input_ids=self.cur,
            attention_mask=keep[:, None, None, :],
            position_ids=self.pos,
            **self.cache_kw,
        ).logits[:, -1]
        return logits.float()

    def capture(self) -> None:
        """Record step() as a CUDA graph; its output is `self.logits`. The warm-up steps write
        the same keys and values at the same position as the first real step will."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self.step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.logits = self.step()
        self.graph = graph

    def capture_or_say(self, log: Callable[[str], None]) -> None:
        """capture() on a CUDA device; where capture fails (an op that syncs with the host),
        say so once and run the same step eagerly."""
        if self.cur.device.type != "cuda":
            return
        try:
            self.capture()
        except RuntimeError as e:
            first = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
            _say_once(log, f"CUDA graph capture failed ({first}): decoding without it")
            self.graph, self.logits = None, None

    def run(self) -> torch.Tensor:
        """float32 logits of the next token, one row per running completion."""
        if self.graph is None:
            logits = self.step()
        else:
            self.graph.replay()
            logits = self.logits
        return logits.index_select(0, self.live)

    def drop(self, keep: torch.Tensor) -> None:
        """Only the rows `keep` (indices into the running ones) go on; the others stay in the
        batch, computed and ignored."""
        self.live = self.live[keep]

    def advance(self, tok: torch.Tensor) -> None:
        """The next step's inputs: each running row's new token, one position on."""
        self.nxt.index_copy_(0, self.live, tok)
        self.cur.copy_(self.nxt[:, None])
        self.pos.add_(1)
        self.where.at.add_(1)


_SAID: set[str] = set()


def _say_once(log: Callable[[str], None], text: str) -> None:
    if text not in _SAID:
        _SAID.add(text)
        log(text)
