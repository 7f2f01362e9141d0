"""LAN discovery with python-zeroconf: advertise `_sapo-edge._tcp.local.` with a small TXT record
(protocol version, the room's lan id, node id, port, model), browse, resolve peers of the same
room, and report peers that vanish. Adverts are hostile input: resolves in flight and services
tracked are capped, an advert from the LAN naming a loopback (or no) address is ignored, the
network checks that whoever answers at an address is the node the advert named, and a goodbye
(anyone can send one) is believed only once a dial fails.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass

from zeroconf import IPVersion, ServiceStateChange, get_all_addresses
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from .protocol import PROTOCOL_VERSION

SERVICE = "_sapo-edge._tcp.local."
_HEX = set("0123456789abcdef")
MAX_RESOLVING = 8  # resolves in flight; more adverts wait for the next browse event
MAX_FOUND = 256  # services remembered


@dataclass(frozen=True)
class Advert:
    node_id: str
    room: str
    port: int
    model: str


def make_txt(node_id: str, room: str, port: int, model: str) -> dict[str, str]:
    return {
        "v": str(PROTOCOL_VERSION),
        "room": room,
        "id": node_id,
        "port": str(port),
        "model": model[:60],
    }


def parse_txt(props: dict) -> Advert | str:
    """An Advert from a TXT record, or a reason string when it is not a usable sapo-edge peer."""

    def text(key: bytes, limit: int) -> str | None:
        v = props.get(key)
        if not isinstance(v, bytes) or len(v) > limit:
            return None
        try:
            return v.decode("utf-8")
        except UnicodeDecodeError:
            return None

    version = text(b"v", 4)
    if version != str(PROTOCOL_VERSION):
        return "unknown_version"
    room, node_id, port, model = (
        text(b"room", 32),
        text(b"id", 32),
        text(b"port", 5),
        text(b"model", 60),
    )
    if not room or len(room) != 32 or not set(room) <= _HEX:
        return "bad_room"
    if not node_id or len(node_id) != 32 or not set(node_id) <= _HEX:
        return "bad_id"
    if not port or not port.isdigit() or not 0 < int(port) < 65536:
        return "bad_port"
    return Advert(node_id, room, int(port), model or "")


class LanDiscovery:
    """Registers this node and calls on_found(node_id, host, port) / on_lost(node_id) for peers
    of the same room. Runs on the caller's asyncio loop."""

    def __init__(
        self,
        node_id: str,
        room: str,
        port: int,
        model: str,
        *,
        on_found: Callable[[str, str, int], None],
        on_lost: Callable[[str], None],
        log: Callable[[str], None] = print,
        on_event: Callable[[], None] | None = None,
        interfaces: list[str] | None = None,
        addresses: list[str] | None = None,
    ) -> None:
        self.node_id, self.room, self.port, self.model = node_id, room, port, model
        self.on_found, self.on_lost, self.log = on_found, on_lost, log
        self.on_event = on_event or (lambda: None)  # after every browse event is handled
        self.interfaces, self.addresses = interfaces, addresses
        self.found: dict[str, str] = {}  # service name -> node id
        self.ignored: dict[str, int] = {}  # reason -> count
        self._azc: AsyncZeroconf | None = None
        self._browser: AsyncServiceBrowser | None = None
        self._info: AsyncServiceInfo | None = None
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> None:
        from zeroconf import InterfaceChoice

        addrs = (
            self.addresses
            or [a for a in get_all_addresses() if not a.startswith("127.")]
            or ["127.0.0.1"]
        )
        self._azc = AsyncZeroconf(
            interfaces=self.interfaces or InterfaceChoice.All, ip_version=IPVersion.V4Only
        )
        name = f"sapo-{self.node_id}.{SERVICE}"
        self._info = AsyncServiceInfo(
            SERVICE,
            name,
            addresses=[socket.inet_aton(a) for a in addrs],
            port=self.port,
            properties=make_txt(self.node_id, self.room, self.port, self.model),
            server=f"sapo-{self.node_id[:16]}.local.",
        )
        try:
            await (await self._azc.async_register_service(self._info))  # probed, announced
        except Exception as e:  # noqa: BLE001 - no multicast here: keep running without mDNS
            self.log(f"mDNS registration failed ({e}); LAN discovery is off, use --peer.")
        self._browser = AsyncServiceBrowser(self._azc.zeroconf, SERVICE, handlers=[self._on_change])

    def _on_change(
        self, zeroconf, service_type: str, name: str, state_change: ServiceStateChange
    ) -> None:
        if state_change is ServiceStateChange.Removed:
            node_id = self.found.pop(name, None)
            if node_id:
                self.on_lost(node_id)
            self.on_event()
            return
        if len(self._tasks) >= MAX_RESOLVING or (
            name not in self.found and len(self.found) >= MAX_FOUND
        ):
            self.ignored["busy"] = self.ignored.get("busy", 0) + 1
            return
        task = asyncio.get_running_loop().create_task(self._resolve(service_type, name))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _resolve(self, service_type: str, name: str) -> None:
        try:
            await self._resolve_one(service_type, name)
        finally:
            self.on_event()

    async def _resolve_one(self, service_type: str, name: str) -> None:
        assert self._azc is not None
        info = AsyncServiceInfo(service_type, name)
        if not await info.async_request(self._azc.zeroconf, 2000):
            self.ignored["unresolved"] = self.ignored.get("unresolved", 0) + 1
            return
        advert = parse_txt(info.properties or {})
        if isinstance(advert, str):
            self.ignored[advert] = self.ignored.get(advert, 0) + 1
            return
        if advert.node_id == self.node_id:
            return  # ourselves
        if advert.room != self.room:
            self.ignored["other_room"] = self.ignored.get("other_room", 0) + 1
            return
        hosts = info.parsed_addresses(IPVersion.V4Only)
        if not hosts or not info.port:
            self.ignored["no_address"] = self.ignored.get("no_address", 0) + 1
            return
        if not self._reachable(hosts[0]):  # this laptop's own services, or no host at all
            self.ignored["bad_address"] = self.ignored.get("bad_address", 0) + 1
            return
        self.found[name] = advert.node_id
        self.on_found(advert.node_id, hosts[0], advert.port)

    def _reachable(self, host: str) -> bool:
        """An advertised address a node may dial: not loopback (an advert from the LAN must not
        point this laptop at its own local services) unless discovery itself runs on loopback
        (tests), and never unspecified, multicast or broadcast."""
        try:
            ip = ipaddress.IPv4Address(host)
        except ValueError:
            return False
        if ip.is_unspecified or ip.is_multicast or ip == ipaddress.IPv4Address("255.255.255.255"):
            return False
        on_loopback = any(a.startswith("127.") for a in self.interfaces or [])
        return on_loopback or not ip.is_loopback

    async def close(self) -> None:
        """Say goodbye on the LAN (peers see us vanish at once), then stop browsing."""
        for t in list(self._tasks):
            t.cancel()
        if self._azc is not None and self._info is not None:
            try:
                await (await self._azc.async_unregister_service(self._info))  # goodbyes sent
            except Exception:  # noqa: BLE001 - it may never have registered
                pass
        if self._browser is not None:
            await self._browser.async_cancel()
        if self._azc is not None:
            await self._azc.async_close()
