"""Where runs live: a new folder per run under the user's data folder (unless --out-dir), the
refusal to mix two runs in one folder (that needs --resume), and the `sapo-edge runs` listing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..config.settings import DEFAULT_NAME, Config, ConfigError
from ..data.paths import identity_path, runs_dir
from ..rl.checkpoints import list_checkpoints

if TYPE_CHECKING:
    from ..swarm.identity import Identity


def node_names(cfg: Config, command: str) -> list[str]:
    """The folder name of every node this command writes (run: the identity's name unless --name)."""
    if command == "sim":
        return [f"{cfg.name}-{i}" for i in range(cfg.nodes)]
    if command == "run" and not cfg.solo and cfg.name == DEFAULT_NAME:
        try:
            from ..swarm.identity import load_or_create

            if identity_path().exists():  # read only: a new identity makes a new, unused name
                return [load_or_create(identity_path())[0].name]
        except (ValueError, OSError):
            pass  # an unreadable identity fails later with its own sentence
        return []
    return [cfg.name]


def rounds_done(node_dir: Path) -> int:
    """Rounds recorded in a node folder's metrics.jsonl (0 when none)."""
    try:
        with open(node_dir / "metrics.jsonl", encoding="utf-8") as f:
            return sum(1 for line in f if line.strip())
    except OSError:
        return 0


def is_used(node_dir: Path) -> bool:
    """A node folder that already holds a run: recorded rounds or any checkpoint."""
    ckpts = node_dir / "checkpoints"
    return rounds_done(node_dir) > 0 or (ckpts.is_dir() and any(ckpts.iterdir()))


def _new_run_dir(command: str) -> Path:
    base = runs_dir() / f"{time.strftime('%Y%m%d-%H%M%S')}-{command}"
    out, n = base, 2
    while out.exists():
        out, n = base.with_name(f"{base.name}-{n}"), n + 1
    return out


def _newest_run_with(name: str) -> Path | None:
    root = runs_dir()
    if not name or not root.is_dir():
        return None
    found = [d for d in root.iterdir() if (d / name / "config.json").is_file()]
    return max(found, key=lambda d: d.stat().st_mtime, default=None)


def _check_writable(out: Path) -> None:
    """Create-and-delete a file in out; a folder made only for the check is removed again (the
    node makes it when it starts), so a run that fails early leaves no empty run folder. Runs
    that start together with one --out-dir (a class's laptops on one machine, the namespace LAN
    test's nodes) each check it: one may remove the folder it made between another's making
    sure of it and probing it, so a probe that finds no folder makes it again, and a folder
    another run is probing (or using) stays."""
    made = not out.exists()
    try:
        for attempt in range(3):
            out.mkdir(parents=True, exist_ok=True)
            try:
                fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=out)
                break
            except FileNotFoundError:  # removed by another run's check just now
                if attempt == 2:
                    raise
        os.close(fd)
        os.remove(probe)
        if made:
            try:
                out.rmdir()
            except OSError:  # not empty: another run is in it now
                pass
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise ConfigError(
            f"cannot write to the output folder {out} ({why}): pass --out-dir with a folder you "
            "can write to."
        ) from None


def prepare_out_dir(cfg: Config, command: str) -> Config:
    """cfg with out_dir set to the folder this run writes; refuses a used folder without --resume.

    No --out-dir: a new folder under runs_dir() (with --resume: the newest run of this node).
    """
    names = node_names(cfg, command)
    if not cfg.out_dir:
        found = _newest_run_with(names[0]) if cfg.resume and names else None
        out = found or _new_run_dir(command)
    else:
        out = Path(cfg.out_dir).expanduser()
        used = [n for n in names if is_used(out / n)]
        if used and not cfg.resume:
            where = out / used[0]
            raise ConfigError(
                f"{where} already holds a run ({rounds_done(where)} rounds recorded): continue it "
                "with --resume, or start a new run in another folder (--out-dir NEW, or no "
                "--out-dir for a fresh folder)."
            )
    _check_writable(out)
    return dataclasses.replace(cfg, out_dir=str(out))


@dataclass(frozen=True)
class RunInfo:
    folder: Path  # the run folder (what --out-dir names)
    nodes: list[str]
    rounds: int  # the most rounds any node recorded
    last_reward: float | None  # the mean reward of the newest round of the first node
    checkpoint: Path | None  # newest complete checkpoint of the first node
    resume: str  # the command that continues it
    modified: float


def _last_reward(node_dir: Path) -> float | None:
    try:
        lines = (node_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
        value = json.loads(next(ln for ln in reversed(lines) if ln.strip()))["reward_mean"]
        return float(value)
    except (OSError, StopIteration, ValueError, KeyError, TypeError):
        return None


def describe_run(folder: Path) -> RunInfo | None:
    """What one run folder holds, or None when it holds no node."""
    try:
        nodes = sorted(d.name for d in folder.iterdir() if (d / "config.json").is_file())
    except OSError:
        return None
    if not nodes:
        return None
    first = folder / nodes[0]
    ckpts = list_checkpoints(first / "checkpoints")
    sim = len(nodes) > 1 or re.fullmatch(r".+-\d+", nodes[0]) is not None and _is_sim(first)
    cmd = "sim" if sim else "run"
    resume = f"sapo-edge {cmd} --config {_quote(str(first / 'config.json'))} --resume"
    if folder.name.startswith("class-") or (folder / "class.jsonl").exists():  # a class's
        resume = "sapo-edge join CODE (the code on the teacher's screen: it holds the room key)"
    return RunInfo(
        folder=folder,
        nodes=nodes,
        rounds=max(rounds_done(folder / n) for n in nodes),
        last_reward=_last_reward(first),
        checkpoint=ckpts[-1] if ckpts else None,
        resume=resume,
        modified=max((folder / n).stat().st_mtime for n in nodes),
    )


def _quote(path: str) -> str:
    """A path as the user's shell reads it (cmd and PowerShell take double quotes)."""
    if os.name == "nt":
        return f'"{path}"' if any(c in path for c in " &()^%!;,") else path
    return shlex.quote(path)


def _is_sim(node_dir: Path) -> bool:
    try:
        saved = json.loads((node_dir / "config.json").read_text(encoding="utf-8"))
        return node_dir.name.startswith(f"{saved.get('name', '')}-")
    except (OSError, ValueError, AttributeError):
        return False


def list_runs(root: Path | None = None) -> list[RunInfo]:
    """Runs under root (default runs_dir()), newest first."""
    root = root or runs_dir()
    if not root.is_dir():
        return []
    found = [info for d in root.iterdir() if d.is_dir() and (info := describe_run(d))]
    return sorted(found, key=lambda r: r.modified, reverse=True)


def runs_table(runs: list[RunInfo]) -> str:
    lines = []
    for r in runs:
        reward = "-" if r.last_reward is None else f"{r.last_reward:.3f}"
        ckpt = r.checkpoint.name if r.checkpoint else "no checkpoint yet"
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.modified))
        lines.append(
            f"{r.folder}\n  {when}  nodes {', '.join(r.nodes)}  rounds {r.rounds}  "
            f"last reward {reward}  {ckpt}\n  resume: {r.resume}"
        )
    return "\n".join(lines)


RUNNING_FILE = "running.pid"


def hold_run(node_dir: Path) -> None:
    """Mark `node_dir` as this process's until it exits; ConfigError when another process that
    is still alive holds it (two windows training one folder would mix their checkpoints and,
    under one identity, their place in the room). A holder that died leaves a stale mark."""
    node_dir.mkdir(parents=True, exist_ok=True)
    path = node_dir / RUNNING_FILE
    _hold(
        path,
        lambda pid: (
            f"{node_dir} is in use by another sapo-edge (process {pid}), probably in "
            "another window: use that one, or stop it (q or Ctrl-C) and run this again (if no "
            f"sapo-edge is running, delete {path})."
        ),
    )


def laptop_identity(log: Callable[[str], None], *, in_class: bool = False) -> Identity:
    """This laptop's identity (made and saved on its first networked run, which the log says);
    `in_class`: held for this process until it exits (hold_identity), as a host or a student."""
    from ..swarm.identity import default_identity_path, load_or_create

    ident, created = load_or_create()
    if created:
        log(f"new identity {ident.node_id} saved in {default_identity_path()}")
    if in_class:
        hold_identity(default_identity_path())
    return ident


def hold_identity(identity_file: Path) -> None:
    """Mark this laptop's identity as in use by this class process (host or join) until it
    exits: a host and a student on one laptop under one identity would be one node twice (the
    student takes the host's place at the relay, each refuses the other)."""
    path = identity_file.with_name(identity_file.name + ".in-use")
    _hold(
        path,
        lambda pid: (
            f"this laptop's identity ({identity_file}) is in use by another sapo-edge "
            f"in a class (process {pid}): one laptop is one member. To try the class from the "
            "teacher's laptop, give that window an identity of its own: SAPO_EDGE_HOME=<a new "
            f"folder> sapo-edge join CODE (if no sapo-edge is running, delete {path})."
        ),
    )


def _hold(path: Path, busy: Callable[[str], str]) -> None:
    import atexit

    from ..rl.checkpoints import _pid_alive

    mine = str(os.getpid())
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                held = path.read_text(encoding="utf-8").strip()
            except OSError:
                held = ""
            if held.isdigit() and held != mine and _pid_alive(int(held)):
                raise ConfigError(busy(held)) from None
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(mine)
        atexit.register(_let_go, path, mine)
        return
    raise ConfigError(f"{path}: another sapo-edge is starting; run this again.")


def _let_go(path: Path, mine: str) -> None:
    try:
        if path.read_text(encoding="utf-8").strip() == mine:
            path.unlink()
    except OSError:
        pass
