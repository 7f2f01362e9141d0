"""PyTorch backend (CUDA, MPS or CPU): batched KV-cache generation and the LoRA GRPO/DAPO step.

Nodes in one process that load the same model directory share one copy of the base weights;
each node owns a named peft LoRA adapter and its own AdamW optimizer.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from peft import (
    LoraConfig,
    PeftModel,
    get_peft_model,
    get_peft_model_state_dict,
    set_peft_model_state_dict,
)
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from ..config import Config
from .base import Completion, Sample, StepStats, check_load_time_settings, peak_rss_mb
from .cpu_dtype import choose_cpu_dtype
from .cpu_threads import cpu_threads, set_threads
from .head_logps import head_logps
from .heap import returned_heap
from .lora_init import lora_a_init, step_seed
from .shared_prefix import SharedPrefix
from .tokens import (
    encode_completion,
    end_tokens,
    prompt_ids,
    sampled_completion,
    training_sequences,
)
from .torch_decode import growing_cache, kv_cache, merged_lora, sample

ADAPTER_FILE = "adapter.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
OPTIMIZER_FILE = "optimizer.pt"


@dataclass
class _SharedBase:
    model: PeftModel
    tokenizer: object
    adapters: set[str] = field(default_factory=set)


hf_logging.disable_progress_bar()  # one line per round, not weight-loading bars
warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)

_SHARED: dict[tuple[str, str, str], _SharedBase] = {}
# model types whose CausalLM forward computes logits as lm_head(hidden) and nothing more
_PLAIN_HEAD_MODELS = frozenset({"llama", "qwen2", "qwen3", "mistral"})


def lora_config(cfg: Config) -> LoraConfig:
    """The peft LoRA settings of a Config (rank, alpha, dropout, target projections)."""
    return LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=list(cfg.lora_targets),
        task_type="CAUSAL_LM",
    )


def resolve_dtype(dtype: str, device: str, log: Callable[[str], None] = print) -> torch.dtype:
    """auto: bfloat16 on CUDA GPUs that support it; on the CPU bfloat16 where it is native and
    measured faster (cpu_dtype.py); float32 elsewhere."""
    if dtype == "auto":
        if device == "cpu":
            return choose_cpu_dtype(log=log)
        cuda_bf16 = device.startswith("cuda") and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if cuda_bf16 else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


class TorchBackend:
    name = "torch"

    def __init__(
        self,
        model_dir: Path,
        cfg: Config,
        *,
        adapter: str,
        device: str,
        log: Callable[[str], None] = print,
    ):
        self.cfg, self.device = cfg, device
        # peft keeps adapters as module attributes: a prefix keeps a node named "train" or
        # "eval" from colliding with nn.Module's own attributes
        self.adapter = adapter = f"node_{adapter}"
        torch_dtype = resolve_dtype(cfg.dtype, device, log)
        self.dtype = str(torch_dtype).removeprefix("torch.")
        lora = lora_config(cfg)
        key = (str(Path(model_dir).resolve()), device, self.dtype)
        shared = _SHARED.get(key)
        try:
            if shared is None:
                tok = AutoTokenizer.from_pretrained(model_dir)
                if not tok.chat_template:
                    raise ValueError(
                        f"model in {model_dir} has no chat template: use an instruct/chat model."
                    )
                tok.padding_side = "left"
                if tok.pad_token_id is None:
                    tok.pad_token = tok.eos_token
                base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch_dtype).to(device)
                shared = _SharedBase(get_peft_model(base, lora, adapter_name=adapter), tok)
                _SHARED[key] = shared
                log(f"loaded {model_dir} on {device} as {self.dtype}")
            elif adapter in shared.adapters:
                raise ValueError(
                    f"two nodes named {adapter.removeprefix('node_')!r} in one process: give each node its own name."
                )
            else:
                shared.model.add_adapter(adapter, lora)
        except ValueError as e:
            if "Target modules" in str(e):
                raise ValueError(
                    f"lora_targets {cfg.lora_targets} match no module of this model: {e}"
                ) from None
            raise
        shared.adapters.add(adapter)
        self.model, self.tok = shared.model, shared.tokenizer
        self.lm = self.model.get_base_model()  # the transformers model under the LoRA layers
        self.params = [
            p for n, p in self.model.named_parameters() if "lora_" in n and f".{adapter}." in n
        ]
        for p in self.params:
            p.requires_grad_(True)
        self.optimizer = self._new_optimizer()
        self.seed = 0  # the dropout stream's seed; reset() sets it
        # LoRA swapped for torch_decode's fast layers while sampling and in the train step
        self.fuse_lora = True
        # float32 lean too: a merged copy of the projections (425 MB for a 135M model, ~1.4 GB
        # for Qwen2.5-0.5B) would buy ~10% tokens/s; False merges (bench/rss_phases.py --merged)
        self.lean_lora = True
        gen_eos = getattr(self.model.base_model.model.generation_config, "eos_token_id", None)
        # stop on any eos id; close a peer's finished completion with the template's end of turn
        self.eos_ids, self.eot_id = end_tokens(self.tok, gen_eos)
        self.threads = cpu_threads(cfg.threads, log) if device == "cpu" else None
        self.log = log

    # ----------------------------------------------------------------------------- helpers
    def _new_optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.params, lr=self.cfg.learning_rate, weight_decay=0.0)

    def reset(self, seed: int) -> None:
        """Fresh LoRA weights drawn from seed (lora_init.py: torch and MLX draw the same ones)
        and a fresh optimizer."""
        tag = f".{self.adapter}."
        with torch.no_grad():
            for name, p in self.model.named_parameters():
                if "lora_" not in name or tag not in name:
                    continue
                if ".lora_A." in name:
                    peft_name = name.replace(tag, ".")
                    init = lora_a_init(peft_name, p.shape[0], p.shape[1], seed)
                    p.copy_(torch.from_numpy(init).to(p.dtype))
                else:
                    p.zero_()
        self.optimizer = self._new_optimizer()
        self.seed = seed

    def configure(self, cfg: Config) -> None:
        """New run-time settings from the next call (learning rate, clipping, beta, temperature,
        micro-batch size, prompt length, threads); LoRA shape, dtype and model need a restart."""
        check_load_time_settings(self.cfg, cfg)
        if cfg.threads != self.cfg.threads and self.device == "cpu":
            self.threads = cpu_threads(cfg.threads, lambda _m: None, fresh=True)
        self.cfg = cfg
        for group in self.optimizer.param_groups:
            group["lr"] = cfg.learning_rate

    def encode_completion(self, text: str, *, finished: bool, max_new_tokens: int) -> Completion:
        return encode_completion(
            self.tok, text, finished=finished, max_new_tokens=max_new_tokens, end_id=self.eot_id
        )

    def _activate(self) -> None:
        if self.model.active_adapter != self.adapter:
            self.model.set_adapter(self.adapter)
        for p in self.params:  # set_adapter freezes the other adapters; keep ours trainable
            p.requires_grad_(True)

    def learn_pace(self, cfg: Config, model_id: str, report) -> None:
        """After a round on the CPU with every core it may use: keep what it took against
        pace.py's estimate, so the next choice of defaults here estimates from it (not from a
        run pinned to fewer threads, nor under pinned test rates)."""
        policy = self.threads
        if policy is None or not policy.adaptive or os.environ.get("SAPO_EDGE_PACE_RATES"):
            return
        from ..pace import learn_from_round
        from ..pace_cache import PaceCache
        from .cpu_dtype import machine_key
        from .rates import rates_key

        cache = PaceCache.load(machine_key())
        learn_from_round(cfg, model_id, report, cache, rates_key(self.dtype, policy.cores))

    def _pace(self) -> None:
        """Fit torch's threads to the cores other programs leave free (threads.py)."""
        if self.threads is not None and set_threads(self.threads.update()):
            self.log(f"cpu threads: {self.threads.describe()}")

    def _prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        return prompt_ids(self.tok, messages, self.cfg.max_prompt_tokens)

    def _left_pad(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(r) for r in rows)
        pad = self.tok.pad_token_id
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=self.device)
        mask = torch.tensor(
            [[0] * (width - len(r)) + [1] * len(r) for r in rows], device=self.device
        )
        return ids, mask

    # -------------------------------------------------------------------------- generate
    def generate(self, prompts, n, *, max_new_tokens, temperature, top_p, seed, progress=None):
        """n completions per prompt. Each prompt is prefilled once and its KV cache repeated n
        times (prefix sharing); a completion leaves the batch as soon as it ends. LoRA runs lean
        (W x + B (A x), no merged copy of the weights) unless lean_lora is off, when float32
        folds it into a copy of the weights for the call (torch_decode.merged_lora)."""
        self._activate()
        self.model.eval()
        with merged_lora(self.model, self.adapter, self.fuse_lora, self.lean_lora):
            return self._decode(prompts, n, max_new_tokens, temperature, top_p, seed, progress)

    @torch.inference_mode()
    def _decode(self, prompts, n, max_new_tokens, temperature, top_p, seed, progress):
        ids, mask = self._left_pad([self._prompt_ids(m) for m in prompts])
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        width = ids.shape[1]
        cache = growing_cache(self.model.config, width + max_new_tokens)
        if width > 1:  # all but the last prompt token, once per prompt
            self._prefill(ids[:, :-1], mask[:, :-1], pos[:, :-1], cache)
            cache.batch_repeat_interleave(n)
        cur, mask, pos = (t.repeat_interleave(n, 0) for t in (ids[:, -1:], mask, pos[:, -1:]))
        # the attention mask of the whole call, its columns used as the cache fills
        mask = torch.cat([mask, mask.new_ones(len(mask), max_new_tokens)], 1)
        rows = torch.arange(len(cur), device=self.device)  # which completion each batch row is
        out: list[list[int]] = [[] for _ in range(len(cur))]
        eos = torch.tensor(self.eos_ids, device=self.device)
        gen = torch.Generator(device=self.device).manual_seed(seed)
        cache_kw = kv_cache(self.lm, cache)
        for step in range(1, max_new_tokens + 1):
            logits = self.model(
                input_ids=cur,
                attention_mask=mask[:, : width + step - 1],
                position_ids=pos,
                **cache_kw,
            ).logits[:, -1]
            logits = logits.float()
            nxt = sample(logits / temperature if temperature != 1.0 else logits, top_p, gen)
            done = torch.isin(nxt, eos)
            for r, t in zip(rows.tolist(), nxt.tolist(), strict=True):
                out[r].append(t)
            if progress is not None:  # may raise to abandon the call (a stop request)
                progress(step, sum(map(len, out)))
            self._pace()
            if done.all():
                break
            if done.any():  # finished completions leave the batch and the cache
                keep = (~done).nonzero().squeeze(1)
                cache.batch_select_indices(keep)
                rows, nxt, mask, pos = rows[keep], nxt[keep], mask[keep], pos[keep]
            cur, pos = nxt[:, None], pos + 1
        # the ids exactly as sampled, the end token kept apart; the text is decoded from them
        done = [sampled_completion(self.tok, toks, self.eos_ids) for toks in out]
        return [done[i : i + n] for i in range(0, len(done), n)]

    def _prefill(self, ids, mask, pos, cache) -> None:
        """Fill the KV cache with the prompts: the decoder alone, no LM head (no logits are
        needed, and in bfloat16 torch copies the whole head weight for a strided 3-D input)."""
        decoder = self.lm.get_decoder()
        decoder(input_ids=ids, attention_mask=mask, position_ids=pos, **kv_cache(decoder, cache))

    # ------------------------------------------------------------------------ train step
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
        self._activate()
        self.model.eval()
        seqs = [(*row, i) for i, s in enumerate(samples) for row in self._sequences([s])]
        out: list[list[float]] = [[] for _ in samples]
        for prompt, batches in self._by_prompt(seqs):
            prefix = self._prefix(prompt)
            for mb in batches:
                logp, _ = self._completion_logps(prefix, prompt[-1], [c for _, c, _, _ in mb])
                for (_, c, _, i), row in zip(mb, logp, strict=True):
                    out[i] = row[: len(c)].tolist()
        return out

    def train_step(self, samples: list[Sample], progress=None) -> StepStats:
        t0 = time.perf_counter()
        self._activate()
        self.model.train()
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
                # its dropout, or its adapter switched off for the beta > 0 reference
                fused = self.fuse_lora and cfg.lora_dropout == 0 and cfg.beta == 0
                with merged_lora(self.model, self.adapter, fused, lean=True):
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

    # ---------------------------------------------------------------------- persistence
    def save(self, directory: Path) -> None:
        state = get_peft_model_state_dict(self.model, adapter_name=self.adapter)
        save_file(
            {k: v.detach().to("cpu").contiguous() for k, v in state.items()},
            str(directory / ADAPTER_FILE),
        )
        lora = self.model.peft_config[self.adapter].to_dict()
        lora["target_modules"] = (
            sorted(lora["target_modules"]) if lora.get("target_modules") else None
        )
        (directory / ADAPTER_CONFIG).write_text(json.dumps(lora, indent=2, default=str) + "\n")
        torch.save(self.optimizer.state_dict(), directory / OPTIMIZER_FILE)

    def load_adapter(self, path: Path) -> None:
        """LoRA weights from an adapter safetensors file in peft's layout (torch or MLX wrote
        it); the optimizer state is left as it is."""
        try:
            state = load_file(str(path), device=self.device)
        except Exception as e:
            raise ValueError(
                f"adapter {path} cannot be read ({type(e).__name__}: {e}); delete the checkpoint to start over."
            ) from None
        self._set_adapter(state, path)

    def _set_adapter(self, state: dict[str, torch.Tensor], where: Path) -> None:
        try:
            result = set_peft_model_state_dict(self.model, state, adapter_name=self.adapter)
        except (RuntimeError, ValueError, KeyError) as e:
            raise ValueError(
                f"checkpoint {where} does not fit this model and LoRA settings (lora_r, lora_targets): {str(e)[:300]}"
            ) from None
        if getattr(result, "unexpected_keys", None):
            raise ValueError(
                f"checkpoint {where} has adapter weights this model lacks: {result.unexpected_keys[:3]}"
            )

    def load(self, directory: Path) -> None:
        if (
            not (directory / OPTIMIZER_FILE).is_file()
            and (directory / "optimizer.safetensors").is_file()
        ):
            raise ValueError(
                f"checkpoint {directory} was written by the mlx backend: resume it with --backend mlx, or use a fresh --out-dir."
            )
        try:
            state = load_file(str(directory / ADAPTER_FILE), device=self.device)
            optim = torch.load(
                directory / OPTIMIZER_FILE, map_location=self.device, weights_only=True
            )
        except Exception as e:
            raise ValueError(
                f"checkpoint {directory} cannot be read ({type(e).__name__}: {e}); delete it to start over."
            ) from None
        self._set_adapter(state, directory)
        try:
            self.optimizer.load_state_dict(optim)
        except (RuntimeError, ValueError, KeyError) as e:
            raise ValueError(
                f"checkpoint {directory} does not fit this model and LoRA settings (lora_r, lora_targets): {str(e)[:300]}"
            ) from None
        for group in self.optimizer.param_groups:  # this run's --learning-rate, not the saved one
            group["lr"] = self.cfg.learning_rate

    def close(self) -> None:
        """Drop this node's adapter; the shared base goes with the last one."""
        for key, shared in list(_SHARED.items()):
            if shared.model is self.model and self.adapter in shared.adapters:
                shared.adapters.discard(self.adapter)
                if shared.adapters:
                    self.model.delete_adapter(self.adapter)
                else:
                    del _SHARED[key]

    # ---------------------------------------------------------------------------- report
    def trainable_parameters(self) -> int:
        return sum(p.numel() for p in self.params)

    def memory_report(self) -> dict[str, float]:
        report = {"peak_rss_mb": peak_rss_mb()}
        if self.device.startswith("cuda"):
            report["cuda_peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
        return report
