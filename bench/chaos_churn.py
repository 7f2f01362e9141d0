"""Relay restart and frozen peers, measured.

relay_restart: N nodes (real NetworkTransports) meet only through `sapo-edge relay` (its own
process). Each publishes; the relay is SIGKILLed, each publishes while it is down, the relay
comes back on the same port: every node reconnects by itself (backoff with jitter: the
reconnect times are spread, not one burst), batches published after it arrive exactly once,
and nothing is rejected. Batches published while the relay is down are not queued (they are
lost to that route, and never sent twice).

freeze_peer: node B (its own process) is linked directly to node A. B is SIGSTOPped: A drops it
within the heartbeat window (ping unanswered); B is SIGCONTed: A dials it again and B's next
batches arrive.

    OMP_NUM_THREADS=1 .venv/bin/python bench/chaos_churn.py --repeat 5
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from chaos_soak import ROOM, SECRET, _free_port, _read, _wait_port, start_relay  # noqa: E402
from scale_nodes import Shape, make_batch  # noqa: E402

from sapo_edge.data.rollout import decode_batch  # noqa: E402
from sapo_edge.swarm.identity import Identity  # noqa: E402
from sapo_edge.swarm.network import NetworkTransport  # noqa: E402

SHAPE = Shape(groups=1, completions=2, chars=100, question_chars=50)


def _node(**kw) -> NetworkTransport:
    opts = dict(room=ROOM, secret=SECRET, listen="127.0.0.1:0", mdns=False, log=lambda _m: None)
    return NetworkTransport(Identity.generate(), **{**opts, **kw}).start()


def _rejected(t: NetworkTransport) -> dict:
    return {k: v for k, v in t.counters.items() if k.startswith("rejected:")}


def relay_restart(work: Path, n: int = 3, down_s: float = 3.0, reconnect_max: float = 4.0) -> dict:
    import random

    port = _free_port()
    relay = start_relay(port, work)
    url = f"ws://127.0.0.1:{port}"
    key = f"relay:{url}"
    nodes = [
        _node(relay=url, heartbeat=1.0, reconnect_base=0.5, reconnect_max=reconnect_max)
        for _ in range(n)
    ]
    rng = random.Random(0)
    got: dict[int, list] = {i: [] for i in range(n)}

    def drain() -> None:
        for i, t in enumerate(nodes):
            for sender, payload in t.receive():
                got[i].extend((sender, g.round) for g in decode_batch(payload))

    def publish(round_: int) -> None:
        for t in nodes:
            t.publish(make_batch(t.ident, round_, SHAPE, rng))

    try:
        ok = all(t.wait_for(lambda t=t: key in t.connected(), 15) for t in nodes)
        publish(1)
        delivered_before = all(
            t.wait_for(lambda t=t: t.counters["delivered"] >= n - 1, 10) for t in nodes
        )
        relay.kill()
        relay.wait(10)
        gone = all(t.wait_for(lambda t=t: key not in t.connected(), 10) for t in nodes)
        publish(2)  # nobody can carry these: not queued, so never sent twice
        time.sleep(down_s)
        t_back = time.time()
        relay = start_relay(port, work)
        back: dict[int, float] = {}

        def watch(i: int, t: NetworkTransport) -> None:
            if t.wait_for(lambda: key in t.connected(), 3 * reconnect_max + 10):
                back[i] = time.time() - t_back

        ws = [threading.Thread(target=watch, args=(i, t)) for i, t in enumerate(nodes)]
        for w in ws:
            w.start()
        for w in ws:
            w.join()
        time.sleep(0.5)  # let every link finish registering on the relay
        publish(3)
        after = all(
            t.wait_for(lambda t=t: t.counters["delivered"] >= 2 * (n - 1), 10) for t in nodes
        )
        time.sleep(1.0)  # a duplicate would arrive by now
        drain()
    finally:
        for t in nodes:
            t.close()
        relay.kill()
        relay.wait(10)
    ids = {t.ident.node_id for t in nodes}
    dupes = sum(len(v) - len(set(v)) for v in got.values())
    rounds = {i: sorted(r for _, r in v) for i, v in got.items()}
    return {
        "connected": ok,
        "delivered_before": delivered_before,
        "all_dropped": gone,
        "reconnect_s": sorted(round(v, 3) for v in back.values()),
        "reconnected": len(back),
        "delivered_after": after,
        "rounds_received": rounds,
        "duplicates": dupes,
        "from_members": all(s in ids for v in got.values() for s, _ in v),
        "rejected": [_rejected(t) for t in nodes],
        "ok": ok
        and delivered_before
        and gone
        and len(back) == n
        and after
        and dupes == 0
        and all(r == [1] * (n - 1) + [3] * (n - 1) for r in rounds.values())
        and not any(_rejected(t) for t in nodes),
    }


def freeze_peer(work: Path, heartbeat: float = 1.0, frozen_s: float = 4.0) -> dict:
    """SIGSTOP a directly linked peer process; when is it dropped, and taken back after SIGCONT."""
    port = _free_port()
    cmd = [sys.executable, str(ROOT / "bench" / "chaos_soak.py"), "node"]
    cmd += ["--identity", str(work / "b.key"), "--port", str(port), "--period", "0.5"]
    cmd += ["--events", str(work / "b.events"), "--stats", str(work / "b.stats")]
    cmd += ["--log", str(work / "b.log"), "--seconds", "120"]
    b = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    a = None
    out: dict = {}
    try:
        _wait_port(port)
        a = _node(
            peers=[f"127.0.0.1:{port}"], heartbeat=heartbeat, reconnect_base=0.2, reconnect_max=1.0
        )
        linked = a.wait_for(lambda: len(a.connected()) == 1, 10)
        b_id = a.connected()[0] if linked else ""
        flowing = a.wait_for(lambda: a.counters["delivered"] >= 2, 10)
        b.send_signal(signal.SIGSTOP)
        t_stop = time.time()
        dropped = a.wait_for(lambda: b_id not in a.connected(), 10 * heartbeat)
        drop_s = time.time() - t_stop
        time.sleep(max(0.0, frozen_s - drop_s))
        before = a.counters["delivered"]
        b.send_signal(signal.SIGCONT)
        t_cont = time.time()
        back = a.wait_for(lambda: b_id in a.connected(), 20)
        back_s = time.time() - t_cont
        resumed = a.wait_for(lambda: a.counters["delivered"] >= before + 2, 10)
        muted = any(p.muted for p in a.peers())
        out = {
            "linked": linked,
            "flowing": flowing,
            "dropped": dropped,
            "drop_s": round(drop_s, 3),
            "heartbeat_s": heartbeat,
            "taken_back": back,
            "back_s": round(back_s, 3),
            "batches_after": resumed,
            "muted": muted,
            "rejected": _rejected(a),
        }
    finally:
        if a is not None:
            a.close()
        b.send_signal(signal.SIGCONT)
        b.terminate()
        try:
            b.wait(10)
        except subprocess.TimeoutExpired:
            b.kill()
            b.wait(5)
    out["b_rejected"] = {
        k: v
        for k, v in _stats(work / "b.stats").get("counters", {}).items()
        if k.startswith("rejected:")
    }
    out["b_published"] = sum(1 for e in _read(str(work / "b.events")) if e["ev"] == "pub")
    # a frozen peer's missed pong is counted against it (toward a mute), but it is not muted
    out["ok"] = bool(
        out.get("dropped")
        and out["drop_s"] <= 2 * heartbeat + 1.0
        and out["taken_back"]
        and out["batches_after"]
        and not out["muted"]
    )
    return out


def _stats(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "chaos")
    a = ap.parse_args()
    rows = {"relay_restart": [], "freeze_peer": []}
    for _ in range(a.repeat):
        with tempfile.TemporaryDirectory(prefix="sapo-churn-") as tmp:
            rows["relay_restart"].append(relay_restart(Path(tmp)))
        with tempfile.TemporaryDirectory(prefix="sapo-churn-") as tmp:
            rows["freeze_peer"].append(freeze_peer(Path(tmp)))
        print(json.dumps({k: v[-1] for k, v in rows.items()}))
    rr, fp = rows["relay_restart"], rows["freeze_peer"]
    summary = {
        "relay_restarts_ok": f"{sum(r['ok'] for r in rr)}/{len(rr)}",
        "reconnect_s_all": sorted(x for r in rr for x in r["reconnect_s"]),
        "duplicates": sum(r["duplicates"] for r in rr),
        "freezes_ok": f"{sum(r['ok'] for r in fp)}/{len(fp)}",
        "drop_s": sorted(r.get("drop_s") for r in fp),
        "back_s": sorted(r.get("back_s") for r in fp),
    }
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "churn.json").write_text(json.dumps({"summary": summary, **rows}, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
