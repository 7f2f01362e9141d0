"""torch's CPU threads under the adaptive policy of `sapo_edge/machine/threads.py`: one policy per
process (the thread count is process-wide, shared by every node of a `sim`), applied with
torch.set_num_threads only when it changes."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..machine.threads import LoadMeter, ThreadPolicy, pinned_threads, usable_cores

_POLICY: ThreadPolicy | None = None
# torch's own default before anything changed it: the physical cores (on Apple Silicon the
# performance cores); the policy never goes above it, only below
TORCH_DEFAULT = torch.get_num_threads()


def cpu_threads(setting: int, log: Callable[[str], None], fresh: bool = False) -> ThreadPolicy:
    """The process's policy for `--threads setting` (0 = adaptive), made on first use (or anew
    with `fresh`, when the setting changed); a pinned count is applied at once."""
    global _POLICY
    if _POLICY is None or fresh:
        pinned = pinned_threads(setting)
        cores = max(1, min(usable_cores(), TORCH_DEFAULT))
        sample = None  # a pinned count never reads the load
        if pinned is None:
            try:
                sample = LoadMeter()
            except Exception as e:  # psutil cannot read this system: torch's default stays
                sample, pinned = None, cores
                log(f"cpu threads: {cores}, fixed (the load cannot be read here: {e})")
        _POLICY = ThreadPolicy(cores, sample, pinned=pinned)  # type: ignore[arg-type]
        set_threads(_POLICY.threads)
        how = (
            "adaptive: fewer while other programs keep cores busy"
            if _POLICY.adaptive
            else "pinned by --threads or OMP_NUM_THREADS"
        )
        log(f"cpu threads: {_POLICY.threads} ({how})")
    return _POLICY


def set_threads(n: int) -> bool:
    """Use n threads from the next op; True when that is a change."""
    if torch.get_num_threads() == n:
        return False
    torch.set_num_threads(n)
    return True
