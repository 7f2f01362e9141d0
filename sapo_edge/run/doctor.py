"""`sapo-edge doctor`: one line per thing a run needs (backend, memory, model cache, pace, dtype,
identity, LAN addresses, mDNS multicast, the relay, the listen port, the firewall), green or red
with the fix. Exit status 1 when a line is red.
"""

from __future__ import annotations

import ipaddress
import json
import os
import platform
import shutil
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import __version__
from ..config.settings import Config
from ..data import paths
from ..data.addresses import bind_address

MDNS_GROUP = "224.0.0.251"  # the group mDNS uses; the probe goes to a random port no one serves


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # "ok" | "warn" | "fail"
    text: str  # what was found, and for warn/fail: the fix

    def line(self, color: bool) -> str:
        tag = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}[self.status]
        if color:
            code = {"ok": "32", "warn": "33", "fail": "31"}[self.status]
            tag = f"\x1b[{code}m{tag}\x1b[0m"
        return f"[{tag}] {self.name:<10} {self.text}"


def _guard(name: str, fn: Callable[[], Check]) -> Check:
    try:
        return fn()
    except Exception as e:  # a check that breaks is itself a finding, never a traceback
        return Check(name, "fail", f"could not check ({type(e).__name__}: {e}).")


def check_backend(cfg: Config) -> tuple[Check, str]:
    from ..backends import select_backend

    said: list[str] = []
    try:
        kind, device = select_backend(cfg.backend, log=said.append)
    except ValueError as e:
        return Check("backend", "fail", str(e)), "cpu"
    text = said[-1].removeprefix("backend: ") if said else f"{kind} on {device}"
    return Check("backend", "ok", text), device


def check_memory(device: str) -> Check:
    from ..machine.fit import GB, largest_fitting, system_memory

    mem = system_memory()
    if device.startswith("cuda"):
        from ..backends import accelerator_memory

        mem = accelerator_memory(device) or mem
    best = largest_fitting(mem, device)
    have = f"{mem.total / GB:.1f} GB {mem.where} ({mem.available / GB:.1f} GB free)"
    if best is None:
        return Check(
            "memory",
            "fail",
            f"{have}: not even smollm2-135m fits at the paper's settings; use --preset addition "
            "(smaller groups and completions) and close other programs.",
        )
    return Check("memory", "ok", f"{have}; largest model that fits for training: {best}")


def check_models() -> Check:
    from ..models.fetch import GET_HINT
    from ..models.resolve import cache_entries, smollm2_gguf

    size = sum(e.size for e in cache_entries())
    where = f"cache {paths.cache_dir()} ({paths.human_size(size)})"
    try:
        paths.cache_dir().mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return Check(
            "models",
            "fail",
            f"{where} cannot be created ({e.strerror}): set SAPO_EDGE_CACHE to a writable folder.",
        )
    if smollm2_gguf() is None:
        return Check(
            "models",
            "warn",
            f"{where}; the offline model smollm2-135m is not here: run `{GET_HINT}` while online.",
        )
    return Check("models", "ok", f"{where}; offline model smollm2-135m ready")


def check_pace(cfg: Config, made: list | None = None) -> Check:
    """What bare `sapo-edge` would choose here, by memory and time, and the threads policy (the
    choice is appended to `made`, for the dtype line)."""
    from ..machine.threads import pinned_threads, usable_cores
    from ..models.resolve import getting
    from .pace_here import choose_here

    choice = choose_here(cfg.backend, cfg.dtype, cfg.round_target)
    if made is not None:
        made.append(choice)
    need = getting(choice.candidate.settings["model"])  # "": on this machine
    pinned = pinned_threads(cfg.threads)
    threads = (
        f"{pinned} CPU threads (pinned)"
        if pinned
        else f"CPU threads adaptive on {usable_cores()} cores (fewer while other programs are busy)"
    )
    status = "warn" if choice.over_target or need.startswith("cannot") else "ok"
    need = f" ({need})" if need else ""
    return Check("pace", status, f"bare sapo-edge runs {choice.why}{need}; {threads}")


def check_dtype(cfg: Config, made: list) -> Check:
    """The dtype bare `sapo-edge`'s choice would train in here, and why: on a CPU with --dtype
    auto, the two round estimates or measurements it compared and where they came from."""
    from .pace_here import choose_here, dtype_here

    choice = made[0] if made else choose_here(cfg.backend, cfg.dtype, cfg.round_target)
    return Check("dtype", "ok", dtype_here(choice, cfg.backend, cfg.dtype))


def check_identity() -> Check:
    from ..swarm.identity import IdentityError, load_or_create

    p = paths.identity_path()
    if not p.exists():
        return Check("identity", "ok", f"none yet: made on the first run in {p}")
    mode_note = ""
    if os.name == "posix" and p.stat().st_mode & 0o077:
        mode_note = " (readable by others: the next run tightens it to 0600)"
    try:
        ident, _ = load_or_create(p)
    except (IdentityError, OSError) as e:
        return Check("identity", "fail", str(e))
    return Check("identity", "ok", f"{ident.name} (id {ident.node_id[:12]}) in {p}{mode_note}")


def lan_addresses() -> list[str]:
    """This machine's non-loopback IPv4 addresses (and global IPv6), the ones peers can dial."""
    import ifaddr  # zeroconf's own dependency

    found = []
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            addr = ip.ip if isinstance(ip.ip, str) else ip.ip[0]
            try:
                a = ipaddress.ip_address(addr.split("%")[0])
            except ValueError:
                continue
            if a.is_loopback or a.is_link_local or a.is_unspecified:
                continue
            found.append(str(a))
    return sorted(set(found), key=lambda s: (":" in s, s))


def check_lan() -> tuple[Check, list[str]]:
    addrs = lan_addresses()
    if not addrs:
        return Check(
            "lan",
            "warn",
            "no network address besides loopback: join the Wi-Fi or LAN to meet peers "
            "(alone, use --solo).",
        ), []
    return Check("lan", "ok", "peers reach this machine at " + ", ".join(addrs[:4])), addrs


def multicast_works(interface: str, timeout: float = 1.0) -> tuple[bool, str]:
    """Send one datagram to the mDNS group on `interface` with multicast loop on and receive it."""
    recv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    send = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    try:
        recv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        recv.bind(("", 0))
        port = recv.getsockname()[1]
        group = socket.inet_aton(MDNS_GROUP) + socket.inet_aton(interface)
        recv.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, group)
        send.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
        send.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
        send.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(interface))
        token = os.urandom(16)
        send.sendto(token, (MDNS_GROUP, port))
        recv.settimeout(timeout)
        while True:
            data, _ = recv.recvfrom(64)
            if data == token:
                return True, ""
    except TimeoutError:
        return False, "the probe did not come back within 1 s"
    except OSError as e:
        return False, e.strerror or str(e)
    finally:
        recv.close()
        send.close()


def check_mdns(interface: str | None, lan: list[str]) -> Check:
    iface = interface or next((a for a in lan if ":" not in a), None)
    if iface is None:
        return Check("mdns", "warn", "no IPv4 network to test multicast on: LAN discovery is off.")
    ok, why = multicast_works(iface)
    if ok:
        return Check(
            "mdns",
            "ok",
            f"multicast on {iface} works here (the Wi-Fi may still block it between machines: "
            "if no peer appears, use --peer IP or --relay)",
        )
    return Check(
        "mdns",
        "fail",
        f"multicast on {iface} does not work ({why}): LAN discovery cannot find peers; connect "
        "with --peer IP (repeatable) or --relay HOST.",
    )


def check_relay(url: str, timeout: float = 3.0) -> Check:
    if not url:
        return Check("relay", "ok", "none configured (LAN only; --relay HOST adds one)")
    base = "https://" + url[6:] if url.startswith("wss://") else "http://" + url.split("://", 1)[-1]
    base = base.rstrip("/").removesuffix("/ws")
    try:
        with urllib.request.urlopen(base + "/healthz", timeout=timeout) as r:  # noqa: S310
            status = r.status
    except (urllib.error.URLError, OSError, ValueError) as e:
        why = getattr(e, "reason", None) or e
        return Check(
            "relay",
            "fail",
            f"{url} does not answer ({why}): check the address, that `sapo-edge relay` runs "
            "there, and that its firewall lets the port in.",
        )
    nodes = "?"
    try:  # /stats says how many nodes are connected; an older relay may not have it
        with urllib.request.urlopen(base + "/stats", timeout=timeout) as r:  # noqa: S310
            stats = json.loads(r.read(65536))
            nodes = stats.get("nodes", "?") if isinstance(stats, dict) else "?"
    except (urllib.error.URLError, OSError, ValueError):
        pass
    return Check("relay", "ok", f"{url} answers (HTTP {status}; {nodes} nodes connected)")


def check_port(listen: str) -> Check:
    host, number = bind_address(listen, default_host="")
    port = str(number)
    if port == "0":
        return Check("port", "ok", "any free port (--listen ...:0)")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.bind((host, int(port)))
    except OSError as e:
        return Check(
            "port",
            "fail",
            f"cannot listen on {listen} ({e.strerror}): another sapo-edge may run; stop it or "
            f"pass --listen {int(port) + 10}.",
        )
    finally:
        s.close()
    return Check("port", "ok", f"{listen} is free for peers to connect to")


def check_firewall(port: str) -> Check:
    system = platform.system()
    if system == "Windows":
        return Check(
            "firewall",
            "ok",
            "Windows asks on the first run whether Python may accept connections: allow it on "
            "Private networks (school Wi-Fi set to Public blocks peers).",
        )
    if system == "Darwin":
        return Check(
            "firewall",
            "ok",
            "macOS may ask on the first run to accept incoming connections: click Allow "
            "(System Settings > Network > Firewall).",
        )
    ufw = Path("/etc/ufw/ufw.conf")
    try:
        ufw_on = ufw.is_file() and "ENABLED=yes" in ufw.read_text(encoding="utf-8")
    except OSError:
        ufw_on = False
    if ufw_on:
        return Check(
            "firewall",
            "warn",
            f"ufw is on: let peers in with `sudo ufw allow {port}/tcp` and `sudo ufw allow "
            "5353/udp` (mDNS).",
        )
    if shutil.which("firewall-cmd") and Path("/run/firewalld").exists():
        return Check(
            "firewall",
            "warn",
            f"firewalld is on: `sudo firewall-cmd --add-port={port}/tcp --add-service=mdns`.",
        )
    return Check("firewall", "ok", "no ufw or firewalld found to block peers")


def run_checks(cfg: Config, multicast_interface: str | None = None) -> list[Check]:
    version = Check(
        "version",
        "ok",
        f"sapo-edge {__version__}, Python {platform.python_version()} on "
        f"{platform.system()} {platform.machine()}",
    )
    checks = [version]
    backend, device = check_backend(cfg)
    checks += [backend, _guard("memory", lambda: check_memory(device))]
    made: list = []  # the pace check's choice, which the dtype line is about
    checks += [_guard("models", check_models), _guard("pace", lambda: check_pace(cfg, made))]
    checks += [_guard("dtype", lambda: check_dtype(cfg, made))]
    checks += [_guard("identity", check_identity)]
    lan, addrs = check_lan()
    checks += [lan, _guard("mdns", lambda: check_mdns(multicast_interface, addrs))]
    checks += [_guard("relay", lambda: check_relay(cfg.relay))]
    port = str(bind_address(cfg.listen)[1])
    checks += [_guard("port", lambda: check_port(cfg.listen)), check_firewall(port)]
    return checks


def main(cfg: Config, multicast_interface: str | None = None) -> int:
    color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    checks = run_checks(cfg, multicast_interface)
    for c in checks:
        print(c.line(color), flush=True)
    failed = [c.name for c in checks if c.status == "fail"]
    if failed:
        print(f"{len(failed)} problem{'s' if len(failed) > 1 else ''}: {', '.join(failed)}.")
    return 1 if failed else 0
