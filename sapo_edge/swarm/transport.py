"""Transports move encoded rollout batches (bytes, the same format the network uses) between nodes.

NullTransport is a node alone; InProcessHub connects the simulator's nodes inside one process.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Protocol


class Transport(Protocol):
    def publish(self, payload: bytes) -> None:
        """Send one encoded rollout batch to every other node."""

    def receive(self) -> list[tuple[str, bytes]]:
        """Everything that arrived since the last call, as (sender label, payload); never blocks."""

    def describe(self) -> str:
        """A few words for status lines: who this node is connected to."""


class NullTransport:
    """A node on its own (J external samples will simply find none)."""

    def publish(self, payload: bytes) -> None:
        pass

    def receive(self) -> list[tuple[str, bytes]]:
        return []

    def describe(self) -> str:
        return "solo (no peers)"


class InProcessHub:
    """Delivers every published payload to each other connected node's bounded inbox."""

    def __init__(self, inbox_limit: int = 1024):
        self._lock = threading.Lock()
        self._inboxes: dict[str, deque[tuple[str, bytes]]] = {}
        self._limit = inbox_limit
        self.dropped = 0  # payloads pushed out of a full inbox (oldest first)

    def connect(self, node: str) -> InProcessTransport:
        with self._lock:
            if node in self._inboxes:
                raise ValueError(
                    f"node {node!r} is already connected to this hub: node names must be unique."
                )
            self._inboxes[node] = deque()
        return InProcessTransport(self, node)

    def _broadcast(self, sender: str, payload: bytes) -> None:
        with self._lock:
            for node, inbox in self._inboxes.items():
                if node != sender:
                    if len(inbox) >= self._limit:
                        inbox.popleft()
                        self.dropped += 1
                    inbox.append((sender, payload))

    def _drain(self, node: str) -> list[tuple[str, bytes]]:
        with self._lock:
            inbox = self._inboxes[node]
            items = list(inbox)
            inbox.clear()
            return items

    def peers(self, node: str) -> list[str]:
        with self._lock:
            return [n for n in self._inboxes if n != node]


class InProcessTransport:
    def __init__(self, hub: InProcessHub, node: str):
        self.hub, self.node = hub, node

    def publish(self, payload: bytes) -> None:
        self.hub._broadcast(self.node, bytes(payload))

    def receive(self) -> list[tuple[str, bytes]]:
        return self.hub._drain(self.node)

    def describe(self) -> str:
        return f"in-process ({len(self.hub.peers(self.node))} peers)"
