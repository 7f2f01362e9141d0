"""Soak: N model-free node processes (each a real NetworkTransport: handshakes, signing,
sealing, the relay's checks and every receiver's validation) plus `sapo-edge relay`, for a
set time on loopback, with churn every few seconds: kills (SIGKILL, restarted later), leaves
(SIGTERM, back later), restarts and guests joining with a fresh identity. Nodes 0-2 are never
churned, so their memory and file descriptors show growth over the whole run. Node 0 also
listens on a fixed port that every other node dials, so batches travel two routes (relay and
direct) and duplicates are exercised.

Reported: delivery ratio (a batch published while sender and receiver were both up, and both
stayed up 5 s after, counts as expected), rejections by reason at every node and at the relay
(honest traffic: expected 0), RSS and open fds of the stable processes sampled over time
(growth per hour: least squares over the run after the first 10%), relay latency p50/p99
(publish -> delivery between two nodes that only share the relay).

    OMP_NUM_THREADS=1 .venv/bin/python bench/chaos_soak.py --minutes 30 --out docs/chaos
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROOM, SECRET = "soak", "soak room passphrase for the chaos harness"
GRACE_S = 5.0  # a receiver must stay up this long after a publish to be expected to get it
STABLE = 3  # nodes 0..STABLE-1 are never churned
_LINK = {"closed", "no_pong", "timeout", "ws_error"}  # connection events, not messages


# ---------------------------------------------------------------------------- one node
def node_main(a: argparse.Namespace) -> None:
    """A node process: publish a batch every --period s, record what arrives and when."""
    sys.path.insert(0, str(ROOT / "bench"))
    from scale_nodes import Shape, make_batch

    from sapo_edge.data.rollout import decode_batch
    from sapo_edge.swarm.identity import load_or_create
    from sapo_edge.swarm.network import NetworkTransport

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    ident, _ = load_or_create(a.identity)
    log = open(a.log, "a", buffering=1)
    t = NetworkTransport(
        ident,
        room=ROOM,
        secret=SECRET,
        listen=f"127.0.0.1:{a.port}",
        peers=a.peer,
        relay=a.relay,
        mdns=False,
        heartbeat=2.0,
        reconnect_base=0.3,
        reconnect_max=5.0,
        log=lambda m: log.write(f"{time.time():.3f} {m}\n"),
    ).start()
    ev = open(a.events, "a", buffering=1)
    rng = random.Random(a.seed)
    shape = Shape(groups=2, completions=4, chars=300, question_chars=100)
    relay_key = f"relay:{a.relay}"
    ready = t.wait_for(lambda: relay_key in t.connected(), 30.0) if a.relay else True
    ev.write(json.dumps({"ev": "ready" if ready else "no_relay", "t": time.time()}) + "\n")
    round_ = int(time.time() * 10)  # grows across restarts: never a stale round
    end = time.time() + a.seconds
    next_pub = time.time() + rng.uniform(0, a.period)
    seen = [0]

    def arrived() -> bool:
        return t.counters["delivered"] != seen[0]

    while not stop and time.time() < end:
        now = time.time()
        if now >= next_pub:
            round_ += 1
            t.publish(make_batch(ident, round_, shape, rng))
            ev.write(json.dumps({"ev": "pub", "r": round_, "t": now}) + "\n")
            next_pub = now + a.period
        t.wait_for(arrived, max(0.0, min(0.5, next_pub - time.time())))
        seen[0] = t.counters["delivered"]
        got = time.time()
        for sender, payload in t.receive():
            rounds = sorted({g.round for g in decode_batch(payload)})
            ev.write(json.dumps({"ev": "recv", "s": sender, "r": rounds[0], "t": got}) + "\n")
        tmp = a.stats + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"counters": dict(t.counters), "connected": t.connected(), "t": got}, f)
        os.replace(tmp, a.stats)
    t.close()
    ev.write(json.dumps({"ev": "stop", "t": time.time()}) + "\n")


# ---------------------------------------------------------------------------- supervisor
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s")


def rss_fds(pid: int) -> tuple[float, int] | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            kb = next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:"))
        return kb / 1024, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, StopIteration):
        return None


def start_relay(port: int, work: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "sapo_edge.cli", "relay", "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "--max-connections-per-ip", "128"]
    log = open(work / "relay.log", "ab")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    _wait_port(port)
    return p


class Swarm:
    """The node processes: start, kill, stop; every incarnation's files and life span."""

    def __init__(self, work: Path, relay_url: str, hub_port: int, seconds: float, period: float):
        self.work, self.relay_url, self.hub_port = work, relay_url, hub_port
        self.seconds, self.period = seconds, period
        self.procs: dict[str, subprocess.Popen] = {}
        self.lives: list[dict] = []  # name, start, end, events, stats, how it ended

    def start(self, name: str) -> None:
        n = sum(1 for x in self.lives if x["name"] == name)
        base = self.work / f"{name}.{n}"
        port = self.hub_port if name == "node-0" else 0
        cmd = [sys.executable, str(Path(__file__).resolve()), "node", "--identity"]
        cmd += [str(self.work / f"{name}.key"), "--relay", self.relay_url, "--port", str(port)]
        if name != "node-0":
            cmd += ["--peer", f"127.0.0.1:{self.hub_port}"]
        cmd += ["--events", f"{base}.events", "--stats", f"{base}.stats", "--log", f"{base}.log"]
        cmd += ["--seconds", str(self.seconds + 60), "--period", str(self.period)]
        cmd += ["--seed", str(len(self.lives))]
        err = open(f"{base}.err", "ab")
        self.procs[name] = subprocess.Popen(cmd, stdout=err, stderr=subprocess.STDOUT, cwd=ROOT)
        self.lives.append(
            {"name": name, "start": time.time(), "end": None, "base": str(base), "how": ""}
        )

    def end(self, name: str, how: str) -> None:
        p = self.procs.pop(name, None)
        if p is None:
            return
        life = next(x for x in reversed(self.lives) if x["name"] == name)
        life["end"], life["how"] = time.time(), how
        if how == "kill":
            p.kill()
        else:
            p.terminate()
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)
            life["how"] += "+forced"


def run_soak(
    minutes: float, nodes: int, period: float, seed: int, work: Path, log=print, every=(2.0, 6.0)
) -> dict:
    rng = random.Random(seed)
    seconds = minutes * 60
    relay_port, hub_port = _free_port(), _free_port()
    relay = start_relay(relay_port, work)
    relay_url = f"ws://127.0.0.1:{relay_port}"
    swarm = Swarm(work, relay_url, hub_port, seconds, period)
    samples: list[dict] = []
    churn = Counter()
    pending: list[tuple[float, str]] = []  # (when, name) to start again
    guests = 0
    try:
        for i in range(nodes):
            swarm.start(f"node-{i}")
            if i == 0:
                _wait_port(hub_port)
        t0 = time.time()
        next_event = t0 + rng.uniform(*every)
        next_sample = t0
        while time.time() - t0 < seconds:
            now = time.time()
            for when, name in [p for p in pending if p[0] <= now and p[1][0] != "!"]:
                pending.remove((when, name))
                swarm.start(name)
            if now >= next_event:
                next_event = now + rng.uniform(*every)
                up = [n for n in swarm.procs if int(n.split("-")[1]) >= STABLE]
                what = rng.choice(["kill", "leave", "restart", "join"])
                if what == "join" and len([n for n in swarm.procs if n.startswith("guest")]) < 2:
                    guests += 1
                    name = f"guest-{guests}"
                    swarm.start(name)
                    pending.append((now + rng.uniform(20, 60), f"!{name}"))  # leaves later
                    churn["join"] += 1
                elif up and what != "join":
                    name = rng.choice(up)
                    swarm.end(name, "kill" if what == "kill" else "term")
                    if not name.startswith("guest"):
                        back = 0.0 if what == "restart" else rng.uniform(1, 8)
                        pending.append((time.time() + back, name))
                    churn[what] += 1
            for when, tag in [p for p in pending if p[1].startswith("!") and p[0] <= now]:
                pending.remove((when, tag))
                swarm.end(tag[1:], "term")
                churn["guest_left"] += 1
            if now >= next_sample:
                next_sample = now + 5.0
                row = {"t": now - t0}
                for name, pid in [("relay", relay.pid)] + [
                    (f"node-{i}", swarm.procs[f"node-{i}"].pid) for i in range(STABLE)
                ]:
                    got = rss_fds(pid)
                    if got:
                        row[name] = got
                samples.append(row)
                if len(samples) % 12 == 0:
                    log(f"soak {now - t0:6.0f} s: {dict(churn)} relay rss {row['relay'][0]:.1f} MB")
            time.sleep(0.1)
        duration = time.time() - t0
    finally:
        for name in list(swarm.procs):
            swarm.end(name, "term")
        relay_stats = _relay_stats(relay_port)
        relay.terminate()
        try:
            relay.wait(10)
        except subprocess.TimeoutExpired:
            relay.kill()
    return analyse(swarm.lives, samples, relay_stats, duration, churn, nodes, period)


def _relay_stats(port: int) -> dict:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5) as r:
            return json.loads(r.read(1 << 20))
    except (OSError, ValueError) as e:
        return {"error": str(e)}


def _read(path: str) -> list[dict]:
    out = []
    try:
        for ln in open(path):
            try:
                out.append(json.loads(ln))
            except ValueError:
                pass  # a line cut by a kill
    except OSError:
        pass
    return out


def _slope_per_hour(points: list[tuple[float, float]]) -> float:
    if len(points) < 3:
        return 0.0
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    return 0.0 if var == 0 else sum((t - mx) * (v - my) for t, v in points) / var * 3600


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def analyse(lives, samples, relay_stats, duration, churn, nodes, period) -> dict:
    ids: dict[str, str] = {}
    for life in lives:  # identity file -> node id (each name keeps its key across restarts)
        from sapo_edge.swarm.identity import load_or_create

        key = Path(life["base"]).parent / f"{life['name']}.key"
        if key.exists():
            ids[life["name"]] = load_or_create(key)[0].node_id
        life["events"] = _read(life["base"] + ".events")
        ready = [e["t"] for e in life["events"] if e["ev"] == "ready"]
        life["ready"] = ready[0] if ready else None
        stop = [e["t"] for e in life["events"] if e["ev"] == "stop"]
        life["end"] = life["end"] or (stop[0] if stop else time.time())
        try:
            life["stats"] = json.load(open(life["base"] + ".stats"))
        except (OSError, ValueError):
            life["stats"] = {"counters": {}}
    pubs = []  # (sender name, round, t, sender life)
    got: dict[str, set] = {}  # receiver name -> {(sender id, round)}
    recv_t: dict[tuple[str, str, int], float] = {}
    for life in lives:
        for e in life["events"]:
            if e["ev"] == "pub":
                pubs.append((life["name"], e["r"], e["t"], life))
            elif e["ev"] == "recv":
                got.setdefault(life["name"], set()).add((e["s"], e["r"]))
                recv_t.setdefault((life["name"], e["s"], e["r"]), e["t"])
    up = [(x["name"], x["ready"], x["end"]) for x in lives if x["ready"]]
    expected = delivered = 0
    lat = []
    for sender, r, t, life in pubs:
        if life["end"] < t + GRACE_S:
            continue  # the sender went away right after publishing
        sid = ids.get(sender)
        for name in {n for n, a, b in up if n != sender and a <= t and b >= t + GRACE_S}:
            expected += 1
            if (sid, r) in got.get(name, ()):
                delivered += 1
                if "node-0" not in (name, sender):  # they share only the relay
                    lat.append(recv_t[(name, sid, r)] - t)
    rejected: Counter = Counter()
    counters: Counter = Counter()
    for life in lives:
        for k, v in life["stats"].get("counters", {}).items():
            counters[k] += v
            if k.startswith("rejected:"):
                rejected[k.split(":", 1)[1]] += v
    growth = {}
    start = duration * 0.1
    for name in ["relay"] + [f"node-{i}" for i in range(STABLE)]:
        pts = [(s["t"], s[name]) for s in samples if name in s and s["t"] >= start]
        if pts:
            growth[name] = {
                "rss_mb_first": round(pts[0][1][0], 1),
                "rss_mb_last": round(pts[-1][1][0], 1),
                "rss_mb_per_hour": round(_slope_per_hour([(t, v[0]) for t, v in pts]), 2),
                "fds_first": pts[0][1][1],
                "fds_last": pts[-1][1][1],
                "fds_per_hour": round(_slope_per_hour([(t, v[1]) for t, v in pts]), 2),
            }
    return {
        "duration_s": round(duration, 1),
        "nodes": nodes,
        "period_s": period,
        "incarnations": len(lives),
        "churn": dict(churn),
        "published": len(pubs),
        "expected_deliveries": expected,
        "delivered": delivered,
        "delivery_ratio": round(delivered / expected, 5) if expected else None,
        "rejected_by_reason": dict(rejected),
        "relay": {
            k: relay_stats.get(k)
            for k in (
                "messages_forwarded",
                "messages_dropped",
                "rejected",
                "connections_refused",
                "error",
            )
            if k in relay_stats
        },
        "counters": {k: v for k, v in counters.items() if not k.startswith("rejected:")},
        "relay_latency_ms": {
            "n": len(lat),
            "p50": round(_pct(lat, 0.5) * 1000, 2),
            "p99": round(_pct(lat, 0.99) * 1000, 2),
        },
        "growth": growth,
        "samples": samples,
    }


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    for name in result["growth"]:
        pts = [(s["t"] / 60, s[name]) for s in result["samples"] if name in s]
        a.plot([t for t, _ in pts], [v[0] for _, v in pts], label=name)
        b.plot([t for t, _ in pts], [v[1] for _, v in pts], label=name)
    a.set_title("RSS (MB) of the stable processes")
    b.set_title("open file descriptors")
    for ax in (a, b):
        ax.set_xlabel("minutes")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    n = sub.add_parser("node")
    n.add_argument("--identity", required=True)
    n.add_argument("--relay", default="", help="none: direct links only (--peer)")
    n.add_argument("--port", type=int, default=0)
    n.add_argument("--peer", action="append", default=[])
    n.add_argument("--events", required=True)
    n.add_argument("--stats", required=True)
    n.add_argument("--log", required=True)
    n.add_argument("--seconds", type=float, required=True)
    n.add_argument("--period", type=float, default=2.0)
    n.add_argument("--seed", type=int, default=0)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--period", type=float, default=2.0, help="seconds between a node's batches")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "chaos")
    ap.add_argument("--name", default="soak", help="output file stem")
    ap.add_argument("--check", action="store_true", help="exit 1 unless the figures are clean")
    a = ap.parse_args()
    if a.cmd == "node":
        node_main(a)
        return
    with tempfile.TemporaryDirectory(prefix="sapo-soak-") as tmp:
        result = run_soak(a.minutes, a.nodes, a.period, a.seed, Path(tmp))
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"{a.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    plot(result, a.out / f"{a.name}.png")
    brief = {k: v for k, v in result.items() if k != "samples"}
    print(json.dumps(brief, indent=1))
    if a.check and (problems := check(result)):
        raise SystemExit("soak check failed: " + "; ".join(problems))


def check(result: dict) -> list[str]:
    """What is wrong with a soak's figures (honest traffic: nothing lost, nothing rejected)."""
    out = []
    if not result["expected_deliveries"] or result["delivery_ratio"] < 0.99:
        out.append(f"delivery ratio {result['delivery_ratio']} (want >= 0.99)")
    # a handshake cut short or a link gone silent is what a kill does to a connection, not a
    # message refused: reported, not a failure (at the nodes as at the relay)
    honest = {k: v for k, v in result["rejected_by_reason"].items() if k not in _LINK}
    if honest:
        out.append(f"honest batches rejected: {honest}")
    refused = {k: v for k, v in (result["relay"].get("rejected") or {}).items() if k not in _LINK}
    if refused:
        out.append(f"the relay rejected: {refused}")
    if not result["churn"]:
        out.append("no churn happened")
    return out


if __name__ == "__main__":
    main()
