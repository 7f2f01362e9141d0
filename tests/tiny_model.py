"""Build a tiny random Qwen2 model + ChatML tokenizer offline, in seconds, for tests and benchmarks.

Shaped like Qwen2.5-Instruct where it matters for training: turns end with <|im_end|>, the
generation config lists two end ids in Qwen's order [<|im_end|>, <|endoftext|>] (sorted, the
smaller is <|endoftext|>, which the model never ends a turn with), and the tokenizer normalises
text to NFC. `build_other_tokenizer()` is another family's (Llama-3-like specials), for peer text.

Usage: `python tests/tiny_model.py OUT_DIR`, or `build_tiny_qwen(path)` from code.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
VOCAB_SIZE = 768


def _corpus() -> list[str]:
    """Deterministic text resembling what the trainer sees: chat turns, arithmetic, answers."""
    rng = random.Random(0)
    words = (
        "what is the sum of product difference plus minus times divided by answer question solve "
        "compute calculate result number numbers first second think step so therefore equals "
        "reasoning puzzle letter count how many words sentence reverse sort list sequence next"
    ).split()
    lines = [
        "You are a helpful assistant. Think step by step, then give the final answer inside "
        "<answer> and </answer> tags.",
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n",
    ]
    for _ in range(400):
        a, b = rng.randint(0, 999), rng.randint(0, 99)
        op, word, val = rng.choice(
            [("+", "plus", a + b), ("-", "minus", a - b), ("*", "times", a * b)]
        )
        lines.append(
            f"<|im_start|>user\nWhat is {a} {op} {b}? Compute {a} {word} {b}.<|im_end|>\n"
            f"<|im_start|>assistant\n{a} {op} {b} = {val}, so the answer is {val}. "
            f"<answer>{val}</answer><|im_end|>\n"
        )
        lines.append(" ".join(rng.choice(words) for _ in range(12)))
    return lines


def build_tokenizer():
    """A byte-level BPE trained on the built-in corpus, wrapped as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()  # as Qwen2's tokenizer.json
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        chat_template=CHAT_TEMPLATE,
        model_max_length=2048,
    )


OTHER_SPECIALS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]


def build_other_tokenizer():
    """Another model family's tokenizer (Llama-3-like specials, its own merges, no normaliser):
    decoding its ids gives the kind of text a peer with another model publishes."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=OTHER_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus()[::-1][:300] + ["Résumé: naïve café, 12 × 4 = 48 ✓"], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|eot_id|>")


def build_tiny_qwen(path: Path) -> Path:
    """Save a random 2-layer Qwen2 (float32, safetensors) and its tokenizer to `path`; returns it."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id  # <|im_end|>, <|endoftext|>
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=eos,
        pad_token_id=pad,
        bos_token_id=pad,
        dtype="float32",
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(torch.float32)
    # Qwen2.5-Instruct's generation_config.json: eos_token_id [151645 <|im_end|>, 151643 <|endoftext|>]
    model.generation_config = GenerationConfig(
        eos_token_id=[eos, pad], pad_token_id=pad, bos_token_id=pad
    )
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/tiny_model.py OUT_DIR")
    print(build_tiny_qwen(Path(sys.argv[1])))
