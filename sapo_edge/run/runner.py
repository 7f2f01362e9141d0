"""Drive nodes: `run --headless` (one node, put together by session.py) and `sim` (N nodes in
this process, built by build.py).

Simulated nodes share one copy of the base weights (one LoRA adapter each) and exchange
rollouts through an in-process hub, encoded exactly as the network will carry them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from ..config.settings import Config, ConfigError
from ..events import Forward
from ..events import RunEvents as Callback
from ..rl.metrics import PrintCallback, read_rewards
from ..rl.trainer import Node
from ..swarm.transport import InProcessHub
from .build import build_nodes, hint_over
from .control import RunControl, run_rounds
from .runs import prepare_out_dir
from .session import Session
from .stopping import exit_code, stop_signals
from .summary import exit_summary


def run_single(
    cfg: Config,
    callback: Callback | None = None,
    log: Callable[[str], None] = print,
    control: RunControl | None = None,
    session: Session | None = None,
) -> Node:
    """One node (headless, or under the dashboard, which passes its callback and RunControl):
    joins the swarm (LAN, --peer, --relay) unless --solo. `session`: the one `host` and `join`
    made for the class (session.py); `run` makes its own. Its network is closed at the end
    unless the session keeps it open (the caller closes it then)."""
    callback = callback or PrintCallback(log)
    if not cfg.out_dir:  # the CLI sets it; other callers get a new folder in the data folder
        cfg = prepare_out_dir(cfg, "run")
    session = session or Session.for_run(cfg, log)
    if control is not None:
        control.again = session.continue_command
    if session.networked:
        callback = _NetStatus(callback, session.transport)
    node = session.build(cfg, callback, log)
    log(
        f"{node.name}: {node.transport.describe()}; rounds {node.round}..{cfg.rounds - 1}; output in {node.out_dir}"
    )
    try:
        run_rounds(node, cfg.rounds, control, log)
    finally:
        node.backend.close()
        if session.networked and not session.keep_open:
            session.transport.close()  # a student's dashboard keeps its node open to hear the end
    return node


def run_headless(
    cfg: Config,
    *,
    session: Session | None = None,
    wrap: Callable[[Callback], Callback] | None = None,
) -> int:
    """`sapo-edge run --headless`: one line per round. Ctrl-C, SIGTERM and SIGHUP abandon the
    round in flight within seconds, save the last finished round and print the summary; a
    second one quits at once (the newest saved checkpoint stays). Returns the exit status.
    `session` and `wrap` (around the printing callback): see run_single; `join` uses them."""
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
            run_single(cfg, callback, _say_line, control, session)
        except KeyboardInterrupt:
            forced = True
        except Exception as e:
            if control.node is None and isinstance(e, ConfigError | ValueError):
                raise  # a bad setting or model before anything ran: the CLI says it in one line
            from .remedies import explain  # plain text, no Textual

            error = explain(e, cfg.out_dir)
    outcome = "failed" if error else "stopped" if forced else control.outcome or "stopped"
    text = exit_summary(
        cfg,
        control.node,
        outcome,
        start_round=control.start_round,
        headless=True,
        error=error,
        again=control.again,
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
    cfg: Config,
    callback: Callback | None = None,
    log: Callable[[str], None] = print,
    scenario: Any = None,
) -> list[Node]:
    """N nodes on this machine, taking turns each round; ends with the cumulative-reward table.
    `scenario` (an experiment's, e.g. experiments/prank.py) changes the class: its
    connect(node_id, transport) gives the transport a node uses, and before each round
    before_round(nodes, round) may act on the nodes and names the ones that sit it out."""
    callback = callback or PrintCallback(log)
    if not cfg.out_dir:
        cfg = prepare_out_dir(cfg, "sim")
    hub = InProcessHub()
    names = [f"{cfg.name}-{i}" for i in range(cfg.nodes)]
    connect = hub.connect
    if scenario is not None:
        connect = lambda node_id: scenario.connect(node_id, hub.connect(node_id))  # noqa: E731
    nodes = build_nodes(cfg, names, connect, callback, log)
    start = min(n.round for n in nodes)
    log(f"sim: {len(nodes)} nodes, rounds {start}..{cfg.rounds - 1}, output in {cfg.out_dir}/")
    if cfg.hinted_nodes:
        shown = ", ".join(names[i] for i in cfg.hinted_nodes)
        until = f" for their first {cfg.hint_rounds} rounds" if cfg.hint_rounds else ""
        log(f"sim: only {shown} see the worked example{until}; the others never do")
    try:
        for r in range(start, cfg.rounds):
            out = scenario.before_round(nodes, r) if scenario is not None else set()
            for i, node in enumerate(nodes):
                if node.round == r and not hint_over(cfg, i, r) and i not in out:
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
