"""Strict JSON for anything that crosses a boundary (peers, files): bounded size, depth and
numbers, no NaN, no duplicate keys, no lone surrogates. Errors are typed and carry a reason code.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any


class JsonError(ValueError):
    """Input that is not strict, bounded JSON; `reason` is a short code such as "too_deep"."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


# The depth pre-scan: a JSON string (from its quote to the next unescaped quote, or to the end
# of the text when it never closes) holds no structure, so strings go first; then the brackets.
# Possessive quantifiers (*+): nothing to backtrack into, so no backtracking state either (with
# plain * a megabyte string of escapes held ~60 MB of it while it was matched).
_STRING = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"?', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _max_depth_exceeded(text: str, max_depth: int) -> bool:
    """Linear scan: True when arrays/objects nest deeper than max_depth (strings are skipped).
    Both passes run in the regex engine: a batch of rollouts is mostly strings, and a node on
    a busy room checks every message it opens."""
    if text.count("[") + text.count("{") <= max_depth:
        return False  # cannot nest deeper than the number of openers
    depth = 0
    for ch in _NOT_BRACKET.sub("", _STRING.sub("", text)):
        if ch in "[{":
            depth += 1
            if depth > max_depth:
                return True
        else:
            depth -= 1
    return False


def _check_strings(value: Any) -> None:
    """Reject lone surrogates (e.g. "\\ud800") anywhere in keys or string values."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if _SURROGATE.search(v):
                raise JsonError(
                    "bad_unicode",
                    "JSON strings must not hold lone surrogates like \\ud800; send valid Unicode text.",
                )
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


def loads_strict(
    data: bytes | str,
    *,
    max_bytes: int = 1 << 20,
    max_depth: int = 16,
    max_int_digits: int = 18,
) -> Any:
    """Parse `data` as strict JSON or raise JsonError with a reason code and one clear sentence."""
    if isinstance(data, bytes | bytearray | memoryview):
        raw = bytes(data)
        if len(raw) > max_bytes:
            raise JsonError(
                "too_large",
                f"JSON input is {len(raw)} bytes, over the {max_bytes}-byte limit; send less.",
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise JsonError(
                "bad_utf8", f"JSON input is not valid UTF-8 (byte {e.start}); encode text as UTF-8."
            ) from None
    elif isinstance(data, str):
        if len(data) > max_bytes:  # a char is at least one UTF-8 byte
            raise JsonError(
                "too_large", f"JSON input is over the {max_bytes}-byte limit; send less."
            )
        try:
            size = len(data.encode("utf-8"))
        except UnicodeEncodeError:
            raise JsonError(
                "bad_unicode",
                "JSON text holds a lone surrogate character; send valid Unicode text.",
            ) from None
        if size > max_bytes:
            raise JsonError(
                "too_large",
                f"JSON input is {size} bytes, over the {max_bytes}-byte limit; send less.",
            )
        text = data
    else:
        raise JsonError("bad_type", f"JSON input must be bytes or str, not {type(data).__name__}.")

    if _max_depth_exceeded(text, max_depth):
        raise JsonError(
            "too_deep", f"JSON nests arrays/objects deeper than {max_depth} levels; flatten it."
        )

    def parse_int(s: str) -> int:
        if len(s.lstrip("-")) > max_int_digits:
            raise JsonError(
                "huge_int",
                f"JSON integer has {len(s.lstrip('-'))} digits, over the {max_int_digits}-digit limit.",
            )
        return int(s)

    def parse_float(s: str) -> float:
        x = float(s)
        if not math.isfinite(x):
            raise JsonError(
                "non_finite", f"JSON number {s[:40]} overflows to infinity; send a finite number."
            )
        return x

    def parse_constant(s: str) -> Any:
        raise JsonError("non_finite", f"JSON does not allow {s}; send a finite number.")

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in items:
            if k in out:
                raise JsonError(
                    "duplicate_key", f"JSON object repeats the key {k[:60]!r}; send each key once."
                )
            out[k] = v
        return out

    try:
        value = json.loads(
            text,
            object_pairs_hook=pairs,
            parse_int=parse_int,
            parse_float=parse_float,
            parse_constant=parse_constant,
        )
    except JsonError:
        raise
    except RecursionError:  # the pre-scan should make this unreachable; keep the error typed anyway
        raise JsonError("too_deep", "JSON nests too deeply to parse; flatten it.") from None
    except ValueError as e:
        raise JsonError("bad_json", f"input is not valid JSON ({e}).") from None
    _check_strings(value)
    return value


def dumps_canonical(obj: Any) -> str:
    """One canonical text per value: sorted keys, no spaces, raw Unicode, NaN refused."""
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
