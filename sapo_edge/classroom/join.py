"""`sapo-edge join CODE`: everything from the code. Admission at the code's address (SPAKE2: a
wrong code learns nothing about the room), the class's settings checked against this laptop,
then a node that tries every path at once (LAN discovery, the host's address, the host's
relay) and says which one carries it, or what to do when none does.
"""

from __future__ import annotations

import dataclasses
import functools
import getpass
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.model_name import model_name
from ..config.settings import Config, ConfigError
from ..data.textsafe import clean
from ..run.network import network_for
from ..run.session import Session
from ..swarm.admission import AdmissionError, Grant, join_room
from ..swarm.identity import Identity
from ..swarm.network import NetworkTransport
from ..swarm.progress import Progress
from ..swarm.roomkey import room_keys
from .code import JoinCode, parse_code
from .hint import HintWord
from .member import ClassMember, printable
from .removal import Removals
from .settings import Invite, class_config, describe_task, fit_here, read_invite

FIRST_LINK_WAIT = 10.0  # before its first round a student waits this long for the class


class JoinError(ValueError):
    """Joining failed; the message says why and what to do (no traceback)."""


def admission_message(e: AdmissionError, code: JoinCode) -> str:
    where = code.address
    reasons = {
        "wrong_code": (
            "the host refused this code: wrong code. Check it on the teacher's screen and type "
            "it again (a code is retired after a few wrong tries; the teacher then shows a new "
            "one)."
        ),
        "no_such_code": (
            f"the host at {where} has no such code: it expired or was replaced, or the number "
            "before the words is mistyped. Ask the teacher for the code on the screen now."
        ),
        "expired_code": "this code has expired: ask the teacher for the code on the screen now.",
        "busy": "the host is busy admitting others: run the same command again in a moment.",
        "rate_limited": (
            "this laptop made too many wrong tries at this code: check the code on the "
            "teacher's screen, and ask the teacher for a new one (n in the class view)."
        ),
        "refused": (
            f"cannot reach the host at {where}: the class may have ended (a class admits no one "
            "once the teacher pressed q: ask the teacher whether it still runs, and for the code "
            "on the screen now). If it runs: check that this laptop is on the same network as "
            "the teacher's, that the address after @ is typed right, and that no firewall "
            f"blocks port {code.port} (`sapo-edge doctor` on both laptops checks). If this "
            "network keeps laptops apart, the teacher can host through a relay both reach "
            "(sapo-edge host --relay URL)."
        ),
        "timeout": (
            f"the host at {where} did not answer in time: the class may have ended (ask the "
            "teacher), or the network is slow: try again."
        ),
        "unknown_version": (
            "the host runs another version of sapo-edge: install the same version as the teacher."
        ),
    }
    if e.reason in ("missing_field", "unknown_field"):  # a message of another version
        return reasons["unknown_version"]
    return reasons.get(e.reason) or f"joining failed ({e.reason}): {clean(str(e), 200)}"


def admit(
    code: JoinCode, timeout: float = 15.0, who: tuple[Identity, str] | None = None
) -> tuple[Grant, Invite]:
    """The room's key and the class's settings, or JoinError (nothing learnt on a wrong code).
    `who`: this laptop's (identity, name), so the class view has its row from now on."""
    try:
        grant = join_room(code.address, code.words, timeout=timeout, who=who)
    except AdmissionError as e:
        raise JoinError(admission_message(e, code)) from None
    except TimeoutError:
        raise JoinError(admission_message(AdmissionError("timeout", ""), code)) from None
    return grant, read_invite(grant.extra)


@dataclass
class Joined:
    """A student's node, ready to run: its settings, its session (session.py: the transport,
    not started, and the backend chosen and memory checked before admission), its paths."""

    code: JoinCode
    invite: Invite
    cfg: Config
    transport: NetworkTransport  # not started until the session starts it
    relay: str  # "" when the class has none
    role: str  # "member" or "baseline"
    notes: list[str]  # what the student should know before the run (fit, resume, model)
    local: dict[str, Any] = dataclasses.field(default_factory=dict)  # this laptop's own flags
    class_ended: threading.Event = dataclasses.field(default_factory=threading.Event)
    on_class_ended: list[Callable[[], None]] = dataclasses.field(default_factory=list)
    code_in_force: str = ""  # the host's newer code once it said one (its n), else ""
    # the teacher removed this laptop from the class (the host's signed word); on_removed: once
    removed: threading.Event = dataclasses.field(default_factory=threading.Event)
    on_removed: list[Callable[[], None]] = dataclasses.field(default_factory=list)
    removals: Removals | None = None  # the members the host removed (set by hear_the_host)
    hint_word: HintWord | None = None  # the teacher's choice of the worked example for this laptop
    machine: tuple[str, str] | None = None  # (backend kind, device), chosen before admission
    memory_checked: Config | None = None  # the settings checked against this laptop's memory

    @functools.cached_property
    def session(self) -> Session:
        """Its run's session, made once with all its terms: the network stays open after the
        run's rounds (it is still told when the class ends), and the summary's way to go on is
        join's (`continue_command`)."""
        return Session.for_network(
            self.transport,
            machine=self.machine,
            memory_checked=self.memory_checked,
            keep_open=True,
            continue_command=self.continue_command,
        )

    def hear_the_host(self) -> None:
        """Heed the host's signed goodbye (its node id came with the room key): `class_ended`
        is set and `on_class_ended` called once. Members' progress and stats that reach this
        laptop are verified and counted as before, and otherwise ignored; over NATS a student
        hears the room's end subject only (not each other's stats)."""
        host_id = self.invite.host_id
        since = self.invite.said_at  # the host's words from before the welcome: not heeded
        self.removals = removals = Removals(self.transport, since)
        self.hint_word = hint_word = HintWord(self.transport.log, since)
        own_id = self.transport.ident.node_id

        def removed_now(at: float) -> None:
            if not self.removed.is_set():
                removals.heard(own_id, True, at)  # it takes no classmate's group now
                self.removed.set()
                self._tell(self.on_removed, "that the teacher removed this laptop")

        def heard(v: Any) -> None:
            p = v.progress
            if not host_id or v.sender != host_id or p is None:
                return
            if p.phase == "code":
                try:
                    self.code_in_force = str(parse_code(p.code))
                except ValueError:
                    pass  # not a code: the summary keeps the one typed
            if p.phase in ("hinted", "unhinted") and p.member == own_id:
                hint_word.heard(p.phase == "hinted", v.sent_at)
            if p.phase in ("removed", "readmitted") and p.member != own_id:
                removals.heard(p.member, p.phase == "removed", v.sent_at)
            elif p.phase == "removed" and v.sent_at >= since:
                removed_now(v.sent_at)
            if p.phase == "ended" and not self.class_ended.is_set():
                self.class_ended.set()
                self._tell(self.on_class_ended, "that the class ended")

        self.transport.stats.hear_host(heard, host_id, lambda: removed_now(time.time()))

    def alone_command(self, *, headless: bool, more: bool = False) -> str:
        """The command that goes on training alone from this run's checkpoint."""
        out = Path(self.cfg.out_dir).resolve()
        args = ["sapo-edge", "run", "--solo", "--config", str(out / self.cfg.name / "config.json")]
        args += ["--out-dir", str(out), "--resume"] + (["--headless"] if headless else [])
        return shlex.join(args + (["--rounds", str(self.cfg.rounds * 2)] if more else []))

    def _tell(self, callbacks: list[Callable[[], None]], what: str) -> None:
        for fn in list(callbacks):
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - the others are still told
                self.transport.log(f"could not show {what}: {e}")

    def continue_command(self, *, headless: bool, more: bool) -> str:
        """What the run's summary prints to go on: `join` with the code in force (the host's
        newer one after its n); once the class has ended, no code admits anyone: the run goes
        on alone from its checkpoint."""
        flags = ["--headless"] if headless else []
        flags += ["--rounds", str(self.cfg.rounds * 2)] if more else []
        if self.class_ended.is_set() or self.removed.is_set():
            why = (
                "the teacher removed this laptop from the class"
                if self.removed.is_set()
                else "the class has ended (no join code admits anyone now)"
            )
            return f"none: {why}; alone: {self.alone_command(headless=headless, more=more)}"
        args = ["sapo-edge", "join", self.code_in_force or str(self.code), *flags[:1]]
        args += ["--baseline"] if self.role == "baseline" else []
        for key in ("model", "name", "out_dir", "backend"):
            if key in self.local:
                args += [f"--{key.replace('_', '-')}", str(self.local[key])]
        return shlex.join(args + flags[1:]) + "  (or the code on the teacher's screen now)"

    @property
    def host_address(self) -> str:
        return f"{self.code.host}:{self.invite.node_port}"

    def callback(self, inner: Any) -> ClassMember:
        """The trainer callback that reports this laptop's rounds (and what it is doing) to the
        class; before its first round it waits (FIRST_LINK_WAIT at most) for a path to the
        class, so that round's rollouts reach the others."""
        return ClassMember(
            inner,
            self.transport.stats.publish_stats,
            role=self.role,
            first_link=self.wait_for_class,
            progress=self.transport.stats.publish_progress,
            last_word=self.transport.stats.send_goodbye,  # "left" or "done" at once, before it closes
            removals=self.removals,
            hint_word=self.hint_word,
        )

    def start_network(self) -> None:
        """Join the class's network now, before the model loads (minutes on a laptop), and say
        so: the class view shows this laptop as loading its model from the start. A network
        that cannot start here is started (and its error shown) by the run, as before."""
        try:
            self.session.start_network()
        except Exception:  # noqa: BLE001 - the run's session starts it again and says why
            return
        self.transport.stats.publish_progress(
            Progress(
                "loading",
                rounds=self.cfg.rounds,
                name=printable(self.cfg.name, 40),
                model=printable(model_name(self.cfg.model), 120),  # not "hub:smollm2-135m"
                role=self.role,
            )
        )

    def wait_for_class(self, timeout: float = FIRST_LINK_WAIT) -> bool:
        t = self.transport
        return t.wait_for(lambda: bool(t.connected()), timeout)


def _keep_pace(cfg: Config, notes: list[str]) -> Config:
    """The class's settings, lightened on a laptop too slow to keep the class's pace, in the
    dtype `--dtype auto` chose for them here: decided once, so the backend loads in the dtype the
    pace was estimated for (and a run continued from this folder trains in it too)."""
    from ..backends.rates import cpu_pace
    from ..machine.pace import keep_pace

    rates, cache, dtype = cpu_pace(cfg.dtype, lambda _msg: None, cfg.model, cfg)
    cfg, note = keep_pace(dataclasses.replace(cfg, dtype=dtype), rates, cache, dtype=dtype)
    if note:
        notes.append(note)
    return cfg


def account_name() -> str:
    """This computer's account name as a class name (letters, digits, '-' and '_', at most 40),
    or "" where there is none to read."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no account name (a container without one): the identity's
        return ""
    return "".join(c for c in user if c.isalnum() or c in "-_")[:40]


def join_class(
    code_text: str,
    local: dict[str, Any],
    *,
    baseline: bool = False,
    identity: Identity | None = None,
    device: str = "cpu",
    kind: str = "",
    mdns_interfaces: list[str] | None = None,
    log: Callable[[str], None] = print,
    timeout: float = 15.0,
) -> Joined:
    """Admission, then this laptop's settings and node; JoinError / ConfigError say what to do.
    `local`: this laptop's own settings (settings.LOCAL_FIELDS), e.g. from flags; `kind` and
    `device`: its backend (select_backend), said to peers from the first link."""
    code = parse_code(code_text)
    if identity is None:  # held: not the host's (or another join's) on this laptop
        from ..run.runs import laptop_identity

        identity = laptop_identity(lambda _m: None, in_class=True)  # unsaid, as before
    account = "" if local.get("name") else account_name()
    if account:  # issue 57: not a random name the teacher cannot place
        local = {**local, "name": account}
    said_name = printable(str(local.get("name") or identity.name), 40) or identity.name
    grant, invite = admit(code, timeout, (identity, said_name))
    cfg = class_config(invite, local)
    notes = [f"joined {clean(invite.host_name, 40)}'s class: {describe_task(invite.settings)}"]
    if account:
        notes.append(f"your name in the class: {account}, this computer's account (--name NAME)")
    if local.get("model") and local["model"] != invite.settings.get("model"):
        notes.append(
            f"training {clean(local['model'], 80)} (the class runs "
            f"{clean(invite.settings.get('model'), 80)}): rollouts are text, so models can differ"
        )
    if baseline:
        cfg = dataclasses.replace(
            cfg,
            local_samples=min(cfg.local_samples + cfg.external_samples, cfg.questions_per_round),
            external_samples=0,
            share="none",
        )
        notes.append(
            f"solo baseline: trains on {cfg.local_samples} own groups a round, none of the "
            "class's, and shares none; the class view draws it against the class's mean"
        )
    verdict, text = fit_here(cfg, device) if cfg.memory_check else ("ok", "")
    if verdict == "refuse":
        raise ConfigError(text)
    if not local.get("model") and device == "cpu":  # a laptop too slow for the class's pace
        paced = _keep_pace(cfg, notes)
        if paced is not cfg and cfg.memory_check:
            verdict, text = fit_here(paced, device)
        cfg = paced
    if verdict == "warn":
        notes.append(f"memory: {text}")
    keys = room_keys(grant.room, grant.secret)
    name = cfg.node_name(identity.name)
    cfg = dataclasses.replace(cfg, room=grant.room, name=name)
    if not cfg.out_dir:  # one folder per class: rejoining continues the same run
        from ..data.paths import runs_dir

        cfg = dataclasses.replace(cfg, out_dir=str(runs_dir() / f"class-{keys.lan_id[:12]}"))
    from ..run.runs import hold_run, is_used

    hold_run(Path(cfg.out_dir) / name)  # the same laptop joining twice (a second window)
    if is_used(Path(cfg.out_dir) / name) and not cfg.resume:
        cfg = dataclasses.replace(cfg, resume=True)
        notes.append(f"rejoining: continuing this laptop's run in {Path(cfg.out_dir) / name}")
    relay = grant.relay or (f"ws://{code.host}:{invite.relay_port}" if invite.relay_port else "")
    transport = network_for(
        cfg,
        identity,
        name=name,
        log=log,
        secret=grant.secret,
        peers=[f"{code.host}:{invite.node_port}"] if invite.node_port else [],
        relay=relay,
        mdns_interfaces=mdns_interfaces,
        model=model_name(cfg.model),
        backend=f"{kind}/{device}" if kind else "",  # peers see it before the model loads
    )
    transport.via_words = {"manual": "the host's address"}  # its one dialed address
    transport.heed_room_key(invite.host_id, grant.rekey)  # a removal replaced the room's key
    role = "baseline" if baseline else "member"
    machine = (kind, device) if kind else None  # chosen before admission: not chosen again
    # estimated above from the model's shape against this laptop's memory; a model estimated
    # only once fetched, or a GPU's own memory, is checked when the run loads it
    fitted = kind and verdict in ("ok", "warn") and not device.startswith("cuda")
    terms = dict(machine=machine, memory_checked=cfg if fitted else None)
    joined = Joined(code, invite, cfg, transport, relay, role, notes, dict(local), **terms)
    joined.hear_the_host()
    return joined
