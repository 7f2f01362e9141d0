"""What the torch and MLX backends share (issue 46: each kept its own copy): the registry of
base models shared by the nodes of one process (one base per model, device and dtype; each node
its own adapter on it), and the check that a checkpoint was written by this backend."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any


class SharedBases:
    """Base models by key; each holds `adapters` (a set of the nodes' adapter names)."""

    def __init__(self) -> None:
        self.bases: dict[Hashable, Any] = {}

    def take(
        self, key: Hashable, adapter: str, load: Callable[[], Any], name: str
    ) -> tuple[Any, bool]:
        """(the base for `key`, whether it was loaded now). A second node with this adapter
        name in one process is refused (`name`: what the user calls it)."""
        shared = self.bases.get(key)
        if shared is None:
            shared = self.bases[key] = load()
            return shared, True
        if adapter in shared.adapters:
            raise ValueError(
                f"two nodes named {name!r} in one process: give each node its own name."
            )
        return shared, False

    def release(self, shared: Any, adapter: str) -> bool:
        """Drop `adapter` from `shared`. True: other nodes still use the base (the caller removes
        its weights from it); False: it was the last (the base is gone from the registry)."""
        for key, base in list(self.bases.items()):
            if base is shared and adapter in base.adapters:
                base.adapters.discard(adapter)
                if base.adapters:
                    return True
                del self.bases[key]
        return False


def written_by_other(directory: Path, own_file: str, other_file: str, other: str) -> None:
    """A checkpoint without this backend's optimizer file but with the other backend's: say
    which backend resumes it (ValueError)."""
    if not (directory / own_file).is_file() and (directory / other_file).is_file():
        raise ValueError(
            f"checkpoint {directory} was written by the {other} backend: resume it with "
            f"--backend {other}, or use a fresh --out-dir."
        )
