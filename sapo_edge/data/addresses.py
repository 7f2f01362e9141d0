"""host:port text: the default ports, splitting (IPv6 in brackets), filling in a missing port
or host for --listen, --peer and --relay, and the HOST:PORT check Config's validation uses."""

from __future__ import annotations

from typing import Any

DEFAULT_PORT = 7744  # a node's websocket
RELAY_PORT = 7745  # `sapo-edge relay`


def split_host(text: str) -> tuple[str, str | None]:
    """'h:1' -> ('h', '1'); 'h' -> ('h', None); '[::1]:1' -> ('[::1]', '1'); '::1' -> ('[::1]', None)."""
    if text.startswith("["):
        host, _, rest = text.partition("]")
        return host + "]", (rest[1:] if rest.startswith(":") else None)
    if text.count(":") > 1:  # a bare IPv6 address
        return f"[{text}]", None
    host, sep, port = text.rpartition(":")
    return (host, port) if sep else (text, None)


def bind_address(listen: str, default_host: str = "0.0.0.0") -> tuple[str, int]:
    """(host, port) a server binds for HOST:PORT text: '[::]:7744' -> ('::', 7744), ':7744' ->
    (default_host, 7744), '7744' -> (default_host, 7744). ValueError for no port."""
    text = listen.strip()
    host, port = split_host(text) if not text.isdigit() else ("", text)
    if port is None or not port.isdigit():
        raise ValueError(f"{listen!r} has no port: write HOST:PORT, e.g. 0.0.0.0:7744")
    return host.removeprefix("[").removesuffix("]") or default_host, int(port)


def normalise_listen(text: Any) -> Any:
    """'7744' -> '0.0.0.0:7744', '10.0.0.5' -> '10.0.0.5:7744', ':7744' -> '0.0.0.0:7744'."""
    if not isinstance(text, str) or not text.strip():
        return text
    text = text.strip()
    if text.isdigit():
        return f"0.0.0.0:{text}"
    host, port = split_host(text)
    return f"{host or '0.0.0.0'}:{DEFAULT_PORT if port is None else port}"


def normalise_peer(text: Any) -> Any:
    """'10.0.0.5' -> '10.0.0.5:7744'; HOST:PORT unchanged."""
    if not isinstance(text, str) or not text.strip() or "://" in text:
        return text
    host, port = split_host(text.strip())
    return f"{host}:{DEFAULT_PORT if port is None else port}" if host else text


def normalise_relay(text: Any) -> Any:
    """'localhost:7745' -> 'ws://localhost:7745', 'relay.lan' -> 'ws://relay.lan:7745'."""
    if not isinstance(text, str) or not text.strip() or "://" in text:
        return text.strip() if isinstance(text, str) else text
    host, port = split_host(text.strip().rstrip("/"))
    return f"ws://{host}:{RELAY_PORT if port is None else port}" if host else text


def hostport(text: Any, allow_zero: bool) -> bool:
    """HOST:PORT with a host and a port below 65536 (0 only where allow_zero)."""
    if not isinstance(text, str):
        return False
    host, sep, port = text.rpartition(":")
    return bool(
        sep and host and port.isdigit() and (allow_zero or int(port) > 0) and int(port) < 65536
    )
