"""GGUF -> a float32 transformers model, once per file (models.convert_gguf caches the result):
a one-off torch job, whichever backend then trains."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config.errors import ModelNotFound


def dequantize(gguf: Path) -> tuple[Any, Any]:
    """(model, tokenizer) read from `gguf`, ready for save_pretrained; ModelNotFound (one line)
    when the file is not a complete llama-family GGUF."""
    import torch  # the conversion is a one-off torch job; training may use another backend
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our one progress line instead of three bars
    try:  # transformers' GGUF reader draws its own tqdm bar, which floods headless logs
        import transformers.modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:
        gguf_utils = None
    bar = getattr(gguf_utils, "tqdm", None)
    try:
        if bar is not None:
            gguf_utils.tqdm = lambda items, *a, **k: items
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )
        config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except Exception as e:
        detail = " ".join(str(e).split()) or type(e).__name__  # one line for the CLI
        raise ModelNotFound(
            f"could not read GGUF file {gguf}: {detail}. Is it a complete llama-family GGUF?"
        ) from None
    finally:
        if bar is not None:
            gguf_utils.tqdm = bar
    # save_pretrained refuses a GGUF-loaded model: build a fresh one and load the dequantized weights
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [k for k in missing if "lm_head" not in k]:
        raise ModelNotFound(
            f"GGUF {gguf.name}: weights did not match the architecture (missing {missing[:3]}, unexpected {unexpected[:3]})."
        )
    return fresh, tok
