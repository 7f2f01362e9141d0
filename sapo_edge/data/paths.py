"""Where sapo-edge keeps its files: the OS's own folders (platformdirs) unless overridden.

SAPO_EDGE_HOME puts config, identity and runs under one folder (runs in HOME/runs);
SAPO_EDGE_CACHE moves the model cache (shared and safe to delete); --out-dir moves one run.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

# the errors of a full disk (a quota's too, where the platform has one): what a write that fails
# for want of room says, which the checkpoints, the run's remedies and the CLI tell apart
NO_SPACE = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})

APP = "sapo-edge"


def _home() -> Path | None:
    home = os.environ.get("SAPO_EDGE_HOME", "").strip()
    return Path(home).expanduser() if home else None


def config_dir() -> Path:
    """Settings and the node identity (Linux ~/.config/sapo-edge, macOS ~/Library/Application
    Support/sapo-edge, Windows %LOCALAPPDATA%\\sapo-edge: local, never roaming, so a roaming
    profile does not copy one identity onto two machines)."""
    if (home := _home()) is not None:
        return home
    import platformdirs

    return Path(platformdirs.user_config_dir(APP, appauthor=False, roaming=False))


def data_dir() -> Path:
    """The user's data folder (Linux ~/.local/share/sapo-edge); runs live in data_dir()/runs."""
    if (home := _home()) is not None:
        return home
    import platformdirs

    return Path(platformdirs.user_data_dir(APP, appauthor=False, roaming=False))


def runs_dir() -> Path:
    return data_dir() / "runs"


def cache_dir() -> Path:
    """Converted models and downloaded model files (Linux ~/.cache/sapo-edge); safe to delete."""
    if cache := os.environ.get("SAPO_EDGE_CACHE", "").strip():
        return Path(cache).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir(APP, appauthor=False))


def identity_path() -> Path:
    return config_dir() / "identity.key"


def folder_size(path: Path) -> int:
    """Bytes of every file under path (0 when it does not exist); links are not followed."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def human_size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit in ("B", "KB") else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # unreachable; keeps type checkers calm
