"""A process-wide setting held while any caller is inside: switched on when the first enters and
off when the last leaves. Nodes of one process sample and step on threads, so one node's end must
not switch off what another still relies on (heap.py's mmap threshold, attention_kernels.py's
grouped heads)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class HeldSetting:
    def __init__(self, on: Callable[[], None], off: Callable[[], None]) -> None:
        self._on, self._off = on, off
        self._lock = threading.Lock()
        self._depth = 0

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            if self._depth == 0:
                self._on()
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    self._off()
