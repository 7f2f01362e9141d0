"""A real multi-host LAN on one machine (root, Linux): network namespaces joined by veth pairs
to a bridge that lives in its own namespace (the host's network is not touched). Each namespace
runs `sapo-edge run --headless` on the tiny random Qwen2 with mDNS on: the nodes find each other
by real multicast across the bridge, exchange and train. Then one namespace's link is cut
(partition) and restored: the others drop it, and the heal time is how long until every node
has it back. One run can put a `tc` queueing discipline on every link (`netem` delay/loss where
the kernel has it; the machine these figures come from lacks sch_netem, so there a `tbf` rate limit with a
bounded queue stands in for a slow, congested Wi-Fi); round times are reported.

    OMP_NUM_THREADS=1 .venv/bin/python bench/chaos_lan.py --nodes 3 [--qdisc "netem delay 40ms 10ms loss 2%"]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

FAST = [
    "--domains", "basic_arithmetic", "--questions-per-round", "2", "--group-size", "3",
    "--max-new-tokens", "8", "--local-samples", "1", "--external-samples", "1",
]  # fmt: skip
_CONNECTED = re.compile(r"peer (\S+) \(([0-9a-f]{8})\) connected via (\w+)")
_GONE = re.compile(r"peer (\S+) \(([0-9a-f]{8})\) disconnected")
_LISTENING = re.compile(r"listening on :\d+")
_TRACE = " net-debug "  # SAPO_EDGE_NET_DEBUG=1 lines (bench/netns_repeat.py): not the node's say


def can_netns() -> str:
    """'' when namespaces can be made here, else why not."""
    if not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if not shutil.which("ip"):
        return "no `ip` command (iproute2)"
    probe = f"s16p{os.getpid() % 100000}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode:
        return f"ip netns add is not permitted here: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return ""


def _ip(*args: str, ns: str | None = None, check: bool = True) -> None:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")


class Lan:
    """n namespaces 10.77.0.(i+1)/24 on one bridge (inside a hub namespace); always cleaned up."""

    def __init__(self, n: int) -> None:
        tag = f"{os.getpid() % 100000}"
        self.hub, self.nss = f"s16h{tag}", [f"s16n{i}x{tag}" for i in range(n)]
        self.made: list[str] = []

    def __enter__(self) -> Lan:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _build(self) -> None:
        for ns in [self.hub, *self.nss]:
            _ip("ip", "netns", "add", ns)
            self.made.append(ns)
            _ip("ip", "link", "set", "lo", "up", ns=ns)
        _ip("ip", "link", "add", "br0", "type", "bridge", ns=self.hub)
        _ip("ip", "link", "set", "br0", "type", "bridge", "mcast_snooping", "0", ns=self.hub)
        _ip("ip", "link", "set", "br0", "up", ns=self.hub)
        for i, ns in enumerate(self.nss):
            _ip("ip", "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", ns=self.hub)
            _ip("ip", "link", "set", "eth0", "netns", ns, ns=self.hub)
            _ip("ip", "link", "set", f"p{i}", "master", "br0", ns=self.hub)
            _ip("ip", "link", "set", f"p{i}", "up", ns=self.hub)
            _ip("ip", "addr", "add", f"10.77.0.{i + 1}/24", "dev", "eth0", ns=ns)
            _ip("ip", "link", "set", "eth0", "up", ns=ns)
            _ip("ip", "route", "add", "224.0.0.0/4", "dev", "eth0", ns=ns)

    def cut(self, i: int) -> None:
        _ip("ip", "link", "set", f"p{i}", "down", ns=self.hub)

    def heal(self, i: int) -> None:
        _ip("ip", "link", "set", f"p{i}", "up", ns=self.hub)

    def qdisc(self, spec: str) -> None:
        """`tc qdisc add dev eth0 root SPEC` in every node's namespace."""
        for ns in self.nss:
            try:
                _ip("tc", "qdisc", "add", "dev", "eth0", "root", *spec.split(), ns=ns)
            except RuntimeError as e:
                raise RuntimeError(
                    f"{e} (this kernel lacks that qdisc; `tbf rate 512kbit burst 16kbit "
                    "latency 300ms` works on most)"
                ) from None

    def close(self) -> None:
        for ns in reversed(self.made):
            _ip("ip", "netns", "del", ns, check=False)
        self.made.clear()


class NodeProc:
    """`sapo-edge run --headless` inside a namespace; its output lines, timestamped."""

    def __init__(self, ns: str, name: str, model: Path, work: Path) -> None:
        self.name, self.home, self.lines = name, work / name, []
        self.home.mkdir(parents=True, exist_ok=True)
        secret = work / "room.secret"
        if not secret.exists():
            secret.write_text("a passphrase for the namespace LAN test\n")
            secret.chmod(0o600)
        cmd = ["ip", "netns", "exec", ns, sys.executable, "-u", "-m", "sapo_edge.cli", "run"]
        cmd += ["--headless", "--backend", "cpu", "--model", str(model), *FAST, "--name", name]
        cmd += ["--rounds", "100000", "--room", "lan16", "--secret-file", str(secret)]
        cmd += ["--out-dir", str(work / "runs"), "--checkpoint-every", "0"]
        env = {**os.environ, "SAPO_EDGE_HOME": str(self.home), "OMP_NUM_THREADS": "1"}
        env["PYTHONFAULTHANDLER"] = "1"  # SIGABRT (a node that will not stop) prints every stack
        env["PYTHONPATH"] = str(ROOT)
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.time(), line.rstrip("\n")))

    def links(self) -> dict[str, bool]:
        """Peer id prefix -> linked now, from the node's own 'connected'/'disconnected' lines."""
        state: dict[str, bool] = {}
        for _, ln in list(self.lines):
            if m := _CONNECTED.search(ln):
                state[m.group(2)] = True
            elif m := _GONE.search(ln):
                state[m.group(2)] = False
        return state

    def listening(self) -> bool:
        return any(_LISTENING.search(ln) for _, ln in list(self.lines) if _TRACE not in ln)

    def node_id8(self) -> str:
        for _, ln in self.lines:
            if m := re.search(r"new identity ([0-9a-f]{8})", ln):
                return m.group(1)
        return ""

    def errors(self) -> list[str]:
        """The node's own lines that hold a traceback or the word "error" (trace lines aside)."""
        return [
            ln
            for _, ln in self.lines
            if _TRACE not in ln and ("Traceback" in ln or "error" in ln.lower())
        ]

    def save(self, work: Path) -> None:
        """Its output, timestamped, in work/NAME.out."""
        (work / f"{self.name}.out").write_text("".join(f"{t:.3f} {ln}\n" for t, ln in self.lines))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:  # hung: its threads' stacks first (faulthandler)
                self.proc.send_signal(signal.SIGABRT)
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
        self.reader.join(5)


def _until(pred, timeout: float, step: float = 0.05) -> float | None:
    """Seconds until pred() holds, or None after `timeout`."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if pred():
            return time.time() - t0
        time.sleep(step)
    return None


class _Early(Exception):
    """A node exited before every node listened: the run ends there (and fails)."""


def _exited(procs: list[NodeProc]) -> bool:
    return any(p.proc.poll() is not None for p in procs)


def _failed(out: dict) -> list[str]:
    """The run's pass conditions that did not hold, in words ([] when it passed)."""
    why = []
    if out.get("died_starting"):
        why.append(f"{', '.join(out['died_starting'])} exited while starting")
    if out.get("mesh_s") is None:
        why.append("no full mesh")
    if "lan" not in out.get("linked_via", []):
        why.append("no link dialed to an mDNS advert")
    if out.get("drop_s") is None:
        why.append("the cut node was never dropped")
    if out.get("heal_s") is None:
        why.append("no mesh again after the heal")
    if any(c not in (0, 143) for c in out["exit_codes"]):
        why.append(f"exit codes {out['exit_codes']}")
    for name, r in out["rounds"].items():
        if r["received"] <= 0:
            why.append(f"{name} received nothing in {r['rounds']} rounds")
        if r["errors"]:
            why.append(f"{name} printed errors: {r['errors']}")
    return why


def tails(work: Path, out: dict, lines: int = 40) -> str:
    """The last lines of each node's saved output (trace lines aside) and its pool counters:
    what a failed run's message carries, since CI keeps nothing else of it."""
    parts = []
    for f in sorted(work.glob("n*.out")):
        own = [ln for ln in f.read_text().splitlines() if _TRACE not in ln]
        pool = (out.get("rounds", {}).get(f.stem) or {}).get("pool")
        parts.append(f"--- {f.stem} (pool {pool}):\n" + "\n".join(own[-lines:]))
    return "\n".join(parts)


def run_lan(
    model: Path,
    work: Path,
    n: int = 3,
    qdisc: str = "",
    cut_s: float = 30.0,
    timeout: float = 180.0,
    start_timeout: float = 600.0,
) -> dict:
    """Start n nodes, wait for a full mesh over mDNS, cut node n-1's link for cut_s, heal.
    `qdisc`: a tc queueing discipline for every link ("netem delay 40ms loss 2%").
    `timeout` bounds the mesh from the moment every node listens (start_s, bounded by
    `start_timeout`, is loading the model: 85 s on a loaded 2-core machine), the drop and
    the heal."""
    out: dict = {"nodes": n, "qdisc": qdisc}
    with Lan(n) as lan:
        if qdisc:
            lan.qdisc(qdisc)
        procs = [NodeProc(ns, f"n{i}", model, work) for i, ns in enumerate(lan.nss)]
        try:
            ids = [""] * n

            def meshed() -> bool:
                for i, p in enumerate(procs):
                    ids[i] = ids[i] or p.node_id8()
                if not all(ids):
                    return False
                return all(
                    sum(p.links().get(ids[j], False) for j in range(n) if j != i) == n - 1
                    for i, p in enumerate(procs)
                )

            t0 = time.time()
            out["start_s"] = _until(
                lambda: all(p.listening() for p in procs) or _exited(procs), start_timeout
            )
            if _exited(procs):  # a node died while starting: no point waiting out the bounds
                out["start_s"] = None
                out["died_starting"] = [p.name for p in procs if p.proc.poll() is not None]
                raise _Early()
            out["mesh_s"] = _until(meshed, timeout) if out["start_s"] is not None else None
            # no --peer and no --relay was given: every link was dialed to an mDNS advert (a
            # link the other side dialed first may print "via manual" until its advert is seen)
            out["linked_via"] = sorted(
                {m.group(3) for p in procs for _, ln in p.lines if (m := _CONNECTED.search(ln))}
            )
            time.sleep(5)  # rounds with peers' groups
            k = n - 1
            lan.cut(k)
            t_cut = time.time()
            others = [p for i, p in enumerate(procs) if i != k]
            out["drop_s"] = _until(lambda: not any(p.links().get(ids[k]) for p in others), timeout)
            time.sleep(max(0.0, cut_s - (time.time() - t_cut)))
            lan.heal(k)
            out["heal_s"] = _until(meshed, timeout)
            time.sleep(5)
            out["seconds"] = round(time.time() - t0, 1)
        except _Early:
            pass
        finally:
            for p in procs:
                p.stop()
    out["exit_codes"] = [p.proc.returncode for p in procs]  # 143: stopped by our SIGTERM
    for p in procs:
        p.save(work)
    out["rounds"] = {}
    for p in procs:
        metrics = work / "runs" / p.name / "metrics.jsonl"
        text = metrics.read_text() if metrics.exists() else ""  # none when it died starting
        rows = [json.loads(x) for x in text.splitlines() if x]
        secs = [r["round_seconds"] for r in rows]
        out["rounds"][p.name] = {
            "rounds": len(rows),
            "round_s_p50": round(statistics.median(secs), 3) if secs else None,
            "round_s_max": round(max(secs), 3) if secs else None,
            "received": sum(r["received"] for r in rows),
            "external_trained": sum(r["external_used"] for r in rows),
            "pool": rows[-1]["pool"] if rows else None,
            "errors": p.errors()[:3],
        }
    out["why"] = _failed(out)
    out["ok"] = not out["why"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--qdisc", default="", help='e.g. "netem delay 40ms 10ms loss 2%%"')
    ap.add_argument("--cut", type=float, default=30.0, help="seconds the partition lasts")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "chaos")
    ap.add_argument("--name", default="lan")
    a = ap.parse_args()
    if why := can_netns():
        raise SystemExit(f"skipped: {why}")
    from tiny_model import build_tiny_qwen

    with tempfile.TemporaryDirectory(prefix="sapo-lan-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)
        model = build_tiny_qwen(work / "tiny-qwen")
        result = {}
        try:
            result = run_lan(model, work, a.nodes, a.qdisc, a.cut)
        finally:
            if not result.get("ok"):  # the nodes' own output, to see why
                logs = Path(tempfile.mkdtemp(prefix=f"sapo-{a.name}-logs-"))
                for f in work.glob("n*.out"):
                    shutil.copy(f, logs / f.name)
                print(f"node output kept in {logs}", file=sys.stderr)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"{a.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
