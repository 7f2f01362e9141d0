"""The projector page: the class view as a plain web page served by the host (aiohttp; static
HTML, CSS and a small script that draws the chart as SVG; no build step, nothing fetched from
elsewhere). Read-only: GET only. It never holds the room key; the join code is shown only to
this machine (loopback) or to a browser that has the host's page token.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

STATIC = Path(__file__).with_name("static")
REFRESH_S = 1.0  # the class is taken from the board at most this often, however many ask
FILES = {
    "/": ("index.html", "text/html"),
    "/class.js": ("class.js", "text/javascript"),
    "/class.css": ("class.css", "text/css"),
}
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def host_header_ok(host: str | None) -> bool:
    """Only IP literals and 'localhost' are served: a web page elsewhere cannot rebind a name of
    its own to this machine (DNS rebinding) and read the join code as a loopback client."""
    if not host:
        return False
    if host.startswith("["):
        name = host[1:].split("]", 1)[0]
    elif host.count(":") == 1:
        name = host.split(":", 1)[0]
    else:
        name = host  # no port, or a bare IPv6 literal
    if name.lower() == "localhost":
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def may_see_code(remote: str | None, given: str, token: str) -> bool:
    """The join code goes to this machine's own browser, or to one that has the page token."""
    try:
        if remote and ipaddress.ip_address(remote.split("%")[0]).is_loopback:
            return True
    except ValueError:
        pass
    return bool(token) and hmac.compare_digest(given.encode(), token.encode())


def make_app(
    class_json: Callable[[], dict[str, Any]],
    code: Callable[[], str],
    token: str,
    qr_svg: Callable[[str], str],
    taught: Callable[[str], list[dict[str, Any]]] | None = None,
) -> web.Application:
    """class_json(): the class (ClassSnapshot.to_json() plus the task); code(): the current join
    code; qr_svg(code): the code as an SVG QR image; taught(node_id): what that member teaches
    (classroom/taught.py: made safe and bounded there), shown when its row is clicked."""

    @web.middleware
    async def guard(request: web.Request, handler) -> web.StreamResponse:
        if not host_header_ok(request.headers.get("Host")):
            return web.Response(status=421, text="use this page by its IP address\n")
        resp = await handler(request)
        resp.headers.update(HEADERS)
        return resp

    def visible(request: web.Request) -> bool:
        return may_see_code(request.remote, request.query.get("token", ""), token)

    async def static(request: web.Request) -> web.Response:
        name, kind = FILES[request.path]
        body = (STATIC / name).read_bytes()
        return web.Response(body=body, content_type=kind, charset="utf-8")

    # One snapshot a second at most, taken off the event loop: the page shares its loop with
    # the class's relay and admissions, and anyone who can reach the page may poll it.
    cache: dict[str, Any] = {"at": 0.0, "text": None}
    lock = asyncio.Lock()

    def taken() -> str:  # the class as JSON text without its closing brace
        return json.dumps({k: v for k, v in class_json().items() if k != "code"})[:-1]

    async def current() -> str:
        async with lock:
            if cache["text"] is None or time.monotonic() - cache["at"] >= REFRESH_S:
                loop = asyncio.get_running_loop()
                cache["text"] = await loop.run_in_executor(None, taken)
                cache["at"] = time.monotonic()
            return cache["text"]

    async def data(request: web.Request) -> web.Response:
        shown = json.dumps(code() if visible(request) else None)
        try:
            text = await current()
        except Exception:  # noqa: BLE001 - the host is starting (no board yet) or closing
            raise web.HTTPServiceUnavailable(text="the class is starting\n") from None
        return web.Response(
            text=f'{text}, "code": {shown}}}' if len(text) > 1 else f'{{"code": {shown}}}',
            content_type="application/json",
        )

    async def qr(request: web.Request) -> web.Response:
        if not visible(request):
            raise web.HTTPForbidden(text="the join code is shown on the teacher's screen\n")
        if not code():  # before the class's first code, or none admits anyone now
            raise web.HTTPServiceUnavailable(text="no join code admits anyone now\n")
        return web.Response(text=qr_svg(code()), content_type="image/svg+xml")

    async def teaches(request: web.Request) -> web.Response:
        node_id = request.query.get("id", "")
        if taught is None or len(node_id) != 32 or node_id.strip("0123456789abcdef"):
            raise web.HTTPBadRequest(text="id: a member's node id (32 hex)\n")
        return web.json_response({"id": node_id, "groups": taught(node_id)})

    app = web.Application(middlewares=[guard], client_max_size=1024)
    for path in FILES:
        app.router.add_get(path, static)
    app.router.add_get("/class.json", data)
    app.router.add_get("/qr.svg", qr)
    app.router.add_get("/taught.json", teaches)
    return app
