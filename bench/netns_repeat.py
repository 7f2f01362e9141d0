"""Run the namespace LAN test (`tests/test_chaos_lan.py`: 3 `sapo-edge run` processes on a
bridge, mDNS, a cut and a heal) N times in a row and print the tally. Same parameters and the
same pass conditions as the test; the nodes run with SAPO_EDGE_NET_DEBUG=1, so a failed run's
kept output shows every advert, dial, handshake and link decision in order. Root, Linux.

    nice -n 19 OMP_NUM_THREADS=1 .venv/bin/python bench/netns_repeat.py --runs 10
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

import chaos_lan  # noqa: E402


def passed(got: dict) -> str:
    """'' when the run meets tests/test_chaos_lan.py's conditions, else which one failed."""
    if not got.get("ok"):
        keys = ("start_s", "mesh_s", "linked_via", "drop_s", "heal_s", "exit_codes")
        return (
            "not ok: "
            + "; ".join(got.get("why", []))
            + " "
            + json.dumps({k: got.get(k) for k in keys})
        )
    if got["heal_s"] >= 70.0:
        return f"heal took {got['heal_s']:.1f} s"
    if any(r["round_s_max"] >= 30.0 for r in got["rounds"].values()):
        return "a round took 30 s or more"
    return ""


def _s(v) -> str:
    return "-" if v is None else f"{v:.1f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=150.0, help="the test's mesh/heal bound")
    ap.add_argument("--pools", action="store_true", help="print each node's pool counters")
    ap.add_argument("--keep", type=Path, default=None, help="where failed runs' logs go")
    a = ap.parse_args()
    if why := chaos_lan.can_netns():
        raise SystemExit(f"skipped: {why}")
    os.environ["SAPO_EDGE_NET_DEBUG"] = "1"  # inherited by the node processes
    from tiny_model import build_tiny_qwen

    keep = a.keep or Path(tempfile.mkdtemp(prefix="sapo-netns-repeat-"))
    tally = {"pass": 0, "fail": 0}
    with tempfile.TemporaryDirectory(prefix="sapo-netns-") as tmp:
        base = Path(tmp)
        os.chmod(base, 0o755)
        model = build_tiny_qwen(base / "tiny-qwen")
        for i in range(a.runs):
            work = base / f"run{i}"
            work.mkdir()
            work.chmod(0o755)
            t0 = time.time()
            try:
                got = chaos_lan.run_lan(model, work, n=3, cut_s=8.0, timeout=a.timeout)
                why = passed(got)
            except Exception as e:  # noqa: BLE001 - a harness failure is a failed run, counted
                got, why = {}, f"{type(e).__name__}: {e}"
            tally["fail" if why else "pass"] += 1
            line = f"run {i + 1}/{a.runs}: {'FAIL ' + why if why else 'pass'}"
            line += f" (start {_s(got.get('start_s'))}, mesh {_s(got.get('mesh_s'))}, "
            line += f"drop {_s(got.get('drop_s'))}, heal {_s(got.get('heal_s'))}, "
            line += f"{time.time() - t0:.0f} s)"
            rounds = got.get("rounds", {})
            line += "; recv " + ", ".join(
                f"{k} {r['received']}/{r['rounds']}r" for k, r in sorted(rounds.items())
            )
            if a.pools:
                for k, r in sorted(rounds.items()):
                    pool = {n: v for n, v in (r.get("pool") or {}).items() if v}
                    line += f"\n  {k} pool {json.dumps(pool)}"
            print(line, flush=True)
            if why:
                dest = keep / f"run{i}"
                dest.mkdir(parents=True, exist_ok=True)
                for f in work.glob("n*.out"):
                    shutil.copy(f, dest / f.name)
                (dest / "result.json").write_text(json.dumps(got, indent=1) + "\n")
                print(f"  node output kept in {dest}", flush=True)
    print(f"tally: {tally['pass']} passed, {tally['fail']} failed of {a.runs}")


if __name__ == "__main__":
    main()
