"""Helpers for the swarm tests: valid rollout batches signed by a given node, and loopback
NetworkTransports with short heartbeats and timeouts."""

from __future__ import annotations

from typing import Any

from sapo_edge.rollout import RolloutGroup, encode_batch
from sapo_edge.swarm.identity import Identity
from sapo_edge.swarm.network import NetworkTransport
from sapo_edge.tasks import TaskRef

FAST = dict(
    heartbeat=0.5,
    handshake_timeout=2.0,
    reconnect_base=0.05,
    reconnect_max=0.3,
    mdns=False,
    listen="127.0.0.1:0",
    log=lambda _m: None,
)


def group(producer: str, round_: int = 1, index: int = 0, **over: Any) -> RolloutGroup:
    fields: dict[str, Any] = dict(
        task_ref=TaskRef.make("basic_arithmetic", {"min_terms": 2}, seed=7, index=index),
        question=f"What is {index} + 3?",
        reference_answer=str(index + 3),
        completions=(f"<answer>{index + 3}</answer>", "<answer>0</answer>"),
        rewards=(1.0, 0.0),
        producer=producer,
        model="tiny",
        round=round_,
        created_at=1_700_000_000.0,
    )
    fields.update(over)
    return RolloutGroup(**fields)


def batch_for(ident: Identity, round_: int = 1, n: int = 2, start: int = 0) -> bytes:
    return encode_batch([group(ident.node_id, round_, start + i) for i in range(n)])


def net(ident: Identity | None = None, **kw: Any) -> NetworkTransport:
    opts = {**FAST, **kw}
    return NetworkTransport(ident or Identity.generate(), **opts).start()
