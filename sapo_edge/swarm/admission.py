"""Joining a room with a short code people can type ('7-guitarist-revenge'), as magic-wormhole
does: a member that admits runs SPAKE2 with the newcomer, the code being the password, and hands
over the room's credential encrypted under the SPAKE2 key. Neither an eavesdropper nor a wrong
guesser gets anything to test guesses against offline: each guess is one online attempt, the
admitting side counts failed attempts per code and per address and retires the code after a few,
and codes expire (the book of codes and what an address may spend: admission_codes.py).

API (the `host` / `join CODE` commands build on it):
    admissions = Admissions(Grant(room="lab", secret=room_key_code))
    code = admissions.new_code()                       # show it to the class
    NetworkTransport(..., admissions=admissions)       # serves GET /admit (websocket)
    grant = join_room("10.0.0.5:7744", code)           # on the newcomer's laptop
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import hmac
import os
import secrets
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from spake2 import SPAKE2_A, SPAKE2_B
from spake2.ed25519_basic import NotOnCurve
from spake2.spake2 import SPAKEError

from ..data.safejson import dumps_canonical
from .admission_codes import (  # noqa: F401 - the code book, for callers of this module
    MAX_EXTRA_CHARS,
    AdmissionError,
    Admissions,
    Grant,
    _Code,
    normalise,
)
from .identity import Identity, node_id_for_key, verify
from .peer import Closed, read_raw
from .protocol import (
    MAX_HANDSHAKE_BYTES,
    PROTOCOL_VERSION,
    Bye,
    ProtocolError,
    check_fields,
    known_reason,
    load,
    make_bye,
    parse_message,
)

ID_JOINER, ID_MEMBER = b"sapo-edge/2 joiner", b"sapo-edge/2 member"
MAX_WELCOME_BYTES = 96 << 10  # the welcome (hex box of the grant): what a joiner accepts
WHO_BYTES = 1024  # the joiner's boxed key, name and signature: at most this many bytes
_SPECS = {
    "admit": {
        "type": ("str", 16),
        "version": ("int", 0),
        "nameplate": ("str", 4),
        "pake": ("str", 200),
    },
    "pake": {"type": ("str", 16), "pake": ("str", 200)},
    "confirm": {"type": ("str", 16), "mac": ("hex", 64), "who": ("str", 2 * WHO_BYTES)},
    "welcome": {"type": ("str", 16), "box": ("str", MAX_WELCOME_BYTES - 64)},
}
_GRANT = {"room": ("str", 64), "secret": ("str", 400), "relay": ("str", 400), "rekey": ("str", 64)}
HEX_DIGITS = "0123456789abcdef"
# who the joiner is (its public key, name and its signature of both bound to this exchange),
# boxed under the SPAKE2 key in its confirm, so the# class view has its row from admission on; "" when it says nothing
_WHO = {"key": ("hex", 64), "name": ("str", 40), "sig": ("hex", 128)}


def _password(code: str) -> bytes:
    return b"sapo-edge/2 admission code\0" + normalise(code).encode("utf-8")


def _confirm(key: bytes) -> bytes:
    return hmac.new(key, b"sapo-edge/2 admit joiner confirms", hashlib.sha256).digest()


def _box_key(key: bytes, what: bytes = b"sapo-edge/2 admit box") -> bytes:
    return HKDF(hashes.SHA256(), 32, None, what).derive(key)


_WHO_KEY = b"sapo-edge/2 admit joiner says who"


def _who_signed(key: bytes, public_key: bytes, name: str) -> bytes:
    """What the joiner signs: its key and name, bound to this exchange's SPAKE2 key (so a
    signature seen once proves nothing in another admission)."""
    bound = _box_key(key, b"sapo-edge/2 admit who is bound to")
    return b"sapo-edge/2 admit who\0" + bound + public_key + name.encode("utf-8")


def _who_box(key: bytes, ident: Identity, name: str) -> str:
    name = name[:40]
    sig = ident.sign(_who_signed(key, ident.public_key, name))
    fields = {"key": ident.public_key.hex(), "name": name, "sig": sig.hex()}
    plain = dumps_canonical(fields).encode("utf-8")
    nonce = os.urandom(12)
    box = nonce + ChaCha20Poly1305(_box_key(key, _WHO_KEY)).encrypt(nonce, plain, b"who")
    if len(box) > WHO_BYTES:
        raise ValueError(f"who the joiner is takes {len(box)} bytes, over {WHO_BYTES}.")
    return box.hex()


def _who(key: bytes, box_hex: str) -> tuple[str, str] | None:
    """(node id, name) from a joiner's box; None when it gave none or it does not hold up: it
    does not open under this exchange's key, or the name is not signed by the key whose node
    id it would be (a code holder cannot speak for another student's row). The admission
    stands either way."""
    if not box_hex:
        return None
    try:
        box = bytes.fromhex(box_hex)
        plain = ChaCha20Poly1305(_box_key(key, _WHO_KEY)).decrypt(box[:12], box[12:], b"who")
        d = check_fields(load(plain, WHO_BYTES), _WHO, "who")
        public_key = bytes.fromhex(d["key"])
        signed = _who_signed(key, public_key, d["name"])
    except (InvalidTag, ValueError, ProtocolError):
        return None
    if not verify(public_key, bytes.fromhex(d["sig"]), signed):
        return None
    return node_id_for_key(public_key), d["name"]


PAKE_BYTES = 33  # a side byte and an Ed25519 group element


def _finish(side: SPAKE2_A | SPAKE2_B, pake_hex: str, problem: str) -> bytes:
    """The SPAKE2 key from the other side's message, or AdmissionError('bad_value'): the
    library raises ValueError, its own SPAKEError (OffSides: a message from the same side)
    and NotOnCurve (a point off the curve), none a subclass of another."""
    try:
        data = bytes.fromhex(pake_hex)
        if len(data) != PAKE_BYTES:
            raise ValueError(f"{len(data)} bytes, not {PAKE_BYTES}")
        return side.finish(data)
    except (ValueError, SPAKEError, NotOnCurve):
        raise AdmissionError("bad_value", problem) from None


def _msg(kind: str, **fields: Any) -> bytes:
    return dumps_canonical({"type": kind, **fields}).encode("utf-8")


async def _read(ws, kind: str, cap: int = MAX_HANDSHAKE_BYTES) -> dict[str, Any]:
    raw = await read_raw(ws)
    if isinstance(raw, Closed):
        raise AdmissionError(raw.reason or "closed", "the other side hung up.")
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if len(data) > cap:
        raise AdmissionError("too_large", f"an admission message over {cap} bytes.")
    obj = load(data, cap)
    if isinstance(obj, dict) and obj.get("type") == "bye":
        bye = parse_message(data, MAX_HANDSHAKE_BYTES)
        assert isinstance(bye, Bye)
        raise AdmissionError(bye.reason, bye.message)
    if not isinstance(obj, dict) or obj.get("type") != kind:
        raise AdmissionError("unexpected_message", f"expected {kind}.")
    if kind == "confirm":  # a joiner of an earlier version says nothing of who it is
        obj.setdefault("who", "")
    return check_fields(obj, _SPECS[kind], kind)


# --- the admitting side -------------------------------------------------------------------------


def serve_admission(
    admissions: Admissions,
    log: Callable[[str], None],
    notify: Callable[[], None] = lambda: None,
):
    """An aiohttp handler for GET /admit (a websocket), for NetworkTransport's app; `notify` is
    called after every attempt (whatever its outcome)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(max_msg_size=MAX_HANDSHAKE_BYTES, compress=False, timeout=2.0)
        try:
            await ws.prepare(request)
        except (ConnectionError, RuntimeError, aiohttp.ClientError):
            return web.Response(status=400)  # hung up first: aiohttp lets this write fail quietly
        try:
            async with asyncio.timeout(10.0):
                await admit(ws, admissions, request.remote or "")
            log(f"admitted a newcomer from {request.remote} into room {admissions.grant.room!r}")
        except (AdmissionError, ProtocolError) as e:
            if not ws.closed:
                try:
                    await ws.send_bytes(make_bye(e.reason, str(e)))
                except (ConnectionError, RuntimeError):
                    pass
        except (TimeoutError, ConnectionError, RuntimeError):
            pass
        await ws.close()
        notify()
        return ws

    return handler


async def admit(ws, admissions: Admissions, ip: str = "") -> None:
    """One exchange with a newcomer from address `ip`; raises AdmissionError/ProtocolError
    when it fails."""
    first = await _read(ws, "admit")
    if first["version"] != PROTOCOL_VERSION:
        raise AdmissionError("unknown_version", "upgrade sapo-edge on one side.")
    c = admissions.begin(first["nameplate"], ip)
    ok, who, confirmed = False, None, False
    try:
        member = SPAKE2_B(_password(c.code), idA=ID_JOINER, idB=ID_MEMBER)
        out = member.start()
        key = _finish(member, first["pake"], "the SPAKE2 message is not usable.")
        await ws.send_bytes(_msg("pake", pake=out.hex()))
        confirm = await _read(ws, "confirm")
        confirmed = True
        if c.decoy or not hmac.compare_digest(bytes.fromhex(confirm["mac"]), _confirm(key)):
            raise AdmissionError("wrong_code", "wrong code: check the number and both words.")
        who = _who(key, confirm["who"])
        try:
            admissions.take_seat(c, who[0] if who else None, ip)
        except AdmissionError:
            ok = None  # proved the code, refused a seat: neither wrong nor admitted
            raise
        grant = admissions.grant
        extra = grant.extra
        if admissions.extra_for is not None:
            extra = admissions.extra_for(who[0] if who else None)
        said = {"room": grant.room, "secret": grant.secret, "relay": grant.relay, "extra": extra}
        plain = dumps_canonical({**said, **({"rekey": grant.rekey} if grant.rekey else {})})
        nonce = os.urandom(12)
        box = nonce + ChaCha20Poly1305(_box_key(key)).encrypt(nonce, plain.encode(), b"welcome")
        await ws.send_bytes(_msg("welcome", box=box.hex()))
        ok = True
    finally:
        if ok is None:
            admissions.refused(c, ip)
        elif not ok and not confirmed:  # cut before it said anything to test: not a guess
            admissions.abandoned(c, ip)
        else:
            admissions.end(c, ok, ip, who[0] if who else None)
    if who is not None and admissions.on_admitted is not None:
        try:
            admissions.on_admitted(*who)
        except Exception as e:  # noqa: BLE001 - a view's bug must not fail the admission
            admissions.log(f"class view: could not add the newcomer's row: {e}")


# --- the joining side ---------------------------------------------------------------------------


async def join(
    address: str, code: str, *, timeout: float = 15.0, who: tuple[Identity, str] | None = None
) -> Grant:
    """Ask the member at `address` (HOST:PORT or ws://...) for the room behind `code`; a busy
    code (others joining at the same moment) is retried until `timeout`. `who`: this node's
    (identity, name), signed and told the admitting side under the code's key (a class view's
    row)."""
    async with asyncio.timeout(timeout):
        while True:
            try:
                return await _join_once(address, code, who)
            except AdmissionError as e:
                if e.reason != "busy":
                    raise
            await asyncio.sleep(0.1 + secrets.randbelow(300) / 1000)


async def _join_once(address: str, code: str, who: tuple[Identity, str] | None = None) -> Grant:
    code = normalise(code)
    nameplate = code.split("-", 1)[0]
    if not nameplate.isdigit() or code.count("-") < 2:
        raise AdmissionError("wrong_code", "a code looks like 7-guitarist-revenge.")
    url = address if "://" in address else f"ws://{address}"
    url = url.rstrip("/").removesuffix("/ws").removesuffix("/admit") + "/admit"
    async with aiohttp.ClientSession() as session:
        try:
            ws = await session.ws_connect(url, max_msg_size=MAX_WELCOME_BYTES, compress=0)
        except aiohttp.ServerDisconnectedError:  # its connection limits: many joining at once
            raise AdmissionError("busy", "the member is busy; trying again.") from None
        except (aiohttp.ClientError, OSError) as e:
            if getattr(e, "errno", None) == errno.ECONNRESET:  # the same limits, under load
                raise AdmissionError("busy", "the member is busy; trying again.") from None
            raise AdmissionError("refused", f"cannot reach {address}: {e}") from None
        try:
            joiner = SPAKE2_A(_password(code), idA=ID_JOINER, idB=ID_MEMBER)
            await ws.send_bytes(
                _msg(
                    "admit",
                    version=PROTOCOL_VERSION,
                    nameplate=nameplate,
                    pake=joiner.start().hex(),
                )
            )
            reply = await _read(ws, "pake")
            key = _finish(joiner, reply["pake"], "the member's SPAKE2 message is not usable.")
            said = _who_box(key, *who) if who is not None else ""
            await ws.send_bytes(_msg("confirm", mac=_confirm(key).hex(), who=said))
            box_hex = (await _read(ws, "welcome", MAX_WELCOME_BYTES))["box"]
            try:
                box = bytes.fromhex(box_hex)
                plain = ChaCha20Poly1305(_box_key(key)).decrypt(box[:12], box[12:], b"welcome")
            except (InvalidTag, ValueError):
                raise AdmissionError(
                    "wrong_code", "the welcome does not open: wrong code."
                ) from None
            d = load(plain, MAX_WELCOME_BYTES)
            if isinstance(d, dict):
                d.setdefault("extra", "")  # a member of an earlier version sends none
                d.setdefault("rekey", "")  # ...and a host that replaced no key
            d = check_fields(d, {**_GRANT, "extra": ("str", MAX_EXTRA_CHARS)}, "welcome")
            if d["rekey"] and (len(d["rekey"]) != 64 or not set(d["rekey"]) <= set(HEX_DIGITS)):
                raise ProtocolError(
                    "bad_value", "welcome.rekey must be 64 lowercase hex characters."
                )
            return Grant(d["room"], d["secret"], d["relay"], d["extra"], d["rekey"])
        except ProtocolError as e:
            raise AdmissionError(known_reason(e.reason), str(e)) from None
        finally:
            await ws.close()


def join_room(
    address: str, code: str, *, timeout: float = 15.0, who: tuple[Identity, str] | None = None
) -> Grant:
    """join() for code that is not async (the CLI)."""
    return asyncio.run(join(address, code, timeout=timeout, who=who))
