"""Build nodes and drive them: `run --headless` (one node) and `sim` (N nodes in this process).

Simulated nodes share one copy of the base weights (one LoRA adapter each) and exchange
rollouts through an in-process hub, encoded exactly as the network will carry them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from .backends import load_backend, select_backend
from .config import Config
from .models import resolve_model
from .swarm.transport import InProcessHub, NullTransport, Transport
from .tasks import TaskSampler
from .trainer import Callback, Node, PrintCallback, read_rewards


def node_id_for(name: str) -> str:
    """A stable id for a named node (the network issue replaces this with a key-pair identity)."""
    return f"{name}-{hashlib.sha256(f'sapo-edge-node:{name}'.encode()).hexdigest()[:8]}"


def build_nodes(
    cfg: Config,
    names: list[str],
    transports: Callable[[str], Transport],
    callback: Callback,
    log: Callable[[str], None] = print,
) -> list[Node]:
    TaskSampler(
        cfg.domains, cfg.domain_configs, cfg.seed
    )  # a bad domain fails before the model loads
    choices = cfg.node_backends or [cfg.backend]
    chosen = {c: select_backend(c, log=log) for c in dict.fromkeys(choices)}
    model = resolve_model(cfg.model, progress=log)
    nodes = []
    for i, name in enumerate(names):
        kind, device = chosen[choices[i % len(choices)]]
        backend = load_backend(model.path, cfg, adapter=name, device=device, log=log, kind=kind)
        if len(chosen) > 1:
            log(f"{name}: backend {kind} on {device}")
        node_id = node_id_for(name)
        node = Node(
            cfg,
            backend,
            transports(node_id),
            node_id=node_id,
            name=name,
            model_id=model.model_id,
            out_dir=Path(cfg.out_dir) / name,
            callback=callback,
        )
        if cfg.resume:
            node.resume()
        nodes.append(node)
    log(
        f"model {model.model_id} ({model.source}), {backend.trainable_parameters():,} trainable LoRA parameters "
        f"per node, {backend.dtype}; I={cfg.local_samples} local + J={cfg.external_samples} external groups per round"
    )
    return nodes


def run_single(
    cfg: Config, callback: Callback | None = None, log: Callable[[str], None] = print
) -> Node:
    """One node, headless. Alone until the network transport lands (J external samples find none)."""
    callback = callback or PrintCallback(log)
    (node,) = build_nodes(cfg, [cfg.name], lambda _id: NullTransport(), callback, log)
    log(
        f"{node.name}: {node.transport.describe()}; rounds {node.round}..{cfg.rounds - 1}; output in {node.out_dir}"
    )
    try:
        while node.round < cfg.rounds:
            node.run_round()
        node.save()
    finally:
        node.backend.close()
    return node


def run_sim(
    cfg: Config, callback: Callback | None = None, log: Callable[[str], None] = print
) -> list[Node]:
    """N nodes on this machine, taking turns each round; ends with the cumulative-reward table."""
    callback = callback or PrintCallback(log)
    hub = InProcessHub()
    names = [f"{cfg.name}-{i}" for i in range(cfg.nodes)]
    nodes = build_nodes(cfg, names, hub.connect, callback, log)
    start = min(n.round for n in nodes)
    log(f"sim: {len(nodes)} nodes, rounds {start}..{cfg.rounds - 1}, output in {cfg.out_dir}/")
    try:
        for r in range(start, cfg.rounds):
            for node in nodes:
                if node.round == r:
                    node.run_round()
        for node in nodes:
            node.save()
    finally:
        for node in nodes:
            node.backend.close()
    log(summary_table(nodes))
    return nodes


def summary_table(nodes: list[Node]) -> str:
    """The paper's Table 1 shape: cumulative reward per node and in total."""
    lines = [
        f"{'node':<12} {'rounds':>6} {'cumulative reward':>18} {'mean/round':>11} {'first 5':>8} {'last 5':>8}"
    ]
    total = 0.0
    for node in nodes:
        rewards = read_rewards(node.metrics_path)
        rounds, cum = (
            len(rewards),
            sum(rewards),
        )  # cumulative reward = sum of per-round mean rewards
        first = sum(rewards[:5]) / max(len(rewards[:5]), 1)
        last = sum(rewards[-5:]) / max(len(rewards[-5:]), 1)
        total += cum
        lines.append(
            f"{node.name:<12} {rounds:>6} {cum:>18.3f} {cum / max(rounds, 1):>11.3f} {first:>8.3f} {last:>8.3f}"
        )
    lines.append(f"{'total':<12} {'':>6} {total:>18.3f}")
    return "\n".join(lines)
