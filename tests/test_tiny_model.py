"""The tiny Qwen2 fixture loads like a real hub model: chat template, special tokens, generate."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers


@pytest.fixture(scope="module")
def loaded(tiny_qwen: Path):
    tok = transformers.AutoTokenizer.from_pretrained(tiny_qwen)
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_qwen)
    return tok, model


def test_files_are_safetensors_float32(tiny_qwen: Path, loaded) -> None:
    _, model = loaded
    assert (tiny_qwen / "model.safetensors").is_file()
    assert model.dtype == torch.float32
    assert model.config.model_type == "qwen2"
    assert model.config.num_hidden_layers == 2


def test_special_tokens_are_single_ids(loaded) -> None:
    tok, model = loaded
    assert 500 <= len(tok) <= 1000
    assert model.get_input_embeddings().weight.shape[0] == len(tok)
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    for special in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        assert len(tok.encode(special, add_special_tokens=False)) == 1
    assert model.config.eos_token_id == tok.eos_token_id
    # Qwen2.5-Instruct's order: the turn end first, then <|endoftext|> (the smaller id)
    assert model.generation_config.eos_token_id == [tok.eos_token_id, tok.pad_token_id]
    assert tok.pad_token_id < tok.eos_token_id
    assert model.config.pad_token_id == tok.pad_token_id


def test_chat_template_is_chatml(loaded) -> None:
    tok, _ = loaded
    messages = [
        {"role": "system", "content": "Answer in <answer> tags."},
        {"role": "user", "content": "What is 3 + 4?"},
    ]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nAnswer in <answer> tags.<|im_end|>\n"
        "<|im_start|>user\nWhat is 3 + 4?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    no_prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    assert not no_prompt.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize(
    "text", ["<answer>7</answer>", "12 * 34 = 408, so <answer>408</answer>", "ünïcode ✓"]
)
def test_tokenizer_round_trips(loaded, text: str) -> None:
    tok, _ = loaded
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text


def test_generate_produces_tokens(loaded) -> None:
    tok, model = loaded
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 2?"}], tokenize=False, add_generation_prompt=True
    )
    inputs = tok(prompt, return_tensors="pt")
    torch.manual_seed(0)
    out = model.generate(**inputs, max_new_tokens=8, min_new_tokens=8, do_sample=True)
    new = out[0, inputs["input_ids"].shape[1] :]
    assert new.shape[0] == 8
    assert all(0 <= int(i) < len(tok) for i in new)
    assert isinstance(tok.decode(new, skip_special_tokens=True), str)
