"""Atomic checkpoints that survive a kill: write to a temp dir, fsync, manifest, COMPLETE, rename.

A checkpoint is `root/round-NNNNNN/` holding the backend's files, state.json, MANIFEST.json
(size + sha256 of every file) and a COMPLETE marker written last.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..data.paths import NO_SPACE

STATE, MANIFEST, COMPLETE = "state.json", "MANIFEST.json", "COMPLETE"
_RESERVED = (STATE, MANIFEST, COMPLETE)
_ROUND_DIR = re.compile(r"round-(\d{6,})")
_TMP_DIR = re.compile(r"\.tmp-.*?-(\d+)-[0-9a-f]+")  # .tmp-round-NNNNNN-{pid}-{hex}, .tmp-old-...


class CheckpointError(Exception):
    """A checkpoint that cannot be written: disk full, bad state, a file name the backend must not use."""


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    round: int
    state: dict  # contents of state.json


def _round_dir(root: Path, round: int) -> Path:
    return root / f"round-{round:06d}"


def _round_of(path: Path) -> int | None:
    m = _ROUND_DIR.fullmatch(path.name)
    return int(m.group(1)) if m and path.is_dir() else None


def _fsync_dir(path: Path) -> None:
    if os.name == "nt":  # Windows cannot open a directory for fsync; NTFS renames are journalled
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDWR if os.name == "nt" else os.O_RDONLY)  # works on read-only files
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write(path: Path, data: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _files(d: Path) -> list[Path]:
    return sorted(p for p in d.rglob("*") if p.is_file())


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def list_checkpoints(root: Path) -> list[Path]:
    """Round dirs that carry a COMPLETE marker, oldest round first (hashes are not checked here)."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [(r, p) for p in root.iterdir() if (r := _round_of(p)) is not None]
    return [p for _, p in sorted(found) if (p / COMPLETE).is_file()]


def save_checkpoint(
    root: Path,
    round: int,
    write_files: Callable[[Path], None],
    state: dict,
    keep: int = 3,
) -> Path:
    """Write checkpoint `round` atomically under `root` and prune old ones; returns its directory.

    `write_files(tmpdir)` writes the backend's files. If it raises, nothing previous is touched.
    """
    if not isinstance(round, int) or isinstance(round, bool) or round < 0:
        raise CheckpointError(f"round must be a non-negative integer, got {round!r}")
    if not isinstance(keep, int) or isinstance(keep, bool) or keep < 1:
        raise CheckpointError(
            f"keep must be an integer >= 1, got {keep!r}; use 1 to keep only the latest"
        )
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint state must be a dict, got {type(state).__name__}")
    try:
        state_json = json.dumps(state, allow_nan=False, indent=2, sort_keys=True)
    except (TypeError, ValueError) as e:
        raise CheckpointError(
            f"checkpoint state is not plain JSON ({e}); store only str/int/float/bool/list/dict, no NaN"
        ) from e

    root = Path(root)
    final = _round_dir(root, round)
    tmp = root / f".tmp-round-{round:06d}-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
        write_files(tmp)
        clash = [n for n in _RESERVED if (tmp / n).exists()]
        if clash:
            raise CheckpointError(
                f"write_files created {clash[0]}, a name the checkpoint reserves; rename that file"
            )
        _write(tmp / STATE, state_json)
        for p in _files(tmp):
            _fsync_file(p)
        files = {
            p.relative_to(tmp).as_posix(): {"size": p.stat().st_size, "sha256": _sha256(p)}
            for p in _files(tmp)
        }
        _write(tmp / MANIFEST, json.dumps({"version": 1, "round": round, "files": files}, indent=2))
        _write(tmp / COMPLETE, f"round {round}\n")
        for d in sorted({p.parent for p in _files(tmp)}, key=lambda d: -len(d.parts)):
            _fsync_dir(d)
        _publish(tmp, final)
    except BaseException as e:
        _remove(tmp)
        if isinstance(e, OSError) and e.errno in NO_SPACE:
            raise CheckpointError(
                f"no space left on the disk holding {root} while saving round {round}; "
                f"free space or lower keep (now {keep}) — earlier checkpoints are intact"
            ) from e
        raise
    _prune(root, keep, final)
    return final


def _publish(tmp: Path, final: Path) -> None:
    """Rename tmp -> final; an existing final is moved aside and deleted only after success."""
    root = final.parent
    aside = None
    if final.exists():
        aside = root / f".tmp-old-{final.name}-{os.getpid()}-{secrets.token_hex(4)}"
        os.rename(final, aside)
    try:
        os.rename(tmp, final)
    except BaseException:
        if aside is not None:
            os.rename(aside, final)
        raise
    _fsync_dir(root)
    if aside is not None:
        _remove(aside)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # our own leftovers: this process is not writing them any more
    if os.name == "nt":  # os.kill(pid, 0) would terminate the process on Windows
        import psutil

        return psutil.pid_exists(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists but not ours, or we cannot tell: leave it
    return True


def _prune(root: Path, keep: int, just_written: Path) -> None:
    """Keep the newest `keep` complete checkpoints (plus the one just written); drop crash debris."""
    complete = list_checkpoints(root)
    for old in complete[: max(0, len(complete) - keep)]:
        if old != just_written:
            _remove(old)
    for p in root.iterdir():
        if p.is_dir() and _round_of(p) is not None and not (p / COMPLETE).is_file():
            _remove(p)  # a round dir without COMPLETE can never be loaded
        elif p.is_dir() and (m := _TMP_DIR.fullmatch(p.name)) and not _pid_alive(int(m.group(1))):
            _remove(p)


def _problem(path: Path) -> str | None:
    """Why this round dir cannot be loaded, or None if it is sound."""
    if not (path / COMPLETE).is_file():
        return "partial: no COMPLETE marker (the save was interrupted)"
    try:
        files = json.loads((path / MANIFEST).read_text(encoding="utf-8"))["files"]
        entries = [(str(n), int(e["size"]), str(e["sha256"])) for n, e in files.items()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return f"corrupt: missing or unreadable {MANIFEST}"
    for name, size, digest in entries:
        p = path / name
        if not p.is_file():
            return f"corrupt: file {name} missing"
        if p.stat().st_size != size:
            return f"corrupt: file {name} size {p.stat().st_size} != {size} in manifest"
        if _sha256(p) != digest:
            return f"corrupt: file {name} hash mismatch"
    if STATE not in {n for n, _, _ in entries}:
        return f"corrupt: {STATE} not listed in manifest"
    return None


def find_latest(root: Path, log: Callable[[str], None] = print) -> Checkpoint | None:
    """The newest checkpoint that is complete and intact; logs one line per skipped directory."""
    root = Path(root)
    if not root.is_dir():
        return None
    found = sorted(
        ((r, p) for p in root.iterdir() if (r := _round_of(p)) is not None), reverse=True
    )
    for rnd, path in found:
        why = _problem(path)
        state: Any = None
        if why is None:
            try:
                state = json.loads((path / STATE).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                why = f"corrupt: unreadable {STATE}"
            else:
                if not isinstance(state, dict):
                    why = f"corrupt: {STATE} is not a JSON object"
        if why is not None:
            log(f"skipping checkpoint {path}: {why}")
            continue
        return Checkpoint(path=path, round=rnd, state=state)
    return None
