"""MLX backend (Apple GPU, or CPU with mlx[cpu]): batched KV-cache sampling and the LoRA GRPO/DAPO step
(the step's loss in mlx_loss.py).

Same settings with the same meaning as torch_backend.py. Nodes in one process share the base
weights; each node keeps its own LoRA weights and AdamW state and swaps them in when it runs,
holding the base's lock for the call (nodes may sample and step on threads, one at a time).
Adapters are saved in peft's layout, so torch and MLX checkpoints hold the same tensors.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm.models.cache import BatchKVCache
from mlx_lm.sample_utils import apply_top_p
from mlx_lm.tuner.utils import linear_to_lora_layers
from mlx_lm.utils import load_model
from transformers import AutoTokenizer

from ..config.settings import Config
from .base import Completion, check_load_time_settings, peak_rss_mb
from .common import SharedBases, written_by_other
from .lora_init import lora_a_init
from .mlx_loss import MlxLoss
from .tokens import (
    encode_completion,
    end_tokens,
    prompt_ids,
    sampled_completion,
)

ADAPTER_FILE = "adapter.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
OPTIMIZER_FILE = "optimizer.safetensors"
PEFT_PREFIX = "base_model.model."
DTYPES = {"float32": mx.float32, "bfloat16": mx.bfloat16, "float16": mx.float16}


@dataclass
class _SharedBase:
    model: nn.Module
    tokenizer: object
    eos_ids: list[int]  # generation stops on any of these
    eot_id: int  # the chat template's end of turn: closes a peer's finished completion
    adapters: set[str] = field(default_factory=set)
    active: str | None = None  # whose LoRA weights are in the model now
    # held by a call that runs the model with this node's weights swapped in: another node's
    # swap inside a step made the step train (and keep) the other node's weights
    lock: threading.RLock = field(default_factory=threading.RLock)


_SHARED = SharedBases()  # (model dir, dtype, LoRA settings) -> _SharedBase


def resolve_dtype(dtype: str) -> mx.Dtype:
    if dtype == "auto":  # bfloat16 on the Apple GPU (as mlx-lm trains), float32 on CPU
        return mx.bfloat16 if mx.default_device() == mx.gpu else mx.float32
    return DTYPES[dtype]


def _configured_eos(model_dir: Path) -> list[int]:
    """The eos ids of generation_config.json (else config.json), in the order they are listed."""
    for name in ("generation_config.json", "config.json"):
        f = Path(model_dir) / name
        if f.is_file():
            eos = json.loads(f.read_text()).get("eos_token_id")
            return eos if isinstance(eos, list) else [eos]
    return []


def _rope_overrides(model_dir: Path) -> dict:
    """transformers 5 writes rope_theta/rope_scaling inside rope_parameters, where mlx-lm's model
    classes do not look (they would silently fall back to their own default theta)."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    rope = config.get("rope_parameters") or {}
    out = {}
    if "rope_theta" not in config and "rope_theta" in rope:
        out["rope_theta"] = rope["rope_theta"]
    if not config.get("rope_scaling") and rope.get("rope_type", "default") != "default":
        out["rope_scaling"] = {k: v for k, v in rope.items() if k != "rope_theta"}
    return out


def _load_shared(model_dir: Path, cfg: Config, dtype: mx.Dtype, log) -> _SharedBase:
    tok = AutoTokenizer.from_pretrained(model_dir)
    if not tok.chat_template:
        raise ValueError(f"model in {model_dir} has no chat template: use an instruct/chat model.")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    model, _ = load_model(Path(model_dir), model_config=_rope_overrides(model_dir))
    model.set_dtype(dtype)
    model.freeze()
    targets = set(cfg.lora_targets)
    keys = {
        path
        for path, m in model.layers[0].named_modules()
        if path.split(".")[-1] in targets and isinstance(m, nn.Linear)
    }
    if not keys:
        raise ValueError(f"lora_targets {cfg.lora_targets} match no module of this model.")
    lora = {
        "rank": cfg.lora_r,
        "scale": cfg.lora_alpha / cfg.lora_r,
        "dropout": cfg.lora_dropout,
        "keys": keys,
    }
    linear_to_lora_layers(model, len(model.layers), lora)
    mx.eval(model.parameters())
    log(f"loaded {model_dir} with MLX on {mx.default_device()} as {str(dtype).split('.')[-1]}")
    return _SharedBase(model, tok, *end_tokens(tok, _configured_eos(model_dir)))


class MlxBackend(MlxLoss):
    """Loads the model (shared base, this node's LoRA weights swapped in), generates, saves and
    loads; the train step and log-probs are MlxLoss's (mlx_loss.py)."""

    name = "mlx"

    def __init__(
        self,
        model_dir: Path,
        cfg: Config,
        *,
        adapter: str,
        device: str = "",
        log: Callable[[str], None] = print,
        compile_step: bool | None = None,
    ):
        self.cfg, self.adapter = cfg, adapter
        self.device = device or ("gpu" if mx.default_device() == mx.gpu else "cpu")
        mx_dtype = resolve_dtype(cfg.dtype)
        self.dtype = str(mx_dtype).split(".")[-1]
        lora_key = (cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout, tuple(sorted(cfg.lora_targets)))
        key = (str(Path(model_dir).resolve()), self.dtype, lora_key)
        shared, _fresh = _SHARED.take(
            key, adapter, lambda: _load_shared(model_dir, cfg, mx_dtype, log), adapter
        )
        shared.adapters.add(adapter)
        self.shared, self.model, self.tok = shared, shared.model, shared.tokenizer
        self.model_lock = shared.lock
        self.eos_ids, self.eot_id = shared.eos_ids, shared.eot_id
        self.pad_id = self.tok.pad_token_id
        self.compile_step = (self.device == "gpu") if compile_step is None else compile_step
        self.seed = 0  # the dropout stream's seed; reset() sets it
        self.share_prefix = True  # prefill each prompt once for its n completions
        self.lora = self._fresh_lora()
        self.optimizer = self._new_optimizer()
        self._build_step()

    # ----------------------------------------------------------------------------- helpers
    def _new_optimizer(self) -> optim.Optimizer:
        return optim.AdamW(
            learning_rate=self.cfg.learning_rate, weight_decay=0.0, bias_correction=True
        )

    def _fresh_lora(self, seed: int | None = None) -> dict[str, mx.array]:
        """New LoRA weights as peft/mlx-lm initialise them: A uniform(+-1/sqrt(in)), B zero;
        drawn from seed with lora_init.py (the same tensors torch draws), else from MLX's stream."""
        fresh = {}
        for name, p in tree_flatten(self.model.trainable_parameters()):
            if not name.endswith("lora_a"):
                fresh[name] = mx.zeros(p.shape, p.dtype)
            elif seed is None:
                bound = 1 / math.sqrt(p.shape[0])
                fresh[name] = mx.random.uniform(-bound, bound, p.shape, dtype=p.dtype)
            else:
                peft = f"{PEFT_PREFIX}{name.rsplit('.', 1)[0]}.lora_A.weight"
                init = lora_a_init(peft, p.shape[1], p.shape[0], seed)  # peft layout: (r, in)
                fresh[name] = mx.array(np.ascontiguousarray(init.T)).astype(p.dtype)
        mx.eval(fresh)
        return fresh

    def reset(self, seed: int) -> None:
        """Fresh LoRA weights drawn from seed (the same tensors torch draws) and a fresh optimizer."""
        self.lora = self._fresh_lora(seed)
        self.optimizer = self._new_optimizer()
        self.seed = seed
        with self.model_lock:
            if self.shared.active == self.adapter:
                self.shared.active = None
                self._activate()

    def configure(self, cfg: Config) -> None:
        """New run-time settings from the next call (learning rate, clipping, beta, temperature,
        micro-batch size, prompt length); LoRA shape, dtype and model need a restart."""
        check_load_time_settings(self.cfg, cfg)
        self.cfg = cfg
        self.optimizer.learning_rate = cfg.learning_rate
        self._build_step()

    def encode_completion(self, text: str, *, finished: bool, max_new_tokens: int) -> Completion:
        return encode_completion(
            self.tok, text, finished=finished, max_new_tokens=max_new_tokens, end_id=self.eot_id
        )

    def _activate(self) -> None:
        if self.shared.active != self.adapter:
            self.model.update(tree_unflatten(list(self.lora.items())))
            self.shared.active = self.adapter

    def _prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        return prompt_ids(self.tok, messages, self.cfg.max_prompt_tokens)

    # -------------------------------------------------------------------------- generate
    def _sample(self, logits: mx.array, temperature: float, top_p: float, key) -> mx.array:
        logprobs = logits.astype(mx.float32) / temperature
        logprobs = logprobs - mx.logsumexp(logprobs, axis=-1, keepdims=True)
        if top_p < 1.0:
            logprobs = apply_top_p(logprobs, top_p)
        return mx.random.categorical(logprobs, key=key)

    def generate(self, prompts, n, *, max_new_tokens, temperature, top_p, seed, progress=None):
        """All prompts x n completions in one left-padded batch; finished rows leave the batch.
        Each prompt is prefilled once and its KV cache and next-token logits repeated n times
        (prefix sharing, as the torch backend does)."""
        with self.model_lock:
            return self._generate(prompts, n, max_new_tokens, temperature, top_p, seed, progress)

    def _generate(self, prompts, n, max_new_tokens, temperature, top_p, seed, progress):
        self._activate()
        self.model.eval()
        share = self.share_prefix
        prompt_rows = list(map(self._prompt_ids, prompts))
        rows = prompt_rows if share else [p for p in prompt_rows for _ in range(n)]
        width = max(len(r) for r in rows)
        ids = mx.array([[self.pad_id] * (width - len(r)) + r for r in rows])
        cache = [BatchKVCache([width - len(r) for r in rows]) for _ in self.model.layers]
        key = mx.random.key(seed)
        eos = set(self.eos_ids)
        logits = self.model(ids, cache=cache)[:, -1, :]
        if share and n > 1:  # every prompt's cache rows and logits, n times over
            repeat = mx.array([i for i in range(len(prompt_rows)) for _ in range(n)])
            for c in cache:
                c.filter(repeat)
            logits = logits[repeat]
        total = len(prompt_rows) * n
        out: list[list[int]] = [[] for _ in range(total)]
        finished = [False] * total
        live = list(range(total))  # batch row -> sequence index
        for step in range(1, max_new_tokens + 1):
            key, sub = mx.random.split(key)
            tokens = self._sample(logits, temperature, top_p, sub)
            keep = []
            for row, t in enumerate(tokens.tolist()):
                out[live[row]].append(t)
                if t in eos:
                    finished[live[row]] = True
                else:
                    keep.append(row)
            if progress is not None:  # may raise to abandon the call (a stop request)
                progress(step, sum(map(len, out)))
            if not keep or len(out[live[0]]) == max_new_tokens:
                break
            if len(keep) < len(live):
                for c in cache:
                    c.filter(mx.array(keep))
                tokens = tokens[mx.array(keep)]
                live = [live[r] for r in keep]
            logits = self.model(tokens[:, None], cache=cache)[:, -1, :]
        # the ids exactly as sampled, the end token kept apart; the text is decoded from them
        done = [sampled_completion(self.tok, toks, eos) for toks in out]
        return [done[i : i + n] for i in range(0, len(done), n)]

    # ---------------------------------------------------------------------- persistence
    def _peft_state(self) -> dict[str, mx.array]:
        """mlx-lm's lora_a (in, r) / lora_b (r, out) as peft's lora_A (r, in) / lora_B (out, r)."""
        out = {}
        for name, p in self.lora.items():
            stem, kind = name.rsplit(".", 1)
            out[f"{PEFT_PREFIX}{stem}.lora_{kind[-1].upper()}.weight"] = p.T.astype(mx.float32)
        return out

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        mx.save_safetensors(str(directory / ADAPTER_FILE), self._peft_state())
        config = {
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "r": self.cfg.lora_r,
            "lora_alpha": self.cfg.lora_alpha,
            "lora_dropout": self.cfg.lora_dropout,
            "target_modules": sorted(self.cfg.lora_targets),
            "saved_by": "sapo-edge mlx backend",
        }
        (directory / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2) + "\n")
        mx.save_safetensors(
            str(directory / OPTIMIZER_FILE), dict(tree_flatten(self.optimizer.state))
        )

    def load_adapter(self, path: Path) -> None:
        """LoRA weights from an adapter safetensors file in peft's layout (torch or MLX wrote it)."""
        try:
            state = mx.load(str(path))
        except Exception as e:
            raise ValueError(
                f"adapter {path} cannot be read ({type(e).__name__}: {e}); delete the checkpoint to start over."
            ) from None
        wanted = self._peft_state()
        bad = sorted(set(state) ^ set(wanted)) + [
            k for k in wanted if k in state and state[k].shape != wanted[k].shape
        ]
        if bad:
            raise ValueError(
                f"adapter {path} does not fit this model and LoRA settings (lora_r, lora_targets): "
                f"{len(bad)} tensors differ, e.g. {bad[:3]}"
            )
        dtype = next(iter(self.lora.values())).dtype
        self.lora = {
            name: state[peft].T.astype(dtype) for name, peft in zip(self.lora, wanted, strict=True)
        }
        mx.eval(self.lora)
        with self.model_lock:
            self.shared.active = None
            self._activate()

    def load(self, directory: Path) -> None:
        directory = Path(directory)
        opt = directory / OPTIMIZER_FILE
        written_by_other(directory, OPTIMIZER_FILE, "optimizer.pt", "torch")
        self.load_adapter(directory / ADAPTER_FILE)
        try:
            state = tree_unflatten(list(mx.load(str(opt)).items()))
        except Exception as e:
            raise ValueError(
                f"checkpoint {directory} cannot be read ({type(e).__name__}: {e}); delete it to start over."
            ) from None
        self.optimizer.state = state
        self.optimizer.learning_rate = self.cfg.learning_rate  # this run's, not the saved one

    def close(self) -> None:
        """Drop this node's adapter; the shared base goes with the last one."""
        if self.shared.active == self.adapter:
            self.shared.active = None
        _SHARED.release(self.shared, self.adapter)

    # ---------------------------------------------------------------------------- report
    def trainable_parameters(self) -> int:
        return sum(p.size for p in self.lora.values())

    def memory_report(self) -> dict[str, float]:
        report = {"peak_rss_mb": peak_rss_mb()}
        if self.device == "gpu":
            report["mlx_peak_mb"] = mx.get_peak_memory() / 2**20
        return report
