"""A Qwen2.5-0.5B-shaped model with random weights, for the benchmark's Qwen row (the hub, and so
Qwen's own weights, cannot be reached where the benchmark runs).

    python bench/vs_trl.py --model qwen2.5-0.5b-shape [--columns sapo,sapo-bf16] [--no-trl]
    python bench/qwen_shape.py OUT_DIR [--tokenizer DIR] [--smoke]   # the model directory alone

The shapes are Qwen2.5-0.5B(-Instruct)'s config.json: hidden 896, 24 layers, 14 query heads and
2 key/value heads (head size 64, biases on q/k/v), MLP 4,864, vocabulary 151,936, tied
embeddings, RMSNorm eps 1e-6, rope theta 1e6; weights drawn as transformers initialises a Qwen2
(normal, std 0.02), saved in bfloat16 as Qwen ships them. The tokenizer and chat template are
SmolLM2's (from the offline GGUF: sapo_edge.models.resolve.resolve_model("smollm2-135m"), or --tokenizer
DIR): its 49,152 tokens fit in the 151,936-row embedding, and sampled ids beyond them decode to
nothing, so generation and the train step run the real model's arithmetic at its real shapes.
A random model earns no reward, so the benchmark gives the rows of each group stand-in rewards
(workers.Spec.stand_in_rewards: 1 for even positions, 0 for odd), and every completion trains.
`--smoke` keeps the vocabulary and the head size but 2 layers of hidden 128 (tests, CI).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

QWEN25_05B = dict(
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    vocab_size=151936,
    max_position_embeddings=32768,
    rms_norm_eps=1e-6,
    rope_theta=1000000.0,
    tie_word_embeddings=True,
)
SMOKE = {**QWEN25_05B, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2}
SMOKE.update(num_attention_heads=2, num_key_value_heads=1)
MODEL_ID = "Qwen2.5-0.5B-shaped, random weights, SmolLM2's tokenizer"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
MARK = "QWEN_SHAPE.json"  # what was built, so a later run reuses the directory


def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct converted from the offline GGUF (its tokenizer is what we take)."""
    from sapo_edge.models.resolve import resolve_model

    return resolve_model("smollm2-135m", progress=lambda m: print(m, file=sys.stderr)).path


def build(out: Path, tokenizer_dir: Path | None = None, smoke: bool = False) -> Path:
    """The model directory at `out` (reused when it holds the same shapes); returns it."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    shapes = SMOKE if smoke else QWEN25_05B
    out = Path(out)
    mark = out / MARK
    if mark.is_file() and json.loads(mark.read_text()) == shapes:
        return out
    src = Path(tokenizer_dir) if tokenizer_dir else smollm2_dir()
    tok = AutoTokenizer.from_pretrained(src)
    if len(tok) > shapes["vocab_size"]:
        raise ValueError(f"the tokenizer in {src} has {len(tok)} tokens, over Qwen's vocabulary")
    out.mkdir(parents=True, exist_ok=True)
    eos = tok.eos_token_id
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos
    config = Qwen2Config(**shapes, eos_token_id=eos, pad_token_id=pad, bos_token_id=pad)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=pad)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    for name in TOKENIZER_FILES:  # the chat template, where the tokenizer keeps it in a file
        if (src / name).is_file() and not (out / name).is_file():
            shutil.copyfile(src / name, out / name)
    mark.write_text(json.dumps(shapes))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--tokenizer", type=Path, help="a model directory to take the tokenizer from")
    ap.add_argument("--smoke", action="store_true", help="2 layers of hidden 128 (tests)")
    a = ap.parse_args()
    print(build(a.out, a.tokenizer, a.smoke))
    return 0


if __name__ == "__main__":
    sys.exit(main())
