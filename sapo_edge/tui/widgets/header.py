"""The header: who this node is, on what hardware, with which model, and memory in use."""

from __future__ import annotations

import dataclasses

from textual.widgets import Static

from ..messages import NodeStarted


class NodeHeader(Static):
    def __init__(self, **kw) -> None:
        super().__init__("sapo-edge · starting...", **kw)
        self.info: NodeStarted | None = None
        self.memory_mb = 0.0
        self.state = "starting"

    def show(self, info: NodeStarted) -> None:
        self.info, self.memory_mb = info, info.memory_mb
        self.state = "running"
        self._render_text()

    def set_memory(self, mb: float) -> None:
        self.memory_mb = mb
        self._render_text()

    def set_samples(self, local: int, external: int) -> None:
        if self.info is not None:
            self.info = dataclasses.replace(
                self.info, local_samples=local, external_samples=external
            )
            self._render_text()

    def set_state(self, state: str) -> None:
        self.state = state
        self._render_text()

    def _render_text(self) -> None:
        i = self.info
        if i is None:
            self.update(f"[b]sapo-edge[/b] · {self.state}")
            return
        room = i.room or "no room"
        self.update(
            f"[b]{i.name}[/b] · {room} · {i.transport} · [b]{self.state}[/b]\n"
            f"{i.backend} on {i.device} · {i.dtype} · {i.model} · "
            f"{i.lora_parameters:,} LoRA params · I={i.local_samples} J={i.external_samples} · "
            f"mem {self.memory_mb:,.0f} MB"
        )
