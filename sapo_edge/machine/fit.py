"""Will it fit? A memory estimate for training a model here and this machine's memory (pace.py
adds time to choose bare `sapo-edge`'s settings).

The estimate is deliberately on the high side (35-55% above the peak RSS measured for
SmolLM2-135M at the defaults and for the 3-node demo): it warns before loading, it is no promise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..config.settings import Config, ConfigError
from .memory import Memory

GB = 1e9
RUNTIME_BYTES = 0.7 * GB  # python, torch and the tokenizer before any weight is loaded
PROMPT_TOKENS = 300  # a typical reasoning-gym prompt with the chat template


@dataclass(frozen=True)
class Shape:
    """What the estimate needs from a model's config.json."""

    params: int
    hidden: int
    layers: int
    vocab: int
    kv_dim: int  # key/value width per layer (heads x head_dim)


# Known models, so bare `sapo-edge` and `doctor` can decide before anything is downloaded.
KNOWN: dict[str, Shape] = {
    "smollm2-135m": Shape(134_515_008, 576, 30, 49_152, 192),
    "Qwen/Qwen2.5-0.5B-Instruct": Shape(494_032_768, 896, 24, 151_936, 128),
    "Qwen/Qwen2.5-1.5B-Instruct": Shape(1_543_714_304, 1536, 28, 151_936, 256),
    "Qwen/Qwen2.5-3B-Instruct": Shape(3_085_938_688, 2048, 36, 151_936, 256),
    "Qwen/Qwen2.5-7B-Instruct": Shape(7_615_616_512, 3584, 28, 152_064, 512),
}
DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
SMALL_MODEL = "smollm2-135m"


def shape_from_config(model_dir: Path) -> Shape | None:
    """Read a (Llama/Qwen-style) config.json; None when the fields are not there."""
    try:
        c = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
        h, layers, vocab = int(c["hidden_size"]), int(c["num_hidden_layers"]), int(c["vocab_size"])
        inter = int(c.get("intermediate_size", 4 * h))
        heads = int(c.get("num_attention_heads", 1))
        kv = int(c.get("num_key_value_heads", heads)) * int(c.get("head_dim", h // heads))
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return None
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * inter  # attention + gated MLP
    embed = vocab * h * (1 if c.get("tie_word_embeddings", True) else 2)
    return Shape(layers * per_layer + embed, h, layers, vocab, kv)


def bytes_per_param(device: str, dtype: str) -> int:
    if dtype in ("bfloat16", "float16"):
        return 2
    if dtype == "float32":
        return 4
    return 2 if device.startswith("cuda") else 4  # "auto": bfloat16 on CUDA, float32 elsewhere


def estimate_bytes(shape: Shape, cfg: Config, device: str = "cpu", nodes: int = 1) -> float:
    """Peak memory of training: the base weights once, per-node LoRA + AdamW, and the largest of
    generation (KV cache of every completion of a round) and a train micro-batch (activations
    kept for the backward pass and the logits over the vocabulary)."""
    b = bytes_per_param(device, cfg.dtype)
    weights = shape.params * b
    lora = nodes * 4 * 4 * cfg.lora_r * shape.layers * (7 * 2 * shape.hidden)  # w, grad, m, v
    seq = min(cfg.max_prompt_tokens, PROMPT_TOKENS) + cfg.max_new_tokens
    n_seqs = cfg.questions_per_round * cfg.group_size
    kv_cache = n_seqs * seq * shape.layers * 2 * shape.kv_dim * b
    gen_logits = n_seqs * shape.vocab * 4 * 2
    per_token = shape.layers * shape.hidden * 36 * b + shape.vocab * 4 * 3
    train_tokens = (
        min(cfg.max_prompt_tokens, PROMPT_TOKENS) + cfg.micro_batch(device) * cfg.max_new_tokens
    )
    train = train_tokens * per_token
    return RUNTIME_BYTES + weights + lora + max(kv_cache + gen_logits, train)


def system_memory() -> Memory:
    import psutil

    vm = psutil.virtual_memory()
    return Memory(float(vm.total), float(vm.available), "RAM")


def check_fits(estimate: float, mem: Memory, what: str) -> tuple[str, str]:
    """('ok' | 'warn' | 'refuse', a sentence). Refuse above the total, warn above what is free."""
    need = f"{what} needs about {estimate / GB:.1f} GB"
    have = f"this machine has {mem.total / GB:.1f} GB of {mem.where} ({mem.available / GB:.1f} GB free)"
    if estimate > mem.total:
        return "refuse", (
            f"{need} and {have}: it cannot fit. Use a smaller model (--model smollm2-135m), or "
            "lower --group-size, --questions-per-round, --max-new-tokens or --micro-batch-size "
            "(--no-memory-check tries anyway)."
        )
    if estimate > mem.available:
        return "warn", (
            f"{need} and {have}: close other programs, or expect swapping (lower --group-size or "
            "--max-new-tokens to need less)."
        )
    return "ok", f"{need}; {have}."


def largest_fitting(mem: Memory, device: str = "cpu") -> str | None:
    """The biggest known model whose paper-default training fits in mem.total."""
    cfg = Config()
    fits = [m for m, s in KNOWN.items() if estimate_bytes(s, cfg, device) <= mem.total]
    return max(fits, key=lambda m: KNOWN[m].params, default=None)


def check_memory(
    model_dir: Path,
    model_id: str,
    cfg: Config,
    device: str,
    nodes: int,
    log=print,
    mem: Memory | None = None,
) -> None:
    """Before loading: raise ConfigError when the estimate exceeds this machine's memory (`mem`:
    the accelerator's, which the caller asks backends/ for; else the system's), log a warning
    when it exceeds what is free now. Models without a readable config.json pass."""
    shape = shape_from_config(model_dir)
    if shape is None:
        return
    mem = mem or system_memory()
    what = f"training {model_id}" + (f" on {nodes} nodes" if nodes > 1 else "")
    verdict, text = check_fits(estimate_bytes(shape, cfg, device, nodes), mem, what)
    if verdict == "refuse":
        raise ConfigError(text)
    log(f"memory: {text}")
