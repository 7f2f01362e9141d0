"""One node's run, put together once, for `run`, `join` and `host` (`sim` builds its nodes on
an in-process hub): its settings, its identity's transport, and the machine it trains on.

`run` makes its session from the settings alone (`Session.for_run`). `join` and `host` make
their identity and network first, start it so the class sees them while the model loads, and
hand the session that; `join` has chosen the backend and checked the class's settings against
this laptop's memory already (`machine`, `memory_checked`), so neither is done again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.settings import Config
from ..events import RunEvents, events
from ..rl.node_checkpoint import saved_node_id
from ..rl.trainer import Node
from ..swarm.transport import NullTransport
from .build import build_nodes, node_id_for


@dataclass
class Session:
    """See the module docstring. `transport`: a NetworkTransport (networked) or NullTransport
    (solo); `node_id` and `name`: its node's; `machine`: (backend kind, device) when chosen
    already; `memory_checked`: the settings checked against this machine's memory already (a
    run with other settings is checked again)."""

    transport: Any
    node_id: str
    name: str
    machine: tuple[str, str] | None = None
    memory_checked: Config | None = None
    keep_open: bool = False  # its network stays open after the run (the caller closes it)
    continue_command: Callable[..., str] | None = None  # join's: the summary's way to go on
    started: bool = False

    @classmethod
    def for_run(cls, cfg: Config, log: Callable[[str], None]) -> Session:
        """`run`'s session: alone (--solo; resumed, the id its run was saved with) or on the
        network with this machine's identity (made on first run)."""
        if cfg.solo:
            saved = saved_node_id(Path(cfg.out_dir) / cfg.name) if cfg.resume else None
            return cls(NullTransport(), saved or node_id_for(cfg.name), cfg.name)
        from .network import network_for
        from .runs import laptop_identity

        ident = laptop_identity(log)
        name = cfg.node_name(ident.name)
        return cls(network_for(cfg, ident, name=name, log=log), ident.node_id, name)

    @classmethod
    def for_network(cls, transport: Any, **decided: Any) -> Session:
        """A session around a NetworkTransport the caller made (`join`, `host`): its identity
        and name are the node's."""
        return cls(transport, transport.ident.node_id, transport.name, **decided)

    @property
    def networked(self) -> bool:
        return not isinstance(self.transport, NullTransport)

    def start_network(self) -> None:
        """Start the network (once; a start that failed is tried again by the next call, which
        raises its error)."""
        if self.networked and not self.started:
            self.transport.start()
            self.started = True

    def build(self, cfg: Config, callback: RunEvents, log: Callable[[str], None]) -> Node:
        """Load the node with settings `cfg` (model, backend, resume) and, when networked,
        start its network and tell peers from then on the model and backend it trains."""
        if self.networked and self.transport.keys.is_open:  # the log says it; so does the screen
            from ..swarm.roomkey import describe_room

            events(callback).on_notice(self.name, describe_room(self.transport.keys))
        (node,) = build_nodes(
            cfg,
            [self.name],
            lambda _id: self.transport,
            callback,
            log,
            lambda _n: self.node_id,
            machine=self.machine,
            memory_checked=cfg == self.memory_checked,
        )
        if not self.networked:
            return node
        b = node.backend
        self.transport.tell_peers(node.model_id, f"{b.name}/{b.device}")
        try:
            self.start_network()
        except BaseException:
            node.backend.close()
            raise
        return node
