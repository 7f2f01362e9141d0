"""Turn an exception from starting or running a node into a title and a remedy a user can act on."""

from __future__ import annotations

import errno

from ..config.errors import ModelNotFound
from ..config.settings import ConfigError
from ..data.paths import NO_SPACE
from ..rl.checkpoints import CheckpointError

_READ_ONLY = {errno.EACCES, errno.EPERM, errno.EROFS}


LOG_PANE = "the log pane (press l)"


def unexpected(exc: BaseException) -> bool:
    """No remedy foresees this error: its traceback is what helps (explain's last case)."""
    return _foreseen(exc, "") is None


def explain(
    exc: BaseException, out_dir: str = "runs", traceback_at: str = LOG_PANE
) -> tuple[str, str]:
    """(title, remedy) for the error panel; the traceback goes to the log pane only, and an
    unexpected error's remedy says where it is (`traceback_at`)."""
    foreseen = _foreseen(exc, out_dir)
    if foreseen is not None:
        return foreseen
    return (
        f"Unexpected error: {type(exc).__name__}",
        f"{str(exc) or 'no message'}. The full traceback is in {traceback_at}; checkpoints "
        "saved before are intact, and --resume continues from the newest.",
    )


def _foreseen(exc: BaseException, out_dir: str) -> tuple[str, str] | None:
    text = str(exc)
    if isinstance(exc, ModelNotFound):
        return "Model not found", text
    if isinstance(exc, ConfigError):
        return "Settings problem", text
    if _is_disk_full(exc):
        return (
            "Disk full",
            f"No space left while writing to {out_dir}: free some space or pass --out-dir on "
            "another disk, then start again with --resume (the newest complete checkpoint is kept).",
        )
    if isinstance(exc, OSError) and exc.errno in _READ_ONLY:
        where = exc.filename or out_dir
        return (
            "Cannot write here",
            f"{where} cannot be written ({exc.strerror or exc}): pass --out-dir with a folder "
            "you can write to.",
        )
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return (
            "Port in use",
            "Another program (perhaps another sapo-edge) already listens on this port: stop it, "
            "or pick another port in the settings.",
        )
    if isinstance(exc, MemoryError) or "out of memory" in text.lower():
        return (
            "Out of memory",
            "Lower --group-size, --max-new-tokens or --micro-batch-size, or use a smaller --model.",
        )
    if isinstance(exc, CheckpointError | ValueError):
        return "Cannot continue", text
    return None


def _is_disk_full(exc: BaseException) -> bool:
    for _ in range(8):  # the exception and its causes
        if exc is None:
            return False
        if isinstance(exc, OSError) and exc.errno in NO_SPACE:
            return True
        if "no space left" in str(exc).lower():
            return True
        exc = exc.__cause__ or exc.__context__
    return False
