"""Scale harness (a benchmark, not a test): N model-free simulated nodes (bench/scale_nodes.py)
on loopback, against a 3-server NATS cluster (sharded room) or the websocket relay (every node
gets everything), for a few rounds. Per node and round: inbound bytes and groups, CPU ms of the
real checks, delivery ratio, latency p50/p99; per run: the servers' memory (RSS) and CPU.

Usage: `.venv/bin/python bench/scale.py --nodes 10,100,1000 --transports nats,ws
[--ws-max 100] [--rounds 3] [--warmup 4] [--workers 4] [--budget 64] [--out docs/scale]`.
Nodes run in --workers processes, many per asyncio loop; over NATS each node has its own client
connection (--multiplex K shares one among K nodes). Writes OUT/results.json, OUT/table.md and
OUT/scale.png (matplotlib, the `bench` extra).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

from nats_util import NatsCluster, nats_server_binary  # noqa: E402
from scale_nodes import NatsSimNode, Shape, WsSimNode, leaf_matches  # noqa: E402

from sapo_edge.swarm.roomkey import new_room_key, room_keys  # noqa: E402


# ----------------------------------------------------------------------------- worker side
def worker_main(conn, kind: str, target, count: int, seed: int, opts: dict) -> None:
    try:
        asyncio.run(_worker(conn, kind, target, count, seed, opts))
    except Exception as e:  # noqa: BLE001 - told to the coordinator, which stops the run
        conn.send(("error", repr(e)))


async def _worker(conn, kind: str, target, count: int, seed: int, opts: dict) -> None:
    import nats

    from sapo_edge.swarm.guard import raise_fd_limit

    raise_fd_limit(count * 2 + 256)
    keys = room_keys("scale", opts["code"])
    shape = Shape(**opts["shape"])
    loop = asyncio.get_running_loop()
    nodes, conns = [], []
    if kind == "nats":
        per = max(1, opts["multiplex"])
        for i in range(count):
            if i % per == 0:
                first = target[(seed + i) % len(target)]
                conns.append(
                    await nats.connect(
                        [first] + [u for u in target if u != first],
                        dont_randomize=True,
                        max_reconnect_attempts=-1,
                        reconnect_time_wait=0.5,
                        pending_size=64 << 20,
                    )
                )
            nodes.append(
                NatsSimNode(
                    keys,
                    shape,
                    seed * 100_000 + i,
                    conns[-1],
                    budget_groups=opts["budget"],
                    tick_s=opts["tick_s"],
                    round_s=opts["round_s"],
                )
            )
        for n in nodes:
            await n.start()
    else:
        nodes = [WsSimNode(keys, shape, seed * 100_000 + i, target) for i in range(count)]
        sem = asyncio.Semaphore(2)  # the relay admits 8 handshakes in flight per IP

        async def start(n):
            async with sem:
                for attempt in range(8):
                    try:
                        return await n.start()
                    except Exception:  # noqa: BLE001 - refused while the relay is busy: retry
                        await n.close()
                        await asyncio.sleep(0.2 * 2**attempt)
                await n.start()

        await asyncio.gather(*(start(n) for n in nodes))
    conn.send(("ready", count))
    while True:
        cmd, arg = await loop.run_in_executor(None, conn.recv)
        if cmd == "publish":
            subjects = [list(getattr(getattr(n, "route", None), "subjects", [])) for n in nodes]
            out = []
            for n in nodes:
                got = n.publish(arg)
                out.append((await got) if asyncio.iscoroutine(got) else got)
                await asyncio.sleep(0)
            for c in conns:
                await c.flush(timeout=30)
            conn.send(("published", {"sent": out, "subjects": subjects}))
        elif cmd == "count":
            conn.send(("count", sum(n.stats.in_msgs for n in nodes)))
        elif cmd == "end":
            rows = []
            for n in nodes:
                st = n.end_round()
                share = n.route.planner.fan.share if kind == "nats" else 1.0
                rows.append(
                    {
                        "in_msgs": st.in_msgs,
                        "in_bytes": st.in_bytes,
                        "groups": st.groups,
                        "batches": st.batches,
                        "shed": st.shed,
                        "cpu_ms": st.cpu_ns / 1e6,
                        "arrivals": st.arrivals,
                        "share": share,
                        "id": n.ident.node_id,
                        "rejected": sum(
                            v for k, v in n.counters.items() if k.startswith("rejected:")
                        ),
                        "slow": n.counters["nats_slow_consumer"] + n.counters["ws_closed"],
                    }
                )
            await asyncio.sleep(0.05)  # redraws scheduled by round_done() go out
            for c in conns:
                await c.flush(timeout=30)
            conn.send(("rows", rows))
        elif cmd == "stop":
            for n in nodes:
                await n.close()
            for c in conns:
                await c.close()
            conn.send(("stopped", None))
            return


# ----------------------------------------------------------------------------- coordinator
def _proc_rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _proc_cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _ask(pipes, cmd, arg=None, timeout: float = 600.0) -> list:
    for p in pipes:
        p.send((cmd, arg))
    out = []
    for p in pipes:
        if not p.poll(timeout):
            raise RuntimeError(f"a worker did not answer {cmd} in {timeout:.0f} s")
        tag, value = p.recv()
        if tag == "error":
            raise RuntimeError(f"worker failed: {value}")
        out.append(value)
    return out


def _quiet(pipes, quiet_s: float, limit_s: float) -> float:
    """Wait until no node received anything for quiet_s (at most limit_s); seconds waited."""
    t0 = time.monotonic()
    last, since = -1, time.monotonic()
    while time.monotonic() - t0 < limit_s:
        total = sum(_ask(pipes, "count"))
        if total != last:
            last, since = total, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            break
        time.sleep(0.1)
    return time.monotonic() - t0


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def run_one(kind: str, n: int, args, shape: dict) -> dict:
    code = new_room_key()
    cluster = relay = None
    if kind == "nats":
        cluster = NatsCluster(nats_server_binary()).start()
        target, pids = cluster.urls, [s.proc.pid for s in cluster.servers]
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        relay = subprocess.Popen(
            [sys.executable, "-m", "sapo_edge.cli", "relay", "--host", "127.0.0.1"]
            + ["--port", str(port), "--max-connections-per-ip", "100000"]
            + ["--max-connections", "100000"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
        )
        target, pids = f"ws://127.0.0.1:{port}", [relay.pid]
        _wait_port(port)
    workers = min(args.workers, n)
    counts = [n // workers + (i < n % workers) for i in range(workers)]
    opts = {
        "code": code,
        "shape": shape,
        "budget": args.budget,
        "tick_s": args.tick_s,
        "round_s": args.round_s,
        "multiplex": args.multiplex,
    }
    ctx = mp.get_context("fork")
    pipes, procs = [], []
    try:
        for w, count in enumerate(counts):
            a, b = ctx.Pipe()
            p = ctx.Process(target=worker_main, args=(b, kind, target, count, w + 1, opts))
            p.start()
            pipes.append(a)
            procs.append(p)
        for p in pipes:  # wait for "ready"
            if not p.poll(600):
                raise RuntimeError("workers did not start in 600 s")
            tag, value = p.recv()
            if tag != "ready":
                raise RuntimeError(f"worker failed to start: {value}")
        rounds = []
        for r in range(args.warmup + args.rounds):
            cpu0 = [_proc_cpu(pid) for pid in pids]
            t0 = time.monotonic()
            pub = _ask(pipes, "publish", r + 1)
            waited = _quiet(pipes, args.quiet_s, args.round_limit_s)
            rows = [row for chunk in _ask(pipes, "end", r + 1) for row in chunk]
            took = time.monotonic() - t0
            cpu = sum(_proc_cpu(pid) for pid in pids) - sum(cpu0)
            rss = [_proc_rss(pid) for pid in pids]
            if r < args.warmup:
                print(f"  {kind} N={n} warm-up round {r + 1}: {took:.1f} s", flush=True)
                continue
            rounds.append(_round_stats(kind, pub, rows, shape, args.budget, took, waited, cpu, rss))
            print(f"  {kind} N={n} round {r + 1}: {_brief(rounds[-1])}", flush=True)
        _ask(pipes, "stop", timeout=120)
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
        if cluster is not None:
            cluster.stop()
        if relay is not None:
            relay.terminate()
            relay.wait(10)
    return _summary(kind, n, rounds, shape, args.budget)


def _wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the relay did not start")


def _round_stats(kind, pub, rows, shape, budget, took, waited, cpu, rss) -> dict:
    sent = [s for chunk in pub for s in chunk["sent"]]
    subjects = [s for chunk in pub for s in chunk["subjects"]]
    published_at = {bid: t for bid, _, t in sent}
    latencies, expected, delivered = [], 0, 0
    for i, row in enumerate(rows):
        if kind == "nats":
            hits = sum(
                1
                for j, (_, leaf, _) in enumerate(sent)
                if j != i and leaf and any(leaf_matches(leaf, s) for s in subjects[i])
            )
        else:
            hits = len(sent) - 1
        want = min(hits * shape["groups"], budget) if kind == "nats" else hits * shape["groups"]
        expected += want
        delivered += min(row["groups"], want) if want else 0
        latencies += [t - published_at[b] for b, t in row["arrivals"] if b in published_at]
    return {
        "seconds": took,
        "settle_s": waited,
        "in_bytes": [r["in_bytes"] for r in rows],
        "in_msgs": [r["in_msgs"] for r in rows],
        "groups": [r["groups"] for r in rows],
        "cpu_ms": [r["cpu_ms"] for r in rows],
        "shed": sum(r["shed"] for r in rows),
        "slow": sum(r["slow"] for r in rows),
        "rejected": sum(r["rejected"] for r in rows),
        "share": [r["share"] for r in rows],
        "delivery": delivered / expected if expected else float("nan"),
        "lat_p50_ms": 1000 * _pct(latencies, 0.5),
        "lat_p99_ms": 1000 * _pct(latencies, 0.99),
        "server_cpu_s": cpu,
        "server_rss": rss,
    }


def _brief(r: dict) -> str:
    return (
        f"{r['seconds']:.1f} s, in {statistics.mean(r['in_bytes']) / 1e6:.2f} MB "
        f"/ {statistics.mean(r['groups']):.0f} groups per node, cpu "
        f"{statistics.mean(r['cpu_ms']):.1f} ms, delivery {r['delivery']:.3f}, "
        f"p50 {r['lat_p50_ms']:.0f} ms p99 {r['lat_p99_ms']:.0f} ms, "
        f"server rss {sum(r['server_rss']) / 2**20:.0f} MiB"
    )


def _summary(kind: str, n: int, rounds: list[dict], shape: dict, budget: int) -> dict:
    def allv(key):
        return [v for r in rounds for v in r[key]]

    return {
        "transport": kind,
        "nodes": n,
        "rounds": len(rounds),
        "budget_groups": budget if kind == "nats" else None,
        "in_mb_mean": statistics.mean(allv("in_bytes")) / 1e6,
        "in_mb_max": max(allv("in_bytes")) / 1e6,
        "groups_mean": statistics.mean(allv("groups")),
        "groups_max": max(allv("groups")),
        "cpu_ms_mean": statistics.mean(allv("cpu_ms")),
        "cpu_ms_max": max(allv("cpu_ms")),
        "share_mean": statistics.mean(allv("share")),
        "delivery": statistics.mean(r["delivery"] for r in rounds),
        "lat_p50_ms": statistics.median(r["lat_p50_ms"] for r in rounds),
        "lat_p99_ms": max(r["lat_p99_ms"] for r in rounds),
        "shed_per_round": statistics.mean(r["shed"] for r in rounds),
        "slow_consumer_drops": sum(r["slow"] for r in rounds),
        "rejected": sum(r["rejected"] for r in rounds),
        "server_rss_mib": [round(x / 2**20, 1) for x in rounds[-1]["server_rss"]],
        "server_cpu_s_per_round": statistics.mean(r["server_cpu_s"] for r in rounds),
        "round_s": statistics.mean(r["seconds"] for r in rounds),
    }


def table(results: list[dict]) -> str:
    head = (
        "| transport | nodes | inbound MB/node/round (mean / max) | groups/node/round (mean / max)"
        " | check CPU ms/node/round | share heard | delivery | latency p50 / p99 ms"
        " | server RSS MiB | server CPU s/round |\n|---|---:|---|---|---|---:|---:|---|---|---:|"
    )
    lines = [head]
    for r in results:
        lines.append(
            f"| {r['transport']} | {r['nodes']:,} | {r['in_mb_mean']:.2f} / {r['in_mb_max']:.2f}"
            f" | {r['groups_mean']:.0f} / {r['groups_max']}"
            f" | {r['cpu_ms_mean']:.1f} (max {r['cpu_ms_max']:.1f})"
            f" | {r['share_mean']:.3f} | {r['delivery']:.3f}"
            f" | {r['lat_p50_ms']:.0f} / {r['lat_p99_ms']:.0f}"
            f" | {' + '.join(f'{x:.0f}' for x in r['server_rss_mib'])}"
            f" | {r['server_cpu_s_per_round']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for kind, mark in (("nats", "o-"), ("ws", "s--")):
        rs = [r for r in results if r["transport"] == kind]
        if not rs:
            continue
        label = "NATS cluster (sharded)" if kind == "nats" else "websocket relay (everything)"
        xs = [r["nodes"] for r in rs]
        axes[0].plot(xs, [r["in_mb_mean"] for r in rs], mark, label=label)
        axes[1].plot(xs, [r["cpu_ms_mean"] for r in rs], mark, label=label)
        axes[2].plot(xs, [r["delivery"] for r in rs], mark, label=label)
    for ax, title in zip(
        axes,
        ("inbound MB per node per round", "check CPU ms per node per round", "delivery ratio"),
        strict=True,
    ):
        ax.set_xscale("log")
        ax.set_xlabel("nodes")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].set_yscale("log")
    axes[1].set_yscale("log")
    axes[2].set_ylim(0, 1.05)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="10,100,1000")
    ap.add_argument("--transports", default="nats,ws")
    ap.add_argument("--ws-max", type=int, default=100, help="largest N run on the ws relay")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=4, help="rounds for the fan-in to settle")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--multiplex", type=int, default=1, help="nodes per NATS connection")
    ap.add_argument("--budget", type=int, default=64, help="max_inbound_groups per node")
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--completions", type=int, default=8)
    ap.add_argument("--chars", type=int, default=900)
    ap.add_argument("--tick-s", type=float, default=0.5)
    ap.add_argument("--round-s", type=float, default=5.0, help="round time before one is measured")
    ap.add_argument("--quiet-s", type=float, default=1.0)
    ap.add_argument("--round-limit-s", type=float, default=300.0)
    ap.add_argument("--out", default="docs/scale")
    args = ap.parse_args()
    shape = {"groups": args.groups, "completions": args.completions, "chars": args.chars}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()
    results = []
    for kind in args.transports.split(","):
        for n in (int(x) for x in args.nodes.split(",")):
            if kind == "ws" and n > args.ws_max:
                continue
            print(f"{kind} N={n}", flush=True)
            results.append(run_one(kind, n, args, shape))
            (out / "results.json").write_text(
                json.dumps({"load_before": load0, "args": vars(args), "results": results}, indent=1)
            )
    (out / "table.md").write_text(table(results))
    print(table(results))
    print(f"load average before {load0}, after {os.getloadavg()}")
    try:
        plot(results, out / "scale.png")
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no plot")


if __name__ == "__main__":
    main()
