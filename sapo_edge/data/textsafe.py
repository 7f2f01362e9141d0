"""Text from peers and models made safe for a terminal: control and format characters (Unicode
Cc, Cf: ESC, OSC/CSI introducers, bidi overrides, zero-width joiners), lone surrogates and line
separators removed or flattened. Pure string functions; the dashboard wraps the result in
`rich.text.Text`, so markup such as `[/]` stays literal text.
"""

from __future__ import annotations

import unicodedata

_SPACES = {"\t", "\n", "\r", "\x0b", "\x0c", "\u2028", "\u2029", "\x85"}


def clean(text: object, limit: int | None = None, *, keep_newlines: bool = False) -> str:
    """`text` without Cc/Cf/Cs characters; tabs and line breaks become spaces (or stay as
    newlines with keep_newlines). Cut to `limit` characters (with an ellipsis) when given."""
    s = text if isinstance(text, str) else str(text)
    out = []
    for ch in s:
        if ch in _SPACES:
            out.append("\n" if keep_newlines and ch in "\n\u2028\u2029\x85" else " ")
        elif ch.isprintable() or unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            out.append(ch)
    result = "".join(out)
    if limit is not None and len(result) > limit:
        result = result[: max(0, limit - 1)] + "…"
    return result


def is_clean(text: str) -> bool:
    """True when clean() would leave a one-line text unchanged."""
    return clean(text) == text


TAIL_KEPT = 6  # the longest last part of a name kept when it is cut ('#3f2a1b', '-6aea')


def short_name(name: str, width: int) -> str:
    """`name` in `width` characters keeping its distinguishing end: 'swift-badger-6aea' at 10 is
    'swift…6aea' (not 'swift-bad…', the same for 'swift-badger-f3ab'); a name whose last part
    after '-' or '#' is not short (an id's 4 to 6 characters, a word of up to 6) is cut with
    '…' ('mrs-bennet…', not 'm…chemistry')."""
    if len(name) <= width:
        return name
    cut = max(name.rfind("-"), name.rfind("#"))
    tail = name[cut + 1 :] if cut > 0 else ""
    if tail and len(tail) <= min(TAIL_KEPT, width - 2):
        return name[: width - len(tail) - 1] + "…" + tail
    return name[: max(0, width - 1)] + "…"
