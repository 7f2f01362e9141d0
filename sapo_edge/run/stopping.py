"""Ctrl-C, SIGTERM and SIGHUP end a run cleanly: each one is handed to `on_signal` (the run stops
its round within seconds and saves); the handlers before are restored afterwards.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# SIGHUP does not exist on Windows; SIGBREAK (Ctrl-Break) only there
NAMES = ("SIGINT", "SIGTERM", "SIGHUP", "SIGBREAK")


def exit_code(signame: str) -> int:
    """The shell's convention for a run ended by a signal: 128 + its number (130 for Ctrl-C)."""
    return 128 + int(getattr(signal, signame, signal.SIGTERM))


@contextmanager
def stop_signals(on_signal: Callable[[str], None]) -> Iterator[list[str]]:
    """Within the block, the stop signals call on_signal(name) instead of killing the process.

    Yields the names received, in order. Outside the main thread (where Python cannot set
    handlers) it installs nothing.
    """
    received: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum: int, _frame) -> None:
        name = signal.Signals(signum).name
        received.append(name)
        on_signal(name)

    before = {}
    for name in NAMES:
        sig = getattr(signal, name, None)
        if sig is not None:
            before[sig] = signal.signal(sig, handler)
    try:
        yield received
    finally:
        for sig, old in before.items():
            signal.signal(sig, old)
