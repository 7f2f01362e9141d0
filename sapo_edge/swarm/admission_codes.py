"""The admitting side's book of short codes ('7-guitarist-revenge'): which codes it accepts,
their wrong tries (per code and per address), and what one address may spend: the numbers are
drawn at random and a number no code holds gets the same exchange as one that does (under a
password nobody was shown), so nobody can find or burn a new code without its words; what the
exchange itself says is admission.py.
"""

from __future__ import annotations

import secrets
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from .words import WORDS

MAX_NUMBER = 999  # a code's number: 1..999 (short to type, and part of what a guesser must hit)
RETIRED_KEPT = 256  # numbers of codes retired or expired, answered "no such code" for a while
DECOYS_KEPT = 1024  # numbers no code holds that someone tried: their wrong tries, kept
MAX_EXTRA_CHARS = 16 << 10  # Grant.extra: the classroom's settings as JSON


class AdmissionError(Exception):
    """Joining failed; `reason` says why (wrong_code, no_such_code, expired_code, busy, ...)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Grant:
    """What a newcomer receives: the room's name and credential (and a relay to reach it), and
    `extra`: what the application hands over with it (the classroom's settings, as JSON text)."""

    room: str
    secret: str
    relay: str = ""
    extra: str = ""
    rekey: str = ""  # 64 hex: the secret a class's host replaced the room's keys with (keyring.py)

    def __post_init__(self) -> None:
        if len(self.extra) > MAX_EXTRA_CHARS:
            raise ValueError(f"Grant.extra is over {MAX_EXTRA_CHARS} characters.")


@dataclass
class _Code:
    code: str
    expires: float
    failures: int = 0
    pending: int = 0
    admitted: int = 0
    newcomers: int = 0  # identities this code admitted that no code here had admitted before
    decoy: bool = False  # a number no code holds: its password is one nobody was shown
    # per remote address: wrong attempts, and exchanges under way (at most max_failures
    # entries each: every entry stands for a failure or a pending exchange)
    ip_failures: Counter = field(default_factory=Counter)
    ip_pending: Counter = field(default_factory=Counter)

    @property
    def number(self) -> str:
        return self.code.split("-", 1)[0]


class AddressBudget:
    """A token bucket per remote address (`burst` tokens, one back every `every_s` seconds);
    the longest unused addresses are forgotten past `max_addresses`."""

    def __init__(self, burst: int, every_s: float, max_addresses: int = 4096) -> None:
        self.burst, self.every_s, self.max_addresses = burst, every_s, max_addresses
        self._left: OrderedDict[str, tuple[float, float]] = OrderedDict()  # ip -> (tokens, at)

    def left(self, ip: str, now: float) -> float:
        tokens, at = self._left.pop(ip, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + max(0.0, now - at) / self.every_s)
        self._left[ip] = (tokens, now)
        while len(self._left) > self.max_addresses:
            self._left.popitem(last=False)
        return tokens

    def take(self, ip: str, now: float, n: float = 1.0) -> None:
        self._left[ip] = (self.left(ip, now) - n, now)


@dataclass
class Admissions:
    """The codes one member accepts, each good until `ttl_s` passes or `max_failures` wrong
    attempts (a confirmation that does not hold; an exchange abandoned before its confirmation
    costs the address an admission instead, `abandoned`). Thread-confined to the
    network loop, except new_code()/revoke() (a lock is not needed: dict updates are atomic).

    What one address may spend, whatever number it names: `wrong_burst` wrong tries, one more
    every `wrong_every_s` seconds (a number no code holds costs the same as a wrong word, so
    trying numbers finds nothing for free); `admit_burst` admissions, one more every
    `admit_every_s` (a class behind one school NAT joins in the same minute; one laptop with
    the code cannot admit hundreds of identities a minute). `max_newcomers`: the identities one
    code admits (0: any number), after which it is used up (n makes another). `seat`, when
    set, is asked once a newcomer has proved the code, with the node id it says it is (None
    when it says nothing) and its address: "" admits it, a reason refuses it (`class_full`:
    the class has no room; nothing counts against the code)."""

    grant: Grant
    ttl_s: float = 600.0
    max_failures: int = 5
    # One address may spend only this many of a code's wrong attempts (and hold only this many
    # exchanges at once): a single laptop cannot burn the class's code for everyone.
    max_failures_per_ip: int = 3
    wrong_burst: int = 10
    wrong_every_s: float = 30.0
    admit_burst: int = 32
    admit_every_s: float = 1.0
    max_newcomers: int = 0
    clock: Callable[[], float] = time.monotonic
    codes: dict[str, _Code] = field(default_factory=dict)  # nameplate -> code
    log: Callable[[str], None] = lambda _m: None
    # called on the network loop with (node id, name) a newcomer gave in its admission (boxed
    # under the code's key: only a code holder's word, like the code itself); must be quick
    on_admitted: Callable[[str, str], None] | None = None
    seat: Callable[[str | None, str], str] | None = None
    # the grant's `extra` for a newcomer that said who it is (its node id, or None): a class
    # sends each student its own settings (the worked example to some: classroom/hint.py)
    extra_for: Callable[[str | None], str] | None = None
    retired: deque = field(default_factory=lambda: deque(maxlen=RETIRED_KEPT))
    decoys: OrderedDict = field(default_factory=OrderedDict)  # nameplate -> _Code
    admitted_ids: set = field(default_factory=set)  # node ids any code here admitted

    def __post_init__(self) -> None:
        self.wrong = AddressBudget(self.wrong_burst, self.wrong_every_s)
        self.admits = AddressBudget(self.admit_burst, self.admit_every_s)

    def new_code(self, ttl_s: float | None = None) -> str:
        """A fresh code 'N-word-word': 16 bits of words behind a number drawn at random from
        1..999, never that of a live code or of one retired or expired lately (whoever still
        types the old code is refused as `no_such_code`, not counted against the new one, and
        revoking the old code by its text cannot remove the new one). Wrong tries at the number
        before this code existed do not count against it."""
        self._expire()
        taken = set(self.codes) | set(self.retired)
        free = [str(n) for n in range(1, MAX_NUMBER + 1) if str(n) not in taken]
        if not free:
            raise RuntimeError(f"{MAX_NUMBER} admission codes are open at once; revoke some.")
        n = secrets.choice(free)
        self.decoys.pop(n, None)
        words = "-".join(secrets.choice(WORDS) for _ in range(2))
        code = f"{n}-{words}"
        self.codes[n] = _Code(code, self.clock() + (ttl_s or self.ttl_s))
        return code

    def is_live(self, code: str) -> bool:
        """Whether this code still admits anyone: not expired, not retired by wrong tries, not
        revoked (read from any thread: one dict lookup)."""
        code = normalise(code)
        c = self.codes.get(code.split("-", 1)[0])
        return c is not None and c.code == code and c.expires >= self.clock()

    def revoke(self, code: str) -> None:
        """Retire this code (the whole code, not whatever code now has its number)."""
        code = normalise(code)
        c = self.codes.get(code.split("-", 1)[0])
        if c is not None and c.code == code:
            self._retire(c)

    def _retire(self, c: _Code) -> None:
        (self.decoys if c.decoy else self.codes).pop(c.number, None)
        self.retired.append(c.number)

    def _expire(self) -> None:
        now = self.clock()
        for c in [c for c in list(self.codes.values()) if c.expires < now]:  # list(): one
            # step under the GIL, so the UI thread's new_code never iterates a changing dict
            self._retire(c)

    def _decoy(self, nameplate: str) -> _Code:
        """The code nobody was shown at a number no code holds (its wrong tries kept)."""
        c = self.decoys.pop(nameplate, None)
        if c is None:
            c = _Code(f"{nameplate}-{secrets.token_hex(16)}", float("inf"), decoy=True)
        self.decoys[nameplate] = c
        while len(self.decoys) > DECOYS_KEPT:
            self.decoys.popitem(last=False)
        return c

    def begin(self, nameplate: str, ip: str = "") -> _Code:
        """Reserve one attempt at this code from address `ip`, or AdmissionError. A number no
        code holds gets a decoy (the exchange goes on and ends `wrong_code`), except one retired
        lately, which is refused as `no_such_code` (nothing to find there)."""
        self._expire()
        now = self.clock()
        if self.wrong.left(ip, now) < 1.0:
            raise AdmissionError(
                "rate_limited", "too many wrong tries from this address; wait a minute."
            )
        if self.admits.left(ip, now) < 1.0:
            raise AdmissionError("busy", "many admissions from this address; try again soon.")
        c = self.codes.get(nameplate)
        if c is None:
            if nameplate in self.retired or not nameplate.isdigit():
                raise AdmissionError(
                    "no_such_code", "no such code here (expired, or mistyped number)."
                )
            c = self._decoy(nameplate)
        if c.ip_failures[ip] >= self.max_failures_per_ip:
            raise AdmissionError(
                "rate_limited", "too many wrong tries at this code from this address."
            )
        if c.failures + c.pending >= self.max_failures or (
            c.ip_failures[ip] + c.ip_pending[ip] >= self.max_failures_per_ip
        ):
            raise AdmissionError("busy", "this code is busy; try again in a moment.")
        c.pending += 1
        c.ip_pending[ip] += 1
        self.wrong.take(ip, now)  # given back when it admits (or is refused a seat)
        return c

    def take_seat(self, c: _Code, who: str | None, ip: str = "") -> None:
        """After the newcomer proved the code: AdmissionError when `seat` refuses it."""
        reason = self.seat(who, ip) if self.seat is not None else ""
        if reason:
            raise AdmissionError(reason, _REFUSED.get(reason, "not admitted now."))

    def end(self, c: _Code, ok: bool, ip: str = "", who: str | None = None) -> None:
        """The attempt is over: admitted (`ok`; `who`: the node id it said), or wrong."""
        self._done(c, ip)
        if ok:
            self.wrong.take(ip, self.clock(), -1.0)
            self.admits.take(ip, self.clock())
            c.admitted += 1
            if who is None or who not in self.admitted_ids:
                c.newcomers += 1
                if who is not None:
                    self.admitted_ids.add(who)
            if self.max_newcomers and c.newcomers >= self.max_newcomers and not c.decoy:
                self._retire(c)
                self.log(
                    f"admission code {c.number}-... used up: it admitted {c.newcomers} "
                    "newcomers (n makes a new one)"
                )
            return
        c.failures += 1
        c.ip_failures[ip] += 1
        if c.failures >= self.max_failures:
            self._retire(c)
            if not c.decoy:
                self.log(f"admission code {c.number}-... retired after {c.failures} wrong attempts")

    def abandoned(self, c: _Code, ip: str = "") -> None:
        """The exchange ended before the newcomer sent its confirmation (its own timeout on a
        busy laptop, a dropped connection): it learnt nothing it could test a guess with, so it
        is not a wrong try (issue 54: three of them locked a school's shared address out of the
        code for its life). Its work is charged to the address's admissions instead, which
        bound how many exchanges one address may start."""
        self._done(c, ip)
        now = self.clock()
        self.wrong.take(ip, now, -1.0)
        self.admits.take(ip, now)

    def refused(self, c: _Code, ip: str = "") -> None:
        """The newcomer proved the code but was not given a seat: neither a wrong try nor an
        admission."""
        self._done(c, ip)
        self.wrong.take(ip, self.clock(), -1.0)

    def _done(self, c: _Code, ip: str) -> None:
        c.pending -= 1
        c.ip_pending[ip] -= 1
        if c.ip_pending[ip] <= 0:
            del c.ip_pending[ip]


_REFUSED = {
    "class_full": "the class is full: ask the teacher (sapo-edge host --max-members sets its size).",
    "busy": "many newcomers from this address are still on their way in; trying again.",
    "removed": "the teacher removed this laptop from the class: only the teacher can let it "
    "back (readmit in the class view, or `readmit NAME` on a headless host).",
}


def normalise(code: str) -> str:
    return "-".join(code.strip().lower().replace(" ", "-").split("-")).strip("-")
