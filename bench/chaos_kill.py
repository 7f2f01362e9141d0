"""Kill harness: SIGKILL a real node process (`sapo-edge run --headless --solo` on the tiny
random Qwen2, torch on CPU) at chosen points of a round (generating, sharing = publishing,
training, saving = inside the checkpoint write), restart it with `--resume`, and check:

- every checkpoint left on disk is complete (COMPLETE marker, manifest sizes and hashes);
- at most the round in flight is lost (rounds recorded before the kill - newest checkpoint <= 1);
- the resumed run ends with byte-identical adapter and optimizer files, and the same per-round
  rewards, as an uninterrupted run (training is deterministic on CPU, so this is the same
  adapter an uninterrupted run from that checkpoint makes).

Plus one disk-full trial (root only: a small tmpfs): a checkpoint write that runs out of space
leaves the previous checkpoint usable and the user is told; after freeing space, --resume
finishes with the same adapter.

Speed: the harness imports torch once and forks each node process from itself (a real,
separate process running the real CLI: `sapo_edge.cli.main(argv)`), so a trial costs seconds.
Where in the round a kill lands is read from a shared page the child's callback writes its
phase into (harness instrumentation only; the node code is unchanged).

    OMP_NUM_THREADS=1 .venv/bin/python bench/chaos_kill.py --trials 100 --out docs/chaos
"""

from __future__ import annotations

import argparse
import hashlib
import json
import mmap
import os
import random
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (str(ROOT), str(ROOT / "tests")):
    if p not in sys.path:
        sys.path.insert(0, p)

from sapo_edge.rl.checkpoints import _problem, find_latest, list_checkpoints  # noqa: E402

FAST = [
    "--domains", "basic_arithmetic", "--questions-per-round", "2", "--group-size", "3",
    "--max-new-tokens", "8", "--local-samples", "1", "--external-samples", "0",
]  # fmt: skip
PHASES = ("sampling", "generating", "scoring", "sharing", "training", "saving")
TARGETS = ("generating", "sharing", "training", "saving")  # sharing = publishing
NAME = "kill"
_TAP = struct.Struct("<ii")  # (round, phase index + 1) the child is in
_WATCH_S = 120.0
# how long after a phase starts the kill may land (s): about each phase's length on the tiny
# model, so most kills land inside the phase named (where they land is recorded, not assumed)
_SPREAD = {
    "generating": 0.02,
    "sharing": 0.0002,
    "training": 0.002,
    "saving": 0.004,
}  # no trial waits longer than this for a phase or an exit


def node_argv(model: Path, out: Path, rounds: int, resume: bool) -> list[str]:
    argv = ["run", "--headless", "--solo", "--backend", "cpu", "--model", str(model), *FAST]
    argv += ["--name", NAME, "--seed", "7", "--rounds", str(rounds), "--checkpoint-every", "1"]
    argv += ["--keep-checkpoints", "2", "--out-dir", str(out)]
    return argv + (["--resume"] if resume else [])


def preload() -> None:
    """Import the heavy modules once, before any fork (no torch op runs in this process)."""
    import sapo_edge.backends.torch_backend  # noqa: F401
    import sapo_edge.cli  # noqa: F401
    import sapo_edge.run.runner  # noqa: F401


def spawn(argv: list[str], log: Path, tap: mmap.mmap | None = None, fire=None) -> int:
    """Fork a node process running the real CLI; its output goes to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    pid = os.fork()
    if pid:
        return pid
    code = 70
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # not a test runner's capture
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        if tap is not None:
            from sapo_edge.rl.metrics import PrintCallback

            def on_phase(self, node, phase: str) -> None:
                tap[: _TAP.size] = _TAP.pack(node.round, PHASES.index(phase) + 1)
                if fire and node.round >= fire[0] and phase == fire[1]:
                    os.write(fire[2], b"x")  # the harness is told at once (no polling)
                    fire.clear()

            PrintCallback.on_phase = on_phase
        from sapo_edge.cli import main

        code = main(argv)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def wait(pid: int, timeout: float = _WATCH_S) -> int:
    """Exit status of a child; killed (and -9 returned) past `timeout`."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return -9


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""


def fingerprint(node_dir: Path) -> dict:
    """The newest checkpoint's round, adapter and optimizer hashes, and per-round rewards."""
    ckpt = find_latest(node_dir / "checkpoints", log=lambda _m: None)
    metrics = node_dir / "metrics.jsonl"
    lines = metrics.read_text().splitlines() if metrics.exists() else []
    out = {
        "round": ckpt.round if ckpt else -1,
        "rewards": [json.loads(x)["reward_mean"] for x in lines if x],
    }
    if ckpt:
        for f in sorted(ckpt.path.iterdir()):
            if f.suffix in (".safetensors", ".pt", ".bin"):
                out[f.name] = _sha(f)
    return out


def run_through(model: Path, out: Path, rounds: int, resume: bool = False) -> tuple[int, dict]:
    rc = wait(
        spawn(node_argv(model, out, rounds, resume), out / ("resume.log" if resume else "run.log"))
    )
    return rc, fingerprint(out / NAME)


def _read_tap(tap: mmap.mmap) -> tuple[int, str]:
    r, code = _TAP.unpack(tap[: _TAP.size])
    return r, PHASES[code - 1] if code else ""


def kill_trial(
    model: Path, out: Path, rounds: int, target: str, at_round: int, delay: float, ref: dict
) -> dict:
    """One kill at (`at_round`, `target` phase) + `delay` seconds, then --resume to the end."""
    tap = mmap.mmap(-1, mmap.PAGESIZE)
    rfd, wfd = os.pipe()
    pid = spawn(node_argv(model, out, rounds, False), out / "run.log", tap, [at_round, target, wfd])
    os.close(wfd)
    ready, _, _ = select.select([rfd], [], [], _WATCH_S)
    fired = bool(ready) and os.read(rfd, 1) == b"x"
    os.close(rfd)
    exited = None
    if fired:
        time.sleep(delay)
        r, phase = _read_tap(tap)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    else:  # it finished (or hung) before reaching that point: not a kill, reported apart
        exited = wait(pid)
        r, phase = _read_tap(tap)
    node = out / NAME
    ckdir = node / "checkpoints"
    debris = sorted(p.name for p in ckdir.glob(".tmp-*")) if ckdir.is_dir() else []
    skipped: list[str] = []
    latest = find_latest(ckdir, log=skipped.append)
    broken = [p.name for p in list_checkpoints(ckdir) if _problem(p) is not None]
    metrics = node / "metrics.jsonl"
    recorded = len(metrics.read_text().splitlines()) if metrics.exists() else 0
    saved = latest.round if latest else 0
    rc, fp = run_through(model, out, rounds, resume=True)
    same = {k: v for k, v in fp.items() if k != "round"} == {
        k: v for k, v in ref.items() if k != "round"
    }
    return {
        "target": target,
        "killed_in": phase if exited is None else "exited",
        "killed_round": r,
        "delay_ms": round(delay * 1000, 2),
        "debris": debris,  # a .tmp- dir left: the kill landed inside a checkpoint write
        "skipped": skipped,
        "broken_complete": broken,
        "recorded_before": recorded,
        "newest_checkpoint": latest.round if latest else None,
        "rounds_lost": recorded - saved,
        "resume_rc": rc,
        "final_round": fp["round"],
        "same_as_uninterrupted": same,
        "killed": exited is None,
        "survived": exited is None and rc == 0 and not broken and same and recorded - saved <= 1,
    }


def run_kills(model: Path, work: Path, trials: int, rounds: int, seed: int, log=print) -> dict:
    preload()
    rc, ref = run_through(model, work / "ref", rounds)
    rc2, ref2 = run_through(model, work / "ref2", rounds)
    if rc or rc2 or ref != ref2:
        raise SystemExit(f"uninterrupted runs differ or failed (rc {rc}/{rc2}): no baseline")
    rng = random.Random(seed)
    rows = []
    for i in range(trials):
        target = TARGETS[i % len(TARGETS)]
        # the checkpoint write of the tiny model takes a few ms; phases of a round tens of ms
        delay = rng.uniform(0, _SPREAD[target])
        row = kill_trial(
            model, work / f"t{i:03d}", rounds, target, rng.randrange(rounds - 1), delay, ref
        )
        rows.append(row)
        log(
            f"trial {i:3d}: {row['target']:>10} -> killed in {row['killed_in']:<10} round "
            f"{row['killed_round']} debris {len(row['debris'])} lost {row['rounds_lost']} "
            f"{'ok' if row['survived'] else 'FAILED'}"
        )
        shutil.rmtree(work / f"t{i:03d}", ignore_errors=True)
    return {"rounds": rounds, "reference": ref, "trials": rows, "summary": summarize(rows)}


def summarize(rows: list[dict]) -> dict:
    return {
        "tried": sum(r["killed"] for r in rows),
        "survived": sum(r["survived"] for r in rows),
        "not_killed": sum(not r["killed"] for r in rows),
        "killed_in": dict(Counter(r["killed_in"] for r in rows)),
        "inside_checkpoint_write": sum(bool(r["debris"]) for r in rows),
        "checkpoints_lost": sum(len(r["broken_complete"]) for r in rows),
        "no_checkpoint_after_kill": sum(r["newest_checkpoint"] is None for r in rows),
        "rounds_lost": dict(Counter(r["rounds_lost"] for r in rows)),
        "max_rounds_lost": max((r["rounds_lost"] for r in rows), default=0),
        "same_adapter": sum(r["same_as_uninterrupted"] for r in rows),
    }


# ---------------------------------------------------------------------------- disk full
def can_mount() -> str:
    """'' when this process may mount a tmpfs, else why not."""
    if os.name != "posix" or not sys.platform.startswith("linux"):
        return "disk-full trial needs Linux (tmpfs)"
    if os.geteuid() != 0:
        return "disk-full trial needs root to mount a small tmpfs"
    if not shutil.which("mount"):
        return "no mount command"
    return ""


def disk_full_trial(model: Path, work: Path, rounds: int = 4) -> dict:
    """Run 2 rounds on a small tmpfs, fill it, resume to `rounds` (the save fails: the user is
    told, the round-2 checkpoint stays loadable), free the space and resume to the end."""
    preload()
    _, ref = run_through(model, work / "ref-full", rounds)
    mnt = Path(tempfile.mkdtemp(prefix="sapo-full-", dir=work))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], check=True)
    try:
        out = mnt / "run"
        rc1, fp1 = run_through(model, out, 2)
        filler = mnt / "filler"
        with open(filler, "wb") as f:  # take every free byte, then give back less than a save
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        one = sum(p.stat().st_size for p in (out / NAME / "checkpoints").glob("round-*/*"))
        with open(filler, "r+b") as f:
            f.truncate(max(0, filler.stat().st_size - one // 3))
        rc2, fp2 = run_through(model, out, rounds, resume=True)
        said = (out / "resume.log").read_text(errors="replace")
        usable = find_latest(out / NAME / "checkpoints", log=lambda _m: None)
        filler.unlink()
        rc3, fp3 = run_through(model, out, rounds, resume=True)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        shutil.rmtree(mnt, ignore_errors=True)
    told = [ln for ln in said.splitlines() if "no space left" in ln.lower()]
    return {
        "first_rc": rc1,
        "full_rc": rc2,
        "told": told[:3],
        "traceback": "Traceback" in said,
        "usable_round_when_full": usable.round if usable else None,
        "recovered_rc": rc3,
        "same_as_uninterrupted": {k: v for k, v in fp3.items() if k != "round"}
        == {k: v for k, v in ref.items() if k != "round"},
        "ok": rc1 == 0
        and rc2 != 0
        and bool(told)
        and "Traceback" not in said
        and usable is not None
        and usable.round >= 2
        and rc3 == 0
        and fp3 == ref,
    }


# ---------------------------------------------------------------------------- report
def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["trials"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    where = Counter(("in checkpoint write" if r["debris"] else r["killed_in"]) for r in rows)
    ok = Counter(
        ("in checkpoint write" if r["debris"] else r["killed_in"]) for r in rows if r["survived"]
    )
    keys = sorted(where)
    a.bar(keys, [where[k] for k in keys], color="#ccc", label="killed")
    a.bar(keys, [ok[k] for k in keys], color="#2a7", width=0.5, label="survived (same adapter)")
    a.set_title("Where the SIGKILL landed")
    a.tick_params(axis="x", rotation=30)
    a.legend()
    lost = Counter(r["rounds_lost"] for r in rows)
    b.bar([str(k) for k in sorted(lost)], [lost[k] for k in sorted(lost)], color="#37a")
    b.set_title("Rounds lost per kill")
    b.set_xlabel("rounds recorded before the kill minus newest checkpoint")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", type=Path, help="default: build the tiny random Qwen2")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "chaos")
    ap.add_argument("--no-disk-full", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="sapo-kill-") as tmp:
        work = Path(tmp)
        model = args.model
        if model is None:
            from tiny_model import build_tiny_qwen

            model = build_tiny_qwen(work / "tiny-qwen")
        t0 = time.time()
        result = run_kills(model, work, args.trials, args.rounds, args.seed)
        why = can_mount()
        if args.no_disk_full:
            result["disk_full"] = {"skipped": "--no-disk-full"}
        elif why:
            result["disk_full"] = {"skipped": why}
        else:
            result["disk_full"] = disk_full_trial(model, work)
        result["seconds"] = round(time.time() - t0, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "kills.json").write_text(json.dumps(result, indent=1) + "\n")
    plot(result, args.out / "kills.png")
    print(json.dumps({"summary": result["summary"], "disk_full": result["disk_full"]}, indent=1))


if __name__ == "__main__":
    main()
