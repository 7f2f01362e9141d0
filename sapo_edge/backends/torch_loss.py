"""The torch train step's loss: per-token log-probs of the completions on each prompt's shared
prefix (shared_prefix.py) through the LM head in chunks (head_logps.py), the advantage-weighted
clipped surrogate (DAPO clip-higher) with the optional k3 KL to the base model, normalised over
every completion token of the step and accumulated over micro-batches; then one AdamW step.

TorchLoss is a mixin of TorchBackend: it runs on the backend's model, adapter, optimizer and
config (backends/torch_backend.py loads them); generation stays there.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from peft import PeftModel

from ..config.settings import Config
from .attention_kernels import attention_kernels
from .base import Sample, StepStats
from .gated_mlp import lean_gated_mlps
from .head_logps import head_logps
from .heap import returned_heap
from .lora_init import step_seed
from .shared_prefix import SharedPrefix
from .tokens import training_sequences
from .torch_decode import LeanLora, kv_cache, merged_lora

# model types whose CausalLM forward computes logits as lm_head(hidden) and nothing more
_PLAIN_HEAD_MODELS = frozenset({"llama", "qwen2", "qwen3", "mistral"})


class TorchLoss:
    """The train step and the log-probs of a TorchBackend (its mixin; it calls the backend's
    _activate and _pace, and holds its model_lock: the base may be shared by nodes on threads)."""

    # set by TorchBackend.__init__ / reset() / configure()
    cfg: Config
    device: str
    adapter: str
    model: PeftModel
    lm: torch.nn.Module  # the transformers model under the LoRA layers
    tok: object
    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    seed: int
    fuse_lora: bool
    model_lock: Any  # the shared base's lock (threading.RLock)

    def _sequences(self, samples: list[Sample]) -> list[tuple[list[int], list[int], float]]:
        return training_sequences(self.tok, samples, self.cfg)

    def _by_prompt(self, seqs: list) -> list[tuple[list[int], list[list]]]:
        """Rows grouped by prompt, each group cut into micro-batches of at most
        cfg.micro_batch(device) rows: one forward pass each, all sharing the prompt's prefix."""
        by_prompt: dict[tuple[int, ...], list] = {}
        for row in seqs:
            by_prompt.setdefault(tuple(row[0]), []).append(row)
        size = self.cfg.micro_batch(self.device)
        return [
            (list(prompt), [rows[i : i + size] for i in range(0, len(rows), size)])
            for prompt, rows in by_prompt.items()
        ]

    def _prefix(self, prompt: list[int]) -> SharedPrefix:
        """All but the prompt's last token, run once for all its micro-batches (shared_prefix.py)."""
        return SharedPrefix(self.lm.get_decoder(), self.model.config, prompt[:-1], self.device)

    def _completion_logps(
        self, prefix: SharedPrefix, last_token: int, comps: list[list[int]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token log-probs of completions of one prompt: each row runs the prompt's last
        token and its completion on the shared prefix's KV cache, with logits for completion
        tokens only, padding left out, a chunk of tokens at a time (head_logps.py); 0 at the
        padding. (Logits of the prompt's last position on their own, a [1, 1, hidden] slice
        of a longer sequence, took a slow path through the LM head in bfloat16 on the CPU: ~0.4 s
        a micro-batch.) A model whose head is more than a plain Linear goes through its forward."""
        m, width = len(comps), max(len(c) for c in comps)
        pad = self.tok.pad_token_id
        comp = torch.tensor([c + [pad] * (width - len(c)) for c in comps], device=self.device)
        cmask = torch.tensor(
            [[1] * len(c) + [0] * (width - len(c)) for c in comps], device=self.device
        )
        n = prefix.length
        last = torch.full((m, 1), last_token, device=self.device, dtype=comp.dtype)
        inputs = {
            "input_ids": torch.cat([last, comp[:, :-1]], 1),
            "attention_mask": torch.cat([cmask.new_ones(m, n + 1), cmask[:, :-1]], 1),
            "position_ids": torch.arange(n, n + width, device=self.device).expand(m, -1),
        }
        head = self._plain_head()
        if head is None:
            logits = self.model(**inputs, **kv_cache(self.lm, prefix.cache(m))).logits
            return self._token_logps(logits, comp), cmask.float()
        decoder = self.lm.get_decoder()
        hidden = decoder(**inputs, **kv_cache(decoder, prefix.cache(m))).last_hidden_state
        where = cmask.bool()
        logp = head_logps(hidden[where], head.weight, comp[where], self.cfg.temperature)
        return logp.new_zeros(m, width).masked_scatter(where, logp), cmask.float()

    def _plain_head(self) -> torch.nn.Linear | None:
        """The LM head where the model's logits are just head(hidden) (no bias, softcap or scale
        in its forward; frozen, LoRA off it): head_logps can stand in for it."""
        head = self.lm.get_output_embeddings()
        plain = getattr(self.model.config, "model_type", None) in _PLAIN_HEAD_MODELS
        if plain and type(head) is torch.nn.Linear and head.bias is None:
            return None if head.weight.requires_grad else head
        return None

    def _scaled(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits in float32, divided by the sampling temperature (no copy at 1.0 in fp32)."""
        logits = logits.float()
        return logits / self.cfg.temperature if self.cfg.temperature != 1.0 else logits

    def _token_logps(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """log p(target) per position from the model's logits: a selective log-softmax, one row
        at a time (models without a plain head; tests/test_head_logps.py compares against it)."""
        rows = []
        for row_logits, row_targets in zip(logits, targets, strict=True):
            row_logits = self._scaled(row_logits)
            rows.append(
                row_logits.gather(-1, row_targets[:, None]).squeeze(-1)
                - torch.logsumexp(row_logits, -1)
            )
        return torch.stack(rows)

    @torch.no_grad()
    def logprobs(self, samples: list[Sample]) -> list[list[float]]:
        """Per-token log-probs of each sample's completion under this node's policy (input order)."""
        seqs = [(*row, i) for i, s in enumerate(samples) for row in self._sequences([s])]
        out: list[list[float]] = [[] for _ in samples]
        with self.model_lock, attention_kernels(self.device):
            self._activate()
            for prompt, batches in self._by_prompt(seqs):
                prefix = self._prefix(prompt)
                for mb in batches:
                    logp, _ = self._completion_logps(prefix, prompt[-1], [c for _, c, _, _ in mb])
                    for (_, c, _, i), row in zip(mb, logp, strict=True):
                        out[i] = row[: len(c)].tolist()
        return out

    def train_step(self, samples: list[Sample], progress=None) -> StepStats:
        with self.model_lock:  # the step changes the shared model for its duration (see below)
            return self._train_step(samples, progress)

    def _train_step(self, samples: list[Sample], progress=None) -> StepStats:
        t0 = time.perf_counter()
        self._activate(train=True)
        self.optimizer.zero_grad(set_to_none=True)  # nothing left over from an abandoned step
        cfg = self.cfg
        seqs = self._sequences(samples)
        # token-level normaliser over every completion of the step, zero-advantage ones included
        total_tokens = sum(len(c) for _, c, _ in seqs)
        # at beta=0 a zero-advantage row adds exactly 0 to the loss and its gradient: no forward pass
        work = [row for row in seqs if row[2] != 0.0 or cfg.beta > 0]
        dev = torch.device(self.device)
        fork = {"devices": [dev.index or 0], "device_type": dev.type} if dev.type != "cpu" else {}
        # on the CPU the step's freed activations go back to the OS as it runs (heap.py)
        with returned_heap(dev.type == "cpu"):
            with torch.random.fork_rng(**{"devices": [], **fork}, enabled=cfg.lora_dropout > 0):
                if cfg.lora_dropout > 0:  # the dropout masks of step k are the same after a resume
                    torch.manual_seed(step_seed(self.seed, self._steps_taken()))
                # LoRA as one op per layer (lora_fused.py), where peft's own layer is not needed:
                # its dropout, or its adapter switched off for the beta > 0 reference; and each
                # gated MLP keeping half its activations for the backward (gated_mlp.py)
                fused = self.fuse_lora and cfg.lora_dropout == 0 and cfg.beta == 0
                with (
                    attention_kernels(self.device),
                    merged_lora(self.model, self.adapter, fused, lean=True),
                    lean_gated_mlps(self.model, LeanLora, fused),
                ):
                    loss_sum, clipped = self._accumulate(work, total_tokens, progress)
            grad_norm = 0.0
            if work:
                if cfg.max_grad_norm > 0:
                    grad_norm = float(
                        torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
                    )
                self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        self.model.eval()
        return StepStats(
            loss_sum,
            len(seqs),
            total_tokens,
            clipped / max(total_tokens, 1),
            grad_norm,
            time.perf_counter() - t0,
        )

    def _steps_taken(self) -> int:
        state = self.optimizer.state.get(self.params[0], {}) if self.params else {}
        return int(state.get("step", 0))

    def _accumulate(self, seqs: list, total_tokens: int, progress=None) -> tuple[float, float]:
        """Forward and backward of every micro-batch; gradients add up in the LoRA parameters.
        Each prompt's prefix runs once; its gradient goes through it after its last micro-batch."""
        cfg = self.cfg
        loss_sum, clipped = 0.0, 0.0
        groups = self._by_prompt(seqs)
        count, k = sum(len(batches) for _, batches in groups), 0
        for prompt, batches in groups:
            prefix, ref_prefix = self._prefix(prompt), None
            for mb in batches:
                if progress is not None:  # may raise to abandon the step (a stop request)
                    progress(k, count)
                self._pace()
                k += 1
                comps = [c for _, c, _ in mb]
                logp, mask = self._completion_logps(prefix, prompt[-1], comps)
                adv = torch.tensor([a for _, _, a in mb], device=self.device)[:, None]
                # 4. advantage-weighted clipped surrogate (DAPO clip-higher); old policy = this
                #    policy, so old log-probs are the detached current ones: no second forward pass.
                ratio = torch.exp(logp - logp.detach())
                clipped_ratio = ratio.clamp(1 - cfg.clip_low, 1 + cfg.clip_high)
                per_token = -torch.min(ratio * adv, clipped_ratio * adv)
                if cfg.beta > 0:  # k3 KL to the base model = this model with the adapter off
                    with torch.no_grad(), self.model.disable_adapter():
                        ref_prefix = ref_prefix or self._prefix(prompt)
                        ref, _ = self._completion_logps(ref_prefix, prompt[-1], comps)
                    per_token = per_token + cfg.beta * (torch.exp(ref - logp) - (ref - logp) - 1)
                # 5. token-level normalisation over every completion token of the step (DAPO)
                loss = (per_token * mask).sum() / max(total_tokens, 1)
                loss.backward()
                loss_sum += loss.item()
                clipped += (
                    (
                        ((ratio < 1 - cfg.clip_low) & (adv < 0))
                        | ((ratio > 1 + cfg.clip_high) & (adv > 0))
                    )
                    .float()
                    .mul(mask)
                    .sum()
                    .item()
                )
            prefix.backward()
        return loss_sum, clipped
