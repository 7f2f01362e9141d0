"""The MLX train step's loss: per-token log-probs of the completion tokens (the LM head on
those columns only), the advantage-weighted clipped surrogate (DAPO clip-higher) with the
optional k3 KL to the adapter-less base model, normalised over every completion token of the
step; value-and-grad (compiled on the GPU), accumulated over micro-batches, one AdamW update.
The same loss as torch_loss.py, term for term (tests/test_mlx_backend.py checks the parity).

MlxLoss is a mixin of MlxBackend: it runs on the backend's model, LoRA weights, optimizer and
config (backends/mlx_backend.py loads them); generation stays there.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
from mlx.utils import tree_flatten, tree_map
from mlx_lm.tuner.lora import LoRALinear

from ..config.settings import Config
from .base import Sample, StepStats
from .lora_init import step_seed
from .tokens import training_sequences


class MlxLoss:
    """The train step and the log-probs of an MlxBackend (its mixin; it calls the backend's
    _activate, holding its model_lock: the base may be shared by nodes on threads)."""

    # set by MlxBackend.__init__ / reset() / configure()
    cfg: Config
    device: str
    model: nn.Module
    tok: object
    pad_id: int
    lora: dict[str, mx.array]
    optimizer: optim.Optimizer
    seed: int
    model_lock: Any  # the shared base's lock (threading.RLock)
    compile_step: bool

    def _build_step(self) -> None:
        """The loss's value-and-grad; built again by configure(), since a compiled step keeps the
        settings (clip, beta, temperature) it was traced with."""
        self._value_and_grad = nn.value_and_grad(self.model, self._loss)
        if self.compile_step:
            # compiled against the model's state (read at each call, so swapped-in LoRA weights
            # count) and the random state (LoRA dropout); one trace per batch shape. Off by
            # default on CPU, where tracing each new shape costs more than fusion saves.
            state = [self.model.state, mx.random.state]
            self._value_and_grad = mx.compile(self._value_and_grad, inputs=state, outputs=state)

    @contextmanager
    def _adapter_off(self):
        """The base model: every LoRA layer's scale set to 0 for the duration."""
        layers = [m for _, m in self.model.named_modules() if isinstance(m, LoRALinear)]
        scales = [m.scale for m in layers]
        for m in layers:
            m.scale = 0.0
        try:
            yield
        finally:
            for m, s in zip(layers, scales, strict=True):
                m.scale = s

    def _sequences(self, samples: list[Sample]) -> list[tuple[list[int], list[int], float]]:
        return training_sequences(self.tok, samples, self.cfg)

    def _batch(self, seqs) -> tuple[mx.array, ...]:
        """Right-padded prompt+completion rows (positions start at 0 in every row, as in torch)."""
        width = max(len(p) + len(c) for p, c, _ in seqs)
        width_c = max(len(c) for _, c, _ in seqs)
        ids = mx.array([p + c + [self.pad_id] * (width - len(p) - len(c)) for p, c, _ in seqs])
        # hidden state at column len(p)-1+j predicts completion token j
        where = mx.array(
            [[min(len(p) - 1 + j, width - 1) for j in range(width_c)] for p, _, _ in seqs]
        )
        targets = mx.array([c + [self.pad_id] * (width_c - len(c)) for _, c, _ in seqs])
        mask = mx.array([[1.0] * len(c) + [0.0] * (width_c - len(c)) for _, c, _ in seqs])
        adv = mx.array([[a] for _, _, a in seqs], dtype=mx.float32)
        return ids, where, targets, mask, adv

    def _completion_logps(self, ids, where, targets) -> mx.array:
        """Per-token log-probs of the completion tokens only: the LM head runs on those columns."""
        model = self.model
        inner, args = getattr(model, "model", None), getattr(model, "args", None)
        if inner is not None and args is not None:
            h = inner(ids)
            h = mx.take_along_axis(h, where[..., None], axis=1)
            if getattr(args, "tie_word_embeddings", False):
                logits = inner.embed_tokens.as_linear(h)
            else:
                logits = model.lm_head(h)
        else:  # an architecture laid out differently: full logits, then the same columns
            logits = mx.take_along_axis(model(ids), where[..., None], axis=1)
        logits = logits.astype(mx.float32) / self.cfg.temperature
        picked = mx.take_along_axis(logits, targets[..., None], axis=-1).squeeze(-1)
        return picked - mx.logsumexp(logits, axis=-1)

    def _loss(self, ids, where, targets, mask, adv, ref, total):
        cfg = self.cfg
        logp = self._completion_logps(ids, where, targets)
        # advantage-weighted clipped surrogate (DAPO clip-higher); old policy = this policy
        ratio = mx.exp(logp - mx.stop_gradient(logp))
        clipped_ratio = mx.clip(ratio, 1 - cfg.clip_low, 1 + cfg.clip_high)
        per_token = -mx.minimum(ratio * adv, clipped_ratio * adv)
        if cfg.beta > 0:  # k3 KL to the adapter-less base model
            per_token = per_token + cfg.beta * (mx.exp(ref - logp) - (ref - logp) - 1)
        # token-level normalisation over every completion token of the step (DAPO)
        loss = (per_token * mask).sum() / total
        clipped = ((ratio < 1 - cfg.clip_low) & (adv < 0)) | (
            (ratio > 1 + cfg.clip_high) & (adv > 0)
        )
        return loss, (clipped * mask).sum()

    def logprobs(self, samples: list[Sample]) -> list[list[float]]:
        """Per-token log-probs of each sample's completion under this node's policy (input order)."""
        with self.model_lock:
            return self._logprobs(samples)

    def _logprobs(self, samples: list[Sample]) -> list[list[float]]:
        self._activate()
        self.model.eval()
        out = []
        for s in samples:
            seqs = self._sequences([s])
            if not seqs:  # nothing to score: an empty unfinished completion
                out.append([])
                continue
            ids, where, targets, _, _ = self._batch(seqs)
            out.append(self._completion_logps(ids, where, targets)[0].tolist())
        return out

    def train_step(self, samples: list[Sample], progress=None) -> StepStats:
        """Micro-batched gradient accumulation; micro-batches before the last are evaluated to
        bound memory, the last one's forward/backward and the AdamW update share one mx.eval."""
        with self.model_lock:  # this node's weights stay in the shared model for the step
            return self._train_step(samples, progress)

    def _train_step(self, samples: list[Sample], progress=None) -> StepStats:
        t0 = time.perf_counter()
        self._activate()
        cfg = self.cfg
        seqs = self._sequences(samples)
        # token-level normaliser over every completion of the step, zero-advantage ones included
        total_tokens = sum(len(c) for _, c, _ in seqs)
        # at beta=0 a zero-advantage row adds exactly 0 to the loss and its gradient: no forward pass
        work = [row for row in seqs if row[2] != 0.0 or cfg.beta > 0]
        if not work:
            return StepStats(0.0, len(seqs), total_tokens, 0.0, 0.0, time.perf_counter() - t0)
        if cfg.lora_dropout > 0:  # the dropout masks of step k are the same after a resume
            mx.random.seed(step_seed(self.seed, int(self.optimizer.state.get("step", 0))))
        self.model.train()
        grads, loss_sum, clip_sum = None, mx.array(0.0), mx.array(0.0)
        size = cfg.micro_batch(self.device)
        starts = range(0, len(work), size)
        for k, i in enumerate(starts):
            if progress is not None:  # may raise to abandon the step (a stop request)
                progress(k, len(starts))
            ids, where, targets, mask, adv = self._batch(work[i : i + size])
            ref = mx.zeros(mask.shape)
            if cfg.beta > 0:
                with self._adapter_off():
                    ref = mx.stop_gradient(self._completion_logps(ids, where, targets))
                    mx.eval(ref)
            (loss, clipped), g = self._value_and_grad(
                ids, where, targets, mask, adv, ref, mx.array(float(total_tokens))
            )
            grads = g if grads is None else tree_map(mx.add, grads, g)
            loss_sum, clip_sum = loss_sum + loss, clip_sum + clipped
            if i != starts[-1]:
                mx.eval(grads, loss_sum, clip_sum)
        grad_norm = mx.array(0.0)
        if cfg.max_grad_norm > 0:
            grads, grad_norm = optim.clip_grad_norm(grads, cfg.max_grad_norm)
        self.optimizer.update(self.model, grads)
        mx.eval(
            self.model.trainable_parameters(), self.optimizer.state, loss_sum, clip_sum, grad_norm
        )
        self.lora = dict(tree_flatten(self.model.trainable_parameters()))
        self.model.eval()
        return StepStats(
            loss_sum.item(),
            len(seqs),
            total_tokens,
            clip_sum.item() / max(total_tokens, 1),
            grad_norm.item(),
            time.perf_counter() - t0,
        )
