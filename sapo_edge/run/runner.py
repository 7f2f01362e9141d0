"""Build nodes and drive them: `run --headless` (one node) and `sim` (N nodes in this process).

Simulated nodes share one copy of the base weights (one LoRA adapter each) and exchange
rollouts through an in-process hub, encoded exactly as the network will carry them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..backends import accelerator_memory, load_backend, select_backend
from ..config.settings import Config, ConfigError
from ..data.task_sampler import TaskSampler
from ..events import Forward, events
from ..events import RunEvents as Callback
from ..machine.fit import check_memory
from ..models.resolve import resolve_model
from ..rl.metrics import PrintCallback, read_rewards
from ..rl.node_checkpoint import saved_node_id
from ..rl.trainer import Node
from ..swarm.transport import InProcessHub, NullTransport, Transport
from .control import RunControl, run_rounds
from .runs import prepare_out_dir
from .stopping import exit_code, stop_signals
from .summary import exit_summary


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
) -> list[Node]:
    TaskSampler(
        cfg.domains, cfg.domain_configs, cfg.seed
    )  # a bad domain fails before the model loads
    choices = cfg.node_backends or [cfg.backend]
    chosen = {c: select_backend(c, log=log) for c in dict.fromkeys(choices)}
    model = resolve_model(cfg.model, progress=log)
    if cfg.memory_check:  # before loading: refuse what cannot fit, warn when memory is short
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


def run_single(
    cfg: Config,
    callback: Callback | None = None,
    log: Callable[[str], None] = print,
    control: RunControl | None = None,
    transport: Any = None,
) -> Node:
    """One node (headless, or under the dashboard, which passes its callback and RunControl):
    joins the swarm (LAN, --peer, --relay) unless --solo. `transport`: a NetworkTransport the
    caller made (`host` and `join` make theirs for the class's room, and start it before the
    model loads; starting it here again does nothing); it
    is closed at the end unless it has `keep_open` set (the caller closes it then)."""
    callback = callback or PrintCallback(log)
    if not cfg.out_dir:  # the CLI sets it; other callers get a new folder in the data folder
        cfg = prepare_out_dir(cfg, "run")
    if cfg.solo:  # resumed: the id its run was saved with (a class member's goes on alone)
        saved = saved_node_id(Path(cfg.out_dir) / cfg.name) if cfg.resume else None
        ids = (lambda _n: saved) if saved else node_id_for
        (node,) = build_nodes(cfg, [cfg.name], lambda _id: NullTransport(), callback, log, ids)
    else:
        node = _build_networked(cfg, callback, log, transport)
    log(
        f"{node.name}: {node.transport.describe()}; rounds {node.round}..{cfg.rounds - 1}; output in {node.out_dir}"
    )
    try:
        run_rounds(node, cfg.rounds, control, log)
    finally:
        node.backend.close()
        close = getattr(node.transport, "close", None)
        if close and not getattr(node.transport, "keep_open", False):
            close()  # a student's dashboard keeps its node open to hear the class end
    return node


def run_headless(
    cfg: Config, *, transport: Any = None, wrap: Callable[[Callback], Callback] | None = None
) -> int:
    """`sapo-edge run --headless`: one line per round. Ctrl-C, SIGTERM and SIGHUP abandon the
    round in flight within seconds, save the last finished round and print the summary; a
    second one quits at once (the newest saved checkpoint stays). Returns the exit status.
    `transport` and `wrap` (around the printing callback): see run_single; `join` uses them."""
    control = RunControl()

    def on_signal(name: str) -> None:
        if control.stop_requested():
            raise KeyboardInterrupt  # the second signal: no more waiting
        control.request_stop()
        _say(
            f"\nsapo-edge: {name}: stopping within seconds and saving the last finished round "
            "(send it again to quit at once)\n"
        )

    error, forced = None, False
    with stop_signals(on_signal) as received:
        try:
            callback = wrap(PrintCallback(_say_line)) if wrap else None
            run_single(cfg, callback, _say_line, control, transport)
        except KeyboardInterrupt:
            forced = True
        except Exception as e:
            if control.node is None and isinstance(e, ConfigError | ValueError):
                raise  # a bad setting or model before anything ran: the CLI says it in one line
            from .remedies import explain  # plain text, no Textual

            error = explain(e, cfg.out_dir)
    outcome = "failed" if error else "stopped" if forced else control.outcome or "stopped"
    text = exit_summary(
        cfg, control.node, outcome, start_round=control.start_round, headless=True, error=error
    )
    _say_line(text, sys.stderr if error else sys.stdout)
    if error:
        return 1
    return exit_code(received[0]) if received else 0


def _say(text: str) -> None:
    """Write to stderr from a signal handler (no buffered print: it may be mid-write)."""
    try:
        os.write(sys.stderr.fileno(), text.encode("utf-8", "replace"))
    except (OSError, ValueError):
        pass  # the terminal is gone (SIGHUP): the run still stops and saves


def _say_line(text: str, stream=None) -> None:
    """print() that survives a closed terminal, so a hangup never fails the run."""
    try:
        print(text, file=stream or sys.stdout, flush=True)
    except (OSError, ValueError):
        pass


def _build_networked(
    cfg: Config, callback: Callback, log: Callable[[str], None], transport: Any = None
) -> Node:
    """A node with this machine's identity (made on first run) and a NetworkTransport (or the
    caller's `transport`, started or not: its identity and name are the node's)."""
    from ..swarm.identity import default_identity_path, load_or_create
    from .network import network_for

    ident, created = load_or_create() if transport is None else (transport.ident, False)
    if created:
        log(f"new identity {ident.node_id} saved in {default_identity_path()}")
    name = cfg.node_name(ident.name)
    if transport is not None:
        name = transport.name
    else:
        transport = network_for(cfg, ident, name=name, log=log)
    if transport.keys.is_open:  # the log has the line; the person at the screen sees it now
        from ..swarm.roomkey import describe_room

        events(callback).on_notice(name, describe_room(transport.keys))
    status = _NetStatus(callback, transport)
    (node,) = build_nodes(cfg, [name], lambda _id: transport, status, log, lambda _n: ident.node_id)
    transport.model = node.model_id
    transport.backend = (
        f"{getattr(node.backend, 'name', 'torch')}/{getattr(node.backend, 'device', '')}"
    )
    try:
        transport.start()
    except BaseException:
        node.backend.close()
        raise
    return node


class _NetStatus(Forward):
    """Passes every event on to the callback and adds a status line when the peer picture
    changes."""

    def __init__(self, inner: Callback, transport):
        super().__init__(inner)
        self.transport, self.last = transport, ""

    def on_round(self, report) -> None:
        super().on_round(report)
        text = self.transport.describe()
        if text != self.last:
            self.last = text
            self.inner.on_message(report.node, f"swarm: {text}")


def run_sim(
    cfg: Config, callback: Callback | None = None, log: Callable[[str], None] = print
) -> list[Node]:
    """N nodes on this machine, taking turns each round; ends with the cumulative-reward table."""
    callback = callback or PrintCallback(log)
    if not cfg.out_dir:
        cfg = prepare_out_dir(cfg, "sim")
    hub = InProcessHub()
    names = [f"{cfg.name}-{i}" for i in range(cfg.nodes)]
    nodes = build_nodes(cfg, names, hub.connect, callback, log)
    start = min(n.round for n in nodes)
    log(f"sim: {len(nodes)} nodes, rounds {start}..{cfg.rounds - 1}, output in {cfg.out_dir}/")
    if cfg.hinted_nodes:
        shown = ", ".join(names[i] for i in cfg.hinted_nodes)
        until = f" for their first {cfg.hint_rounds} rounds" if cfg.hint_rounds else ""
        log(f"sim: only {shown} see the worked example{until}; the others never do")
    try:
        for r in range(start, cfg.rounds):
            for i, node in enumerate(nodes):
                if node.round == r and not hint_over(cfg, i, r):
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
