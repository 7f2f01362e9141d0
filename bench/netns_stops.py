"""Stop the namespace LAN's nodes at random moments, N times, and count the runs where a node
printed a traceback or an error, or exited with a code other than 0 or 143 (its SIGTERM). Each
run: 3 `sapo-edge run` processes on a bridge (bench/chaos_lan.py), a random wait once all listen,
every other run a cut link first, then SIGTERM to all. It found the exit traceback of
docs/reliability.md (1 run in 16 before the fix, 0 in 20 after). Root, Linux.

    OMP_NUM_THREADS=1 .venv/bin/python bench/netns_stops.py --runs 20
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

import chaos_lan  # noqa: E402


def one_run(model: Path, work: Path, rng: random.Random, cut: bool) -> list[str]:
    """What went wrong in one run ([] when every node stopped cleanly)."""
    with chaos_lan.Lan(3) as lan:
        procs = [chaos_lan.NodeProc(ns, f"n{i}", model, work) for i, ns in enumerate(lan.nss)]
        try:
            if chaos_lan._until(lambda: all(p.listening() for p in procs), 600) is None:
                return ["the nodes did not all listen within 600 s"]
            time.sleep(rng.uniform(0.5, 6.0))
            if cut:
                lan.cut(2)
                time.sleep(rng.uniform(0.2, 3.0))
        finally:
            for p in procs:
                p.stop()
    bad = [
        f"{p.name} exited {p.proc.returncode}" for p in procs if p.proc.returncode not in (0, 143)
    ]
    for p in procs:
        bad += [f"{p.name}: {ln}" for ln in p.errors()]
        p.save(work)
    return bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if why := chaos_lan.can_netns():
        raise SystemExit(f"skipped: {why}")
    from tiny_model import build_tiny_qwen

    rng = random.Random(a.seed)
    keep = Path(tempfile.mkdtemp(prefix="sapo-netns-stops-"))
    keep.chmod(0o755)
    model = build_tiny_qwen(keep / "tiny-qwen")
    failed = 0
    for i in range(a.runs):
        work = keep / f"run{i}"
        work.mkdir()
        work.chmod(0o755)
        bad = one_run(model, work, rng, cut=bool(i % 2))
        failed += bool(bad)
        print(
            f"run {i + 1}/{a.runs}: {'FAIL ' + '; '.join(bad[:3]) if bad else 'clean'}", flush=True
        )
    print(f"tally: {a.runs - failed} clean, {failed} not, of {a.runs} (node output in {keep})")


if __name__ == "__main__":
    main()
