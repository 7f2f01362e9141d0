"""`sapo-edge host`: a teacher's class. A fresh room key and a short join code (SPAKE2
admission); a relay on this machine that also serves the admissions (or the teacher's --relay,
then the admissions are on this node's port); this node in the room, advertised on the LAN and
training too unless --no-train; the class's board of members' figures and the projector page.
"""

from __future__ import annotations

import json
import secrets
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from aiohttp import web

from ..config.settings import Config, ConfigError
from ..data.addresses import bind_address
from ..run.network import network_for
from ..swarm.admission import Admissions, Grant
from ..swarm.identity import Identity
from ..swarm.nats_room import is_nats_url, room_subjects
from ..swarm.network import NetworkTransport
from ..swarm.paths import RECENT_S
from ..swarm.progress import Progress
from ..swarm.roomkey import new_room_key
from .board import CLASS_FILE, ClassBoard
from .code import format_code, qr_lines
from .hint import Hints, teacher_hints
from .host_services import HostServices, lan_address
from .member import ClassMember, printable
from .removal import REPEATED, Removals, Repeater, teacher_says, tell
from .settings import describe_task, make_invite, read_invite
from .taught import TAUGHT_FILE, Taught

INFO_FILE = "class-info.json"  # who hosted, the task: what `report` needs besides class.jsonl
MAX_WRONG_CODES = 10  # a code survives this many wrong tries (typos of a whole class)


@dataclass
class HostOptions:
    address: str = ""  # put in the code ("": this machine's first LAN address)
    relay_host: str = "0.0.0.0"
    relay_port: int = 7745  # the local relay (and admissions); 0: any free port
    web: str = "127.0.0.1:7746"  # the projector page ("": none)
    train: bool = True  # this laptop trains as a member too
    code_minutes: float = 240.0
    max_members: int = 256  # the class's size: rows on the board, this laptop's included
    mdns_interfaces: list[str] | None = None  # tests: ["127.0.0.1"]


class LogSink:
    """Log lines go to `target` once one is set (the class view), until then to `fallback`."""

    def __init__(self, fallback: Callable[[str], None]) -> None:
        self.fallback = fallback
        self.target: Callable[[str], None] | None = None

    def __call__(self, text: str) -> None:
        (self.target or self.fallback)(text)


class ClassHost:
    """One class; see the module docstring. start() before use, close() after."""

    def __init__(
        self,
        cfg: Config,
        opts: HostOptions | None = None,
        *,
        identity: Identity | None = None,
        log: Callable[[str], None] = print,
    ) -> None:
        if not cfg.out_dir:
            raise ConfigError("the class needs an output folder (out_dir).")
        self.cfg, self.opts, self.log = cfg, opts or HostOptions(), LogSink(log)
        self.identity = identity
        self.out_dir = Path(cfg.out_dir)
        self.address = self.opts.address or lan_address()
        self.page_token = secrets.token_urlsafe(12)
        self.task = describe_task(make_invite(cfg, 0, 0, "").settings)
        self.code = ""
        self.name = ""  # this node's name in the class (set by start)
        self.admit_port = 0
        self.started_at = time.time()
        self.transport: NetworkTransport | None = None
        self.services: HostServices | None = None
        self.board: ClassBoard | None = None
        self.admissions: Admissions | None = None
        self.hints = Hints(cfg, lambda _example: "")  # set up with the invite at start()
        self._said_full = -1e9  # when the log last said the class is full
        self.removals: Removals | None = None  # whom the teacher removed (set by start)
        self._repeater: Repeater | None = None
        self.taught = Taught(self.out_dir / TAUGHT_FILE)  # what each member taught this laptop

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> ClassHost:
        from ..run.runs import laptop_identity

        # held: a join on this laptop under it would be one node twice
        ident = self.identity or laptop_identity(self.log, in_class=True)
        name = self.cfg.node_name(ident.name)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        key = new_room_key()  # in memory only: never written, never shown
        room = self.cfg.room if self.cfg.room != "default" else "class"
        own_relay = not self.cfg.relay
        self.admissions = Admissions(
            Grant(room, key, self.cfg.relay),
            ttl_s=self.opts.code_minutes * 60.0,
            max_failures=MAX_WRONG_CODES,
            max_newcomers=self.opts.max_members - 1,  # a code admits a class, not a crowd
            log=self.log,
            seat=self._seat,
        )
        web_host, web_port = bind_address(self.opts.web, "127.0.0.1") if self.opts.web else ("", 0)
        self.services = HostServices(
            relay=own_relay,
            relay_host=self.opts.relay_host,
            relay_port=self.opts.relay_port,
            admissions=self.admissions if own_relay else None,
            page=self._page if self.opts.web else None,
            web_host=web_host or "127.0.0.1",
            web_port=web_port,
            log=self.log,
        ).start()
        relay_url = self.cfg.relay or f"ws://127.0.0.1:{self.services.relay_port}"
        self.transport = network_for(
            self.cfg,
            ident,
            name=name,
            log=self.log,
            room=room,
            secret=key,
            relay=relay_url,
            mdns_interfaces=self.opts.mdns_interfaces,
            model=self.cfg.model,
            admissions=None if own_relay else self.admissions,
        )
        self.board = ClassBoard(
            self.out_dir / CLASS_FILE,
            host_id=ident.node_id,
            received=self.received_counts,
            max_members=self.opts.max_members,
            max_reward=1.0 + self.cfg.format_reward,  # the class's reward at most
        )
        self.board.admissions_known = True  # its mean and baseline: verified or admitted only
        self.transport.stats.on_stats = self.board.on_stats
        self.removals = Removals(self.transport)
        self.admissions.on_admitted = self._admitted
        try:
            self.transport.start()
        except BaseException:
            self.services.close()
            raise
        self.admit_port = self.services.relay_port if own_relay else self.transport.port
        invite = make_invite(
            self.cfg,
            self.transport.port,
            self.services.relay_port if own_relay else 0,
            name,
            ident.node_id,
        )
        if is_nats_url(self.cfg.relay):  # a server with per-room users needs them (rooms.conf)
            subjects = " and ".join(room_subjects(self.transport.keys.relay_id))
            self.log(f"NATS: this class publishes on {subjects} (packaging/nats/rooms.conf)")
        self.name = name
        if self.opts.train:  # the host's own row from the first second, while its model loads
            said = dict(name=printable(name, 40), model=printable(self.cfg.model, 120))
            self.board.record_progress(ident.node_id, Progress("loading", **said))
        host_id = ident.node_id
        self.hints = Hints(  # who sees the worked example: each newcomer's own settings
            self.cfg,
            lambda example: make_invite(  # None: as the class's settings say
                self.cfg if example is None else replace(self.cfg, format_example=example),
                invite.node_port,
                invite.relay_port,
                name,
                host_id,
                said_at=time.time(),  # its words from before this welcome are not heeded
            ).to_text(),
            working=self.board.working,
            log=self.log,
        )
        self.admissions.extra_for = self.hints.extra_for  # each welcome written as it goes
        if self.hints.active:
            invite = read_invite(self.hints.extra_for(None))  # the students' settings, no hint
            self.board.hinted = lambda node_id: self.hints.hinted(node_id, host_id)
            self.log(self.hints.describe())
        self.admissions.grant = Grant(room, key, self.cfg.relay, invite.to_text())
        self._repeater = Repeater(self.words, lambda node_id, phase: tell(self, node_id, phase))
        self.new_code()
        info = {
            "host_id": ident.node_id,
            "host_name": name,
            "task": self.task,
            "settings": invite.settings,
            "started": self.started_at,
            "hint": self.cfg.hint,  # who saw the worked example ("": as the settings say)
        }
        (self.out_dir / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        return self

    def log_to(self, target: Callable[[str], None] | None) -> None:
        """Send the class's log lines (links, admissions, the relay) to `target` from now on."""
        self.log.target = target

    def goodbye(self, timeout: float = 5.0) -> int:
        """Tell every student the class has ended (a signed progress "ended" on every link: the
        LAN, this node's address, the relay); waits until the links have taken it (bounded).
        Returns the links it went out on."""
        if self.transport is None:
            return 0
        bye = Progress("ended", name=printable(self.name, 40))
        return self.transport.stats.send_goodbye(bye, timeout)

    def end(self, say: Callable[[str], None]) -> None:
        """The end of the class (q, Ctrl-C): the goodbye on every path, then the network and
        the page close quietly, so the summary printed after is the last thing on screen."""
        n = self.goodbye()
        if n:
            say(
                f"told the class it ended ({n} link{'s' if n != 1 else ''}): each student "
                "chooses to stop or to go on training alone"
            )
        self.log_to(lambda _m: None)  # no "peer ... disconnected" lines after the summary
        self.close()

    def remove(self, who: str, removed: bool = True) -> str:
        """The teacher removes the member `who` names, or lets it back (removal.py); returns
        what to tell the teacher, ValueError what to type instead."""
        return teacher_says(self, who, removed)

    def hint(self, who: str, on: bool = True) -> str:
        """The teacher gives the member `who` names the worked example, or takes it back
        (hint.py); returns what to tell the teacher, ValueError what to type instead."""
        return teacher_hints(self, who, on)

    def words(self) -> list[tuple[float, str, str]]:
        """The teacher's words about members the Repeater says again (REPEATED at most): the
        newest removals first (a newcomer learns of one only so), hints in what room is left."""
        removed = sorted(self.removals.words())[-REPEATED:] if self.removals is not None else []
        room = REPEATED - len(removed)
        return removed + (sorted(self.hints.words())[-room:] if room else [])

    def close(self) -> None:
        if self._repeater is not None:
            self._repeater.stop()
        if self.transport is not None:
            self.transport.close()
        if self.services is not None:
            self.services.close()

    def _admitted(self, node_id: str, name: str) -> None:
        """A newcomer was admitted and said who it is: its row, "joining", from now on (its own
        signed progress takes over within seconds; a row that stays "joining" is a laptop
        that got in but reaches the class by no path)."""
        if self.board is not None and node_id != self.board.host_id:
            joining = Progress("joining", name=printable(name, 40))
            self.board.record_progress(node_id, joining, own=False)

    def _seat(self, node_id: str | None, ip: str) -> str:
        """Admissions.seat: a newcomer proved the code; "" gives it a seat on the board."""
        if self.board is None:
            return ""
        if node_id is not None and self.removals is not None and node_id in self.removals:
            return "removed"
        reason = self.board.admit(node_id, ip)
        now = time.monotonic()
        if reason == "class_full" and now - self._said_full > 10.0:  # one line in 10 s
            self._said_full = now
            self.log(
                f"the class is full ({self.opts.max_members} members with this laptop): a "
                f"newcomer from {ip} was refused (sapo-edge host --max-members N sets the size)"
            )
        return reason

    # ------------------------------------------------------------------ the code
    def new_code(self) -> str:
        """Retire the current code and show a new one (a code burned by wrong guesses, or one
        that leaked beyond the class); members already in stay in."""
        assert self.admissions is not None
        words = self.admissions.new_code()  # before the old one goes: another number, so the
        old, self.code = self.code, format_code(words, self.address, self.admit_port)
        if old:  # old code is refused as replaced, never counted as a wrong try; the new one
            self.admissions.revoke(old.split("@", 1)[0])  # is shown first (no "none valid")
        if old and self.transport is not None:  # members' exit summaries print the one in force
            self.transport.stats.announce(
                Progress("code", name=printable(self.name, 40), code=self.code)
            )
        return self.code

    def live_code(self) -> str:
        """The code while it still admits anyone; "" once it has expired or was retired by
        wrong tries (then the page shows no code and the class view says to press n)."""
        code = self.code
        if not code or self.admissions is None:
            return ""
        return code if self.admissions.is_live(code.split("@", 1)[0]) else ""

    def code_lines(self) -> list[str]:
        return qr_lines(self.code)

    # ------------------------------------------------------------------ views
    def page_url(self) -> str:
        if self.services is None or not self.opts.web:
            return ""
        host = self.services.web_host
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else "[::1]" if host == "::" else host
        shown = f"[{shown}]" if ":" in shown and not shown.startswith("[") else shown
        return f"http://{shown}:{self.services.web_port}/"

    def class_json(self) -> dict[str, Any]:
        assert self.board is not None
        return {**self.board.snapshot().to_json(), "task": self.task, "lesson": self.hints.lesson()}

    def _page(self) -> web.Application:
        from ..web.page import make_app

        return make_app(self.class_json, self.live_code, self.page_token, _qr_svg, self.taught.of)

    def received_counts(self) -> dict[str, int]:
        """Groups this host's own transport verified, per member node id."""
        if self.transport is None:
            return {}
        return {p.node_id: p.accepted for p in self.transport.peers()}

    def describe(self) -> str:
        """'4 of 30 members · 2 linked directly (2 lan), 1 via the relay · relay up' for the
        header: the members on the board (of the class's size), and the paths that carry them (every count from the same
        moment: a member linked directly is not also counted as heard through the relay)."""
        t = self.transport
        n = len(self.board.members) if self.board is not None else 0
        members = f"{n} of {self.opts.max_members} members"
        if t is None or self.board is None:
            return f"{members} · not started"
        paths = t.paths()
        direct, own = paths.direct, t.ident.node_id
        heard = [k for k in self.board.heard_since(time.time() - RECENT_S) if k not in direct]
        heard = [k for k in heard if k != own]  # (the board's members, not only the relay's)
        vias = Counter(direct.values())
        parts = [f"{len(direct)} linked directly"]
        if vias:
            parts[0] += " (" + ", ".join(f"{c} {v}" for v, c in sorted(vias.items())) + ")"
        parts.append(f"{len(heard)} via the relay" if paths.relay_up else "relay down")
        return f"{members} · {', '.join(parts)} · listening on :{t.port}"

    # ------------------------------------------------------------------ training
    def member_callback(self, inner: Any) -> ClassMember:
        """The host's own node reports like any member (and straight onto its board)."""
        assert self.transport is not None and self.board is not None
        return ClassMember(
            inner,
            self.transport.stats.publish_stats,
            local=self.board.record,
            log=self.log,
            local_progress=self.board.record_progress,
            removals=self.removals,
            taught=self.taught.record,
        )

    def train(self, callback: Any, log: Callable[[str], None], control: Any) -> Any:
        """Train this laptop as a member (blocks until its rounds are done or it is stopped)."""
        from ..run.runner import run_single
        from ..run.session import Session

        assert self.transport is not None
        cfg = self.hints.host_config(self.cfg)  # the example when the hint names the host
        # its network started with the class (students link while its model loads) and stays
        # open when its own training ends: the class goes on until close()
        session = Session.for_network(self.transport, started=True, keep_open=True)
        return run_single(cfg, self.member_callback(callback), log, control, session)


def _qr_svg(code: str) -> str:
    import io

    import segno

    out = io.BytesIO()
    segno.make(code, error="m").save(out, kind="svg", scale=8, border=2, xmldecl=False)
    return out.getvalue().decode("utf-8")
