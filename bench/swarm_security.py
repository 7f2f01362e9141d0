"""Benchmark (not a test): what the swarm's defences cost and what they keep working, on loopback.

Usage: `.venv/bin/python bench/swarm_security.py [--idle 1000]` (Linux: the idle sockets come
from 127.0.1.x). Prints: node start + dial + handshake time (median of 10), an honest peer's join
time while --idle idle connections are held open against the node, and the cost of one scrypt
passphrase guess (what an offline guesser pays per try against a passphrase room).
"""

from __future__ import annotations

import argparse
import socket
import statistics
import time

from sapo_edge.swarm.guard import raise_fd_limit
from sapo_edge.swarm.identity import Identity
from sapo_edge.swarm.network import NetworkTransport
from sapo_edge.swarm.roomkey import new_room_key, passphrase_key

FAST = dict(
    mdns=False, listen="127.0.0.1:0", heartbeat=1.0, reconnect_base=0.05, log=lambda _m: None
)


def node(code: str, **kw) -> NetworkTransport:
    return NetworkTransport(Identity.generate(), room="bench", secret=code, **FAST, **kw).start()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--idle", type=int, default=1000)
    args = ap.parse_args()
    raise_fd_limit(2 * args.idle + 512)
    code = new_room_key()
    a = node(code)
    times = []
    for _ in range(10):
        t = time.perf_counter()
        b = node(code, peers=[f"127.0.0.1:{a.port}"])
        b.wait_for(lambda b=b: len(b.connected()) == 1, 10)
        times.append(time.perf_counter() - t)
        b.close()
    print(f"node start + dial + handshake: median {statistics.median(times) * 1000:.0f} ms")

    socks = []
    for i in range(args.idle):
        s = socket.socket()
        s.bind((f"127.0.1.{i % 50 + 1}", 0))
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", a.port))
        except BlockingIOError:
            pass
        socks.append(s)
        if i % 100 == 99:  # let the listener take them (the backlog is 128)
            a.wait_for(lambda i=i: a.guard.counters["accepted"] >= i + 1, 10)
    t = time.perf_counter()
    b = node(code, peers=[f"127.0.0.1:{a.port}"])
    ok = b.wait_for(lambda: len(b.connected()) == 1, 30)
    ms = (time.perf_counter() - t) * 1000
    print(f"honest join while {args.idle} idle connections are held: {ok}, {ms:.0f} ms")
    print(f"  guard: {dict(a.guard.counters)}")
    for s in socks:
        s.close()
    b.close()
    a.close()

    passphrase_key.cache_clear()
    t = time.perf_counter()
    for i in range(5):
        passphrase_key("bench", f"guess-{i}")
    print(
        f"one passphrase guess (scrypt n=2^15, r=8): {(time.perf_counter() - t) / 5 * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
