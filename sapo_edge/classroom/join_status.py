"""What a student is told about its place in the class: which paths carry it in (the header),
what to check when none does, a clock the class's messages say is wrong, and the class's end
(whatever classmates are still linked)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .join import Joined

NO_PATH_AFTER = 20.0  # seconds without any link before the student is told what to check


@dataclass(frozen=True)
class ClassPath:
    """Which paths carry a student into its class now, as values (class_path); `describe()` is
    the header's words: 'in the class via the LAN (2 peers), the host's address ADDR and the
    host's relay (4 members heard)'."""

    started: bool  # its network listens (before: the node loads its model first)
    lan: int = 0  # LAN peers linked
    host_address: str = ""  # the host's address, while the link dialed to it is up
    relay_heard: int | None = None  # members heard through the relay, while it is up
    tried: tuple[str, ...] = ()  # what it tries while no path works

    @property
    def ok(self) -> bool:
        return bool(self.lan or self.host_address or self.relay_heard is not None)

    def describe(self) -> str:
        if not self.started:
            return "starting: this laptop joins the class's network once its model is loaded"
        parts = []
        if self.lan:
            parts.append(f"the LAN ({self.lan} peer{'s' if self.lan != 1 else ''})")
        if self.host_address:
            parts.append(f"the host's address {self.host_address}")
        if self.relay_heard is not None:
            n = self.relay_heard
            parts.append(f"the host's relay ({n} member{'s' if n != 1 else ''} heard)")
        if parts:
            return "in the class via " + ", ".join(parts)
        return "not in the class yet: trying " + ", ".join(self.tried)


def class_path(joined: Joined) -> ClassPath:
    """The paths that carry this student now (ClassPath)."""
    t = joined.transport
    if not t.port:  # not started: the node loads its model first
        return ClassPath(started=False)
    paths = t.paths()
    tried = ["the LAN" if t.mdns else "", joined.host_address, "the relay" if joined.relay else ""]
    return ClassPath(
        started=True,
        lan=paths.linked("lan"),
        host_address=joined.host_address if paths.linked("manual") else "",
        relay_heard=len(paths.heard) if paths.relay_up else None,
        tried=tuple(x for x in tried if x),
    )


NO_PATH_TITLE = "Cannot reach the class"
CLOCK_TITLE = "This laptop's clock looks wrong"


def follow_class(
    joined: Joined,
    *,
    say: Callable[[str], None],
    warn: Callable[[str, str], None],
    clear: Callable[[str], None],
    ended: Callable[[], None],
    removed: Callable[[], None] | None = None,
    on_path: Callable[[str], None] | None = None,
) -> PathWatcher:
    """What a student's run shows of the class, headless or in its dashboard: which path carries
    it (`say`, and `on_path` for a header), what to check while none does (`warn`, `clear`) and
    the teacher's end (`ended`, once, on the network's thread) and its removal of this laptop
    (`removed`, once, likewise); then its network starts, so the class sees this laptop while
    its model loads. stop() the watcher when the run ends."""
    joined.on_class_ended.append(ended)
    if removed is not None:
        joined.on_removed.append(removed)
    watcher = PathWatcher(joined, say, warn, clear=clear)
    watcher.on_path = on_path
    watcher.start()
    joined.start_network()
    return watcher


class PathWatcher:
    """Says which path carries this laptop into the class whenever that changes (`say`), and
    once per outage, after NO_PATH_AFTER seconds without any, what to check (`warn(title,
    remedy)`); once a warning no longer holds (a path works again, the class's messages are
    accepted), `clear(title)`. A thread of its own; stop() ends it."""

    def __init__(
        self,
        joined: Joined,
        say: Callable[[str], None],
        warn: Callable[[str, str], None],
        *,
        clear: Callable[[str], None] = lambda _t: None,
        every: float = 1.0,
        no_path_after: float = NO_PATH_AFTER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.joined, self.say, self.warn, self.clear = joined, say, warn, clear
        self.every, self.no_path_after, self.clock = every, no_path_after, clock
        self.last = ""
        self.on_path: Callable[[str], None] | None = None  # told each new text (the header)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="class-path", daemon=True)

    def start(self) -> PathWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        lost_since, warned, clock_warned = self.clock(), False, False
        while not self._stop.wait(self.every):
            if self.joined.transport.closed:  # the run left the class's network: nothing to say
                return
            try:
                path = class_path(self.joined)
                ok, text = path.ok, path.describe()
                expired = expired_count(self.joined.transport)
            except Exception:  # noqa: BLE001 - a transport not started yet or closing
                continue
            if expired >= CLOCK_WARN_AFTER and not clock_warned:
                clock_warned = True
                self.warn(CLOCK_TITLE, CLOCK_REMEDY)
            elif clock_warned and expired == 0:  # the class's messages are accepted now
                clock_warned = False
                self.clear(CLOCK_TITLE)
            out = self.joined.removed.is_set()
            over = self.joined.class_ended.is_set() or out
            if out:  # every classmate refuses it now: nothing to reach
                text = REMOVED_TEXT
            elif over:  # said whatever still links this laptop to classmates
                text = ended_text(text if ok else "")
            if text != self.last:
                self.last = text
                self.say(f"class: {text}")
                if self.on_path is not None:  # the dashboard's header, by a typed event
                    self.on_path(text)
            if ok or not self.joined.transport.port or over:
                lost_since = self.clock()  # connected, not started yet, or no class to reach
                if warned and ok:
                    warned = False
                    self.clear(NO_PATH_TITLE)
            elif not warned and self.clock() - lost_since >= self.no_path_after:
                warned = True
                self.warn(NO_PATH_TITLE, no_path_remedy(self.joined))


def ended_text(linked: str) -> str:
    """The header once the host has ended the class; `linked`: class_path's text while a path
    still works (classmates still running), else ""."""
    text = "the class has ended (the teacher's q)"
    if linked:
        text += "; still linked to classmates via " + linked.removeprefix("in the class via ")
    return text


# Batches and stats carry their sending time and are refused when it is over 5 minutes from the
# receiver's clock (replay protection): a laptop whose clock is off is refused both ways and
# trains alone, with every path up. Refused for that reason this often: say so.
CLOCK_WARN_AFTER = 3
CLOCK_REMEDY = (
    "What the class sends arrives over 5 minutes away from this laptop's clock, so it is "
    "refused both ways (and the class view cannot show this laptop): set this laptop's date "
    "and time to automatic (or to the teacher's clock), then join again."
)


def expired_count(transport: Any) -> int:
    """Batches and stats refused here as sent too far from this laptop's clock, while none at
    all was accepted (a hostile relay's old replays among good ones are not a wrong clock)."""
    c = transport.counters
    if c.get("delivered", 0) or c.get("stats_delivered", 0):
        return 0
    return int(c.get("rejected:expired", 0) + c.get("rejected:stats_expired", 0))


CLASS_ENDED_TITLE = "The class has ended"
REMOVED_TITLE = "Removed from the class"
REMOVED_TEXT = "removed from the class by the teacher: training alone"


def removed_remedy(stop: str, alone: str) -> str:
    """What a student is told when the teacher removes its laptop from the class; `alone`: the
    command that goes on training alone later."""
    return (
        "The teacher removed this laptop from the class: classmates no longer train on its "
        "answers, nor it on theirs. It goes on training alone until its rounds are done, its run "
        f"saved as it goes ({stop} stops it now). Later, alone: {alone}"
    )


def class_ended_remedy(stop: str, *, done: bool = False, leaving: bool = False) -> str:
    """What a student is told when the host ends the class; `stop`: the key or keys to stop;
    `done`: this laptop's rounds are already done; `leaving`: and it leaves by itself (a
    headless student that stayed to hear the end)."""
    if leaving:
        return "The teacher ended the class. This laptop's rounds are done and saved: it leaves."
    if done:
        return (
            f"The teacher ended the class. This laptop's rounds are done and saved: {stop} quits."
        )
    return (
        "The teacher ended the class. It is your choice: this laptop goes on training alone (with "
        "any classmates still running) until its rounds are done, its run saved as it goes; or "
        f"{stop} stops it now and saves the round under way."
    )


def stay_until_the_end(joined: Joined, say: Callable[[str], None], staying: threading.Event) -> int:
    """A headless student whose rounds are done stays in the class (classmates may still train
    on its groups) until the teacher ends it or Ctrl-C / SIGTERM (issue 57: such students had
    exited and were never told the class ended). Returns the exit status."""
    from ..run.stopping import exit_code, stop_signals

    staying.set()
    if joined.class_ended.is_set() or joined.removed.is_set():
        return 0
    say(
        "this laptop's rounds are done and saved; it stays in the class until the teacher "
        "ends it (Ctrl-C leaves now)"
    )
    left = threading.Event()
    with stop_signals(lambda _name: left.set()) as received:
        while not (joined.class_ended.wait(0.5) or left.is_set() or joined.removed.is_set()):
            pass
    return exit_code(received[0]) if received else 0


def no_path_remedy(joined: Joined) -> str:
    ports = ", ".join(str(p) for p in (joined.invite.node_port, joined.invite.relay_port) if p)
    return (
        f"Nothing reaches the host at {joined.code.host} (its address and its relay): check that "
        "this laptop is on the teacher's network, that the teacher's sapo-edge host is still "
        f"running, and that no firewall blocks port{'s' if ',' in ports else ''} {ports}. This "
        "laptop keeps training on its own meanwhile and rejoins by itself once a path works."
    )
