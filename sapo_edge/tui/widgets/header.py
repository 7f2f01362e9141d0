"""The header: who this node is, on what hardware, with which model, and memory in use."""

from __future__ import annotations

import dataclasses

from rich.text import Text
from textual.widgets import Static

from ...data.textsafe import clean
from ..messages import NodeStarted


class NodeHeader(Static):
    def __init__(self, **kw) -> None:
        super().__init__("sapo-edge · starting...", **kw)
        self.info: NodeStarted | None = None
        self.memory_mb = 0.0
        self.state = "starting"
        self.transport = ""  # said by set_transport (a class's paths), kept over NodeStarted's

    def show(self, info: NodeStarted) -> None:
        if self.transport:  # a student's class paths, said while its model loaded
            info = dataclasses.replace(info, transport=self.transport)
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

    def set_transport(self, text: str) -> None:
        """Who this node reaches now (peers, relay, the class's paths); said before the model
        has loaded, it stands once it has (the node's own view would say less)."""
        self.transport = text
        if self.info is not None:
            self.info = dataclasses.replace(self.info, transport=text)
        self._render_text()

    def set_state(self, state: str) -> None:
        self.state = state
        self._render_text()

    def _render_text(self) -> None:
        i = self.info
        # every value is shown as plain text (Text, never markup): names and models can come
        # from anywhere, and "[/]" in one must not end the dashboard
        if i is None:
            where = f" · {clean(self.transport, 120)}" if self.transport else ""
            self.update(Text.assemble(("sapo-edge", "bold"), f" · {clean(self.state)}{where}"))
            return
        room = clean(i.room or "no room", 64)
        self.update(
            Text.assemble(
                (clean(i.name, 64), "bold"),
                f" · {room} · {clean(i.transport, 120)} · ",
                (clean(self.state, 40), "bold"),
                f"\n{clean(i.backend, 40)} on {clean(i.device, 40)} · {clean(i.dtype, 20)} · "
                f"{clean(i.model, 120)} · {i.lora_parameters:,} LoRA params · "
                f"I={i.local_samples} J={i.external_samples} · mem {self.memory_mb:,.0f} MB",
            )
        )
