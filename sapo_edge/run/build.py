"""Building nodes: each node's settings, backend and model, loaded once per run for `run`,
`join` and `host` (through session.py) and for `sim` (runner.py, on an in-process hub)."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from pathlib import Path

from ..backends import accelerator_memory, load_backend, select_backend
from ..config.settings import Config
from ..data.task_sampler import TaskSampler
from ..events import RunEvents as Callback
from ..machine.fit import check_memory
from ..models.resolve import resolve_model
from ..rl.trainer import Node
from ..swarm.transport import Transport


def node_id_for(name: str) -> str:
    """A stable id for a named node (the network issue replaces this with a key-pair identity)."""
    return f"{name}-{hashlib.sha256(f'sapo-edge-node:{name}'.encode()).hexdigest()[:8]}"


def build_nodes(
    cfg: Config,
    names: list[str],
    transports: Callable[[str], Transport],
    callback: Callback,
    log: Callable[[str], None] = print,
    node_ids: Callable[[str], str] = node_id_for,
    *,
    machine: tuple[str, str] | None = None,
    memory_checked: bool = False,
) -> list[Node]:
    """`machine`: the (backend kind, device) the caller chose already (`join`: before it was
    admitted); `memory_checked`: the caller checked these settings against this machine's
    memory already (`join`, against the class's settings)."""
    TaskSampler(
        cfg.domains, cfg.domain_configs, cfg.seed
    )  # a bad domain fails before the model loads
    choices = cfg.node_backends or [cfg.backend]
    if machine is not None:
        log(f"backend: {machine[0]} on {machine[1]}")
    chosen = {c: machine or select_backend(c, log=log) for c in dict.fromkeys(choices)}
    model = resolve_model(cfg.model, progress=log)
    if cfg.memory_check and not memory_checked:  # before loading: refuse what cannot fit
        device = chosen[choices[0]][1]
        mem = accelerator_memory(device)
        check_memory(model.path, model.model_id, cfg, device, len(names), log, mem)
    nodes = []
    for i, name in enumerate(names):
        kind, device = chosen[choices[i % len(choices)]]
        node_cfg = node_config(cfg, i)
        backend = load_backend(
            model.path, node_cfg, adapter=name, device=device, log=log, kind=kind
        )
        if len(chosen) > 1:
            log(f"{name}: backend {kind} on {device}")
        node_id = node_ids(name)
        node = Node(
            node_cfg,
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
    mix = (
        f"I + J = {cfg.local_samples + cfg.external_samples} groups per round, J chosen each round "
        "by each node (mix adaptive)"
        if cfg.mix == "adaptive"
        else f"I={cfg.local_samples} local + J={cfg.external_samples} external groups per round"
    )
    log(
        f"model {model.model_id} ({model.source}), {backend.trainable_parameters():,} trainable "
        f"LoRA parameters per node, {backend.dtype}; {mix}"
    )
    return nodes


def node_config(cfg: Config, index: int) -> Config:
    """Node `index`'s settings: the run's, except that with hinted_nodes only those nodes' prompts
    show the worked example (format_example), and the others' never do."""
    if not cfg.hinted_nodes:
        return cfg
    return dataclasses.replace(cfg, format_example=index in cfg.hinted_nodes)


def hint_over(cfg: Config, index: int, round_: int) -> bool:
    """True once a hinted node has run its hint_rounds (it then trains and shares no more)."""
    return 0 < cfg.hint_rounds <= round_ and index in cfg.hinted_nodes
