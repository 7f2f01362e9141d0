"""PyTorch backend (CUDA, MPS or CPU): batched KV-cache generation and the LoRA GRPO/DAPO step
(the step's loss in torch_loss.py).

Nodes in one process that load the same model directory share one copy of the base weights;
each node owns a named peft LoRA adapter and its own AdamW optimizer. What changes the shared
model for a call (the active adapter, train mode, LoRA layers swapped for lean ones) holds the
base's lock: nodes may sample and step on threads, one at a time on one base.
"""

from __future__ import annotations

import json
import os
import threading
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

from ..config.settings import Config
from ..machine.dtype_pace import DTYPES
from .attention_kernels import attention_kernels
from .base import Completion, check_load_time_settings, peak_rss_mb
from .common import SharedBases, written_by_other
from .cpu_threads import cpu_threads, set_threads
from .lora_init import lora_a_init
from .rates import cpu_dtype_choice, cpu_rates
from .static_decode import StaticDecoder
from .tokens import (
    encode_completion,
    end_tokens,
    prompt_ids,
    sampled_completion,
)
from .torch_decode import GrowingDecoder, decode_loop, merged_lora
from .torch_loss import TorchLoss

ADAPTER_FILE = "adapter.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
OPTIMIZER_FILE = "optimizer.pt"


@dataclass
class _SharedBase:
    model: PeftModel
    tokenizer: object
    adapters: set[str] = field(default_factory=set)
    # held by a call that changes the model for its duration: a second node's step inside the
    # first one's swap wrapped its lean MLPs again and crashed ('_LeanGatedMlp' ... 'gate_proj')
    lock: threading.RLock = field(default_factory=threading.RLock)


hf_logging.disable_progress_bar()  # one line per round, not weight-loading bars
warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)

_SHARED = SharedBases()  # (model dir, device, dtype) -> _SharedBase
_SAID: set[str] = set()  # what --dtype auto said in this process


def lora_config(cfg: Config) -> LoraConfig:
    """The peft LoRA settings of a Config (rank, alpha, dropout, target projections)."""
    return LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=list(cfg.lora_targets),
        task_type="CAUSAL_LM",
    )


def resolve_dtype(
    dtype: str, device: str, log: Callable[[str], None] = print, cfg: Config | None = None
) -> torch.dtype:
    """auto: bfloat16 on CUDA GPUs that support it; on the CPU the dtype whose round of cfg's
    model is measured (or estimated) faster here (rates.cpu_dtype_choice); float32 elsewhere."""
    if dtype == "auto":
        if device == "cpu":
            choice = cpu_dtype_choice(cfg.model if cfg else None, cfg, log)
            if choice.why not in _SAID:  # once per process, not once per node
                _SAID.add(choice.why)
                log(f"dtype auto: {choice.why}")
            return getattr(torch, choice.dtype)
        cuda_bf16 = device.startswith("cuda") and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if cuda_bf16 else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


class TorchBackend(TorchLoss):
    """Loads the model (shared base, this node's adapter), generates, saves and loads; the train
    step and log-probs are TorchLoss's (torch_loss.py)."""

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
        # the thread policy's first window spans the model's load: the first prefill then runs
        # with the cores other programs leave free, not all of them (threads.py)
        self.threads = cpu_threads(cfg.threads, log) if device == "cpu" else None
        # peft keeps adapters as module attributes: a prefix keeps a node named "train" or
        # "eval" from colliding with nn.Module's own attributes
        self.adapter = adapter = f"node_{adapter}"
        torch_dtype = resolve_dtype(cfg.dtype, device, log, cfg)
        self.dtype = str(torch_dtype).removeprefix("torch.")
        if device == "cpu" and self.dtype in DTYPES:
            cpu_rates((self.dtype,), log)  # so this dtype's first rounds teach pace.json (once)
        lora = lora_config(cfg)
        key = (str(Path(model_dir).resolve()), device, self.dtype)

        def load() -> _SharedBase:
            tok = AutoTokenizer.from_pretrained(model_dir)
            if not tok.chat_template:
                raise ValueError(
                    f"model in {model_dir} has no chat template: use an instruct/chat model."
                )
            tok.padding_side = "left"
            if tok.pad_token_id is None:
                tok.pad_token = tok.eos_token
            base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch_dtype).to(device)
            loaded = _SharedBase(get_peft_model(base, lora, adapter_name=adapter), tok)
            log(f"loaded {model_dir} on {device} as {self.dtype}")
            return loaded

        try:
            name = adapter.removeprefix("node_")
            shared, fresh = _SHARED.take(key, adapter, load, name)
            if not fresh:
                with shared.lock:
                    shared.model.add_adapter(adapter, lora)
        except ValueError as e:
            if "Target modules" in str(e):
                raise ValueError(
                    f"lora_targets {cfg.lora_targets} match no module of this model: {e}"
                ) from None
            raise
        shared.adapters.add(adapter)
        self.model, self.tok, self.model_lock = shared.model, shared.tokenizer, shared.lock
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
        # a GPU decodes on a static cache, each step replayed as a CUDA graph (static_decode.py)
        self.static_decode = device.startswith("cuda")
        gen_eos = getattr(self.model.base_model.model.generation_config, "eos_token_id", None)
        # stop on any eos id; close a peer's finished completion with the template's end of turn
        self.eos_ids, self.eot_id = end_tokens(self.tok, gen_eos)
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

    def _activate(self, train: bool = False) -> str:
        """This node's adapter, active and trainable, the model in eval (or train) mode: the
        caller holds model_lock. Returns the adapter's name."""
        if self.model.active_adapter != self.adapter:
            self.model.set_adapter(self.adapter)
        for p in self.params:  # set_adapter freezes the other adapters; keep ours trainable
            p.requires_grad_(True)
        self.model.train(train)
        return self.adapter

    def learn_pace(self, cfg: Config, model_id: str, report) -> None:
        """After a round on the CPU with every core it may use: keep what it took against
        pace.py's estimate, so the next choice of defaults here estimates from it (not from a
        run pinned to fewer threads, nor under pinned test rates)."""
        policy = self.threads
        if policy is None or not policy.adaptive or os.environ.get("SAPO_EDGE_PACE_RATES"):
            return
        from ..machine.pace import learn_from_round
        from ..machine.pace_cache import PaceCache, rates_key
        from .cpu_dtype import machine_key

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
        with (
            self.model_lock,
            attention_kernels(self.device),
            merged_lora(self.model, self._activate(), self.fuse_lora, self.lean_lora),
        ):
            return self._decode(prompts, n, max_new_tokens, temperature, top_p, seed, progress)

    @torch.inference_mode()
    def _decode(self, prompts, n, max_new_tokens, temperature, top_p, seed, progress):
        self._pace()  # the prefill with the cores free now (a round's first step is its longest)
        ids, mask = self._left_pad([self._prompt_ids(m) for m in prompts])
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        if self.static_decode:  # a GPU: a static cache, each step replayed as one CUDA graph
            dec = StaticDecoder(self.model, self.lm, ids, mask, pos, n, max_new_tokens)
            dec.capture_or_say(self.log)
        else:  # the CPU: a cache growing in place, finished rows leaving the batch
            dec = GrowingDecoder(self.model, self.lm, ids, mask, pos, n, max_new_tokens)
        out = decode_loop(
            dec,
            max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            gen=torch.Generator(device=self.device).manual_seed(seed),
            eos=torch.tensor(self.eos_ids, device=self.device),
            progress=progress,
            pace=self._pace,
        )
        # the ids exactly as sampled, the end token kept apart; the text is decoded from them
        done = [sampled_completion(self.tok, toks, self.eos_ids) for toks in out]
        return [done[i : i + n] for i in range(0, len(done), n)]

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
            with self.model_lock:
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
        written_by_other(directory, OPTIMIZER_FILE, "optimizer.safetensors", "mlx")
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
        shared = next((s for s in _SHARED.bases.values() if s.model is self.model), None)
        if shared is not None and _SHARED.release(shared, self.adapter):
            with shared.lock:  # others still run on the base: only this node's weights go
                self.model.delete_adapter(self.adapter)

    # ---------------------------------------------------------------------------- report
    def trainable_parameters(self) -> int:
        return sum(p.numel() for p in self.params)

    def memory_report(self) -> dict[str, float]:
        report = {"peak_rss_mb": peak_rss_mb()}
        if self.device.startswith("cuda"):
            report["cuda_peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
        return report
