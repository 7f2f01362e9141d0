"""What `sapo-edge run` prints when it ends (dashboard or headless): the error and its fix if it
failed, rounds done, reward, where the checkpoint is and the exact command that continues the run.
"""

from __future__ import annotations

import os
import shlex
import shutil
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..config.settings import Config
from ..rl.metrics import read_rewards

if TYPE_CHECKING:
    from ..rl.trainer import Node

HEADINGS = {"done": "finished", "stopped": "stopped", "failed": "stopped by an error"}


def exit_summary(
    cfg: Config,
    node: Node,
    outcome: str,
    *,
    start_round: int = 0,
    headless: bool = False,
    error: tuple[str, str] | None = None,
    again: Callable[..., str] | None = None,
) -> str:
    """The lines printed after the run; `node` is None when it never got as far as a model.
    `again`: the run's own command to go on (continue_command)."""
    lines = []
    if error is not None:
        title, remedy = error
        lines.append(f"sapo-edge: error: {title}")
        lines.append(f"  {remedy}")
    if node is None:
        if error is None:
            lines.append("sapo-edge: stopped before the model was loaded; nothing to save.")
        return "\n".join(lines)
    done, total = node.round, cfg.rounds
    lines.append(
        f"sapo-edge {HEADINGS.get(outcome, outcome)}: {done} of {total} rounds done "
        f"({done - start_round} in this session)."
    )
    rewards = read_rewards(node.metrics_path)
    if rewards:
        trend = (
            f" · first 5 {statistics.fmean(rewards[:5]):.2f} → last 5 "
            f"{statistics.fmean(rewards[-5:]):.2f}"
            if len(rewards) > 5
            else ""
        )
        lines.append(
            f"  reward     last {rewards[-1]:.2f} · mean {statistics.fmean(rewards):.2f}{trend}"
        )
    saved = node.saved[1] if node.saved is not None and Path(node.saved[1]).is_dir() else None
    if saved is None:
        lines.append("  checkpoint none: no round finished, so nothing was saved")
    else:
        behind = done - node.saved[0]
        lost = f" ({behind} newer rounds were not saved)" if behind > 0 else ""
        lines.append(f"  checkpoint {Path(saved).resolve()}{lost}")
    if node.metrics_path.exists():
        lines.append(f"  metrics    {node.metrics_path.resolve()}")
    more = done >= total
    command = continue_command(
        cfg, node, headless=headless, resume=saved is not None, more=more, again=again
    )
    label = "train more" if more else "continue  " if saved is not None else "start again"
    lines.append(f"  {label} {command}")
    if cfg.secret:
        lines.append("             (give the room secret again: --secret or SAPO_EDGE_SECRET)")
    return "\n".join(lines)


def continue_command(
    cfg: Config,
    node: Node,
    *,
    headless: bool,
    resume: bool,
    more: bool,
    again: Callable[..., str] | None = None,
) -> str:
    """The node's own saved settings (config.json, which never holds the secret) plus the flags
    that continue it: works from any folder, whatever flags, presets or files started it. A
    class member's session knows its own command (`again`: `sapo-edge join CODE ...`)."""
    if again is not None:
        return again(headless=headless, more=more)
    args = [_program(), "run"]
    if headless:
        args.append("--headless")
    args += ["--config", str((node.out_dir / "config.json").resolve())]
    args += ["--out-dir", str(Path(cfg.out_dir).resolve())]
    if resume:
        args.append("--resume")
    if more:
        args += ["--rounds", str(cfg.rounds * 2)]
    return shlex.join(args)


def _program() -> str:
    """`sapo-edge` when that is what runs on PATH, else the script that was started."""
    argv0 = sys.argv[0] if sys.argv else ""
    if not Path(argv0).name.startswith("sapo-edge"):
        return "sapo-edge"
    on_path = shutil.which("sapo-edge")
    if on_path and os.path.realpath(on_path) == os.path.realpath(argv0):
        return "sapo-edge"
    return str(Path(argv0).resolve())
