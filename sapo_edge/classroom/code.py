"""The class's join code: the short admission code and the host's address in one string
('7-acorn-zinnia@192.168.1.20:7745'), parsed with typo hints; shown in large letters and as a
QR code (segno) made of half blocks, for a terminal or a projector.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from dataclasses import dataclass

from ..data.addresses import RELAY_PORT
from ..swarm.admission import normalise
from ..swarm.words import WORDS

EXAMPLE = "7-acorn-zinnia@192.168.1.20:7745"
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252})?|\[[0-9A-Fa-f:.]{2,45}\]")


class CodeError(ValueError):
    """A join code that cannot be right; the message says what to check."""


@dataclass(frozen=True)
class JoinCode:
    words: str  # '7-acorn-zinnia': the SPAKE2 password, never sent
    host: str  # where the host serves admissions: an address or name ('[::1]' for IPv6)
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __str__(self) -> str:
        return f"{self.words}@{self.address}"


def format_code(words: str, host: str, port: int) -> str:
    host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return str(JoinCode(normalise(words), host, port))


def parse_code(text: str) -> JoinCode:
    """A JoinCode from what a student typed (spaces or dashes, any case); CodeError with the fix."""
    text = text.strip()
    if "@" not in text:
        raise CodeError(
            f"{text!r} has no host address: type the whole code shown on the teacher's screen, "
            f"with its @ part (it looks like {EXAMPLE})."
        )
    words, _, where = text.rpartition("@")
    words = normalise(words)
    parts = words.split("-")
    if len(parts) != 3 or not parts[0].isdigit() or len(parts[0]) > 3:
        raise CodeError(
            f"{words!r} is not a code: a code is a number and two words, like {EXAMPLE}."
        )
    for word in parts[1:]:
        if word not in WORDS:
            close = difflib.get_close_matches(word, WORDS, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise CodeError(
                f"{word!r} is not one of the code's words{hint}: check the code on the "
                "teacher's screen and type it again."
            )
    host, port = _split(where.strip())
    return JoinCode(words, host, port)


def _is_ipv6(text: str) -> bool:
    """'[1.2.3.4:80]' (a teacher's --address with its port) is no IPv6 address."""
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _split(where: str) -> tuple[str, int]:
    if where.startswith("["):
        host, _, rest = where.partition("]")
        host, port_text = host + "]", rest.removeprefix(":")
    else:
        host, _, port_text = where.partition(":")
    if not _HOST.fullmatch(host) or (host.startswith("[") and not _is_ipv6(host[1:-1])):
        raise CodeError(f"{host!r} after @ is not an address: it looks like {EXAMPLE}.")
    if not port_text:
        return host, RELAY_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise CodeError(f"{port_text!r} is not a port: the code ends like :7745.")
    return host, int(port_text)


# --- large letters: a 3x5 font (M, N, W and @ wider) drawn with half blocks -------------------
_FONT = {
    "a": ".#.|#.#|###|#.#|#.#",
    "b": "##.|#.#|##.|#.#|##.",
    "c": ".##|#..|#..|#..|.##",
    "d": "##.|#.#|#.#|#.#|##.",
    "e": "###|#..|##.|#..|###",
    "f": "###|#..|##.|#..|#..",
    "g": ".##|#..|#.#|#.#|.##",
    "h": "#.#|#.#|###|#.#|#.#",
    "i": "###|.#.|.#.|.#.|###",
    "j": "..#|..#|..#|#.#|.#.",
    "k": "#.#|#.#|##.|#.#|#.#",
    "l": "#..|#..|#..|#..|###",
    "m": "#...#|##.##|#.#.#|#...#|#...#",
    "n": "#..#|##.#|#.##|#..#|#..#",
    "o": ".#.|#.#|#.#|#.#|.#.",
    "p": "##.|#.#|##.|#..|#..",
    "q": ".#.|#.#|#.#|##.|.##",
    "r": "##.|#.#|##.|#.#|#.#",
    "s": ".##|#..|.#.|..#|##.",
    "t": "###|.#.|.#.|.#.|.#.",
    "u": "#.#|#.#|#.#|#.#|###",
    "v": "#.#|#.#|#.#|#.#|.#.",
    "w": "#...#|#...#|#.#.#|##.##|#...#",
    "x": "#.#|#.#|.#.|#.#|#.#",
    "y": "#.#|#.#|.#.|.#.|.#.",
    "z": "###|..#|.#.|#..|###",
    "0": "###|#.#|#.#|#.#|###",
    "1": ".#.|##.|.#.|.#.|###",
    "2": "##.|..#|.#.|#..|###",
    "3": "##.|..#|.#.|..#|##.",
    "4": "#.#|#.#|###|..#|..#",
    "5": "###|#..|##.|..#|##.",
    "6": ".##|#..|###|#.#|###",
    "7": "###|..#|.#.|.#.|.#.",
    "8": "###|#.#|###|#.#|###",
    "9": "###|#.#|###|..#|##.",
    "-": "...|...|###|...|...",
    ".": ".|.|.|.|#",
    ":": ".|#|.|#|.",
    "@": ".##.|#..#|#.##|#...|.###",
    "[": "##|#.|#.|#.|##",
    "]": "##|.#|.#|.#|##",
}
_HALF = {(True, True): "█", (True, False): "▀", (False, True): "▄", (False, False): " "}


def big_text(text: str) -> list[str]:
    """Three lines of half blocks spelling `text` (characters without a glyph are left out)."""
    glyphs = [_FONT[c].split("|") for c in text.lower() if c in _FONT]
    rows = [" ".join(g[r] for g in glyphs) for r in range(5)] + [""]
    width = max(len(r) for r in rows)
    rows = [r.ljust(width, ".").replace(" ", ".") for r in rows]
    return [
        "".join(_HALF[(rows[r][i] == "#", rows[r + 1][i] == "#")] for i in range(width))
        for r in (0, 2, 4)
    ]


def qr_lines(text: str, border: int = 2) -> list[str]:
    """`text` as a QR code in half blocks, dark modules drawn: show it dark on light
    (black on white) so phones read it. Two module rows per line."""
    import segno

    rows = [list(r) for r in segno.make(text, error="m").matrix_iter(scale=1, border=border)]
    if len(rows) % 2:
        rows.append([0] * len(rows[0]))
    return [
        "".join(_HALF[(bool(a), bool(b))] for a, b in zip(rows[i], rows[i + 1], strict=True))
        for i in range(0, len(rows), 2)
    ]
