"""Strict JSON parsing: every kind of hostile input is refused with its reason code."""

import json

import pytest

from sapo_edge.data.safejson import JsonError, dumps_canonical, loads_strict


def reason(data, **kw) -> str:
    with pytest.raises(JsonError) as e:
        loads_strict(data, **kw)
    assert isinstance(e.value, ValueError)
    assert str(e.value)  # a message a person can read
    return e.value.reason


def test_valid_json_round_trips_from_bytes_and_str():
    obj = {"a": [1, -2, 3.5, None, True, "é ✓ 😀"], "b": {"c": ""}, "n": 10**17}
    text = dumps_canonical(obj)
    assert loads_strict(text) == obj
    assert loads_strict(text.encode("utf-8")) == obj
    assert loads_strict('"\\ud83d\\ude00"') == "😀"  # a valid surrogate pair is one character


def test_dumps_canonical_is_sorted_compact_and_unicode():
    assert dumps_canonical({"b": 1, "a": [1, 2], "c": "é"}) == '{"a":[1,2],"b":1,"c":"é"}'
    with pytest.raises(ValueError):
        dumps_canonical({"x": float("nan")})


def test_too_large():
    assert reason(b"[" + b"1," * 100 + b"1]", max_bytes=50) == "too_large"
    assert reason('"' + "é" * 30 + '"', max_bytes=50) == "too_large"  # counted in UTF-8 bytes
    assert loads_strict('"' + "é" * 20 + '"', max_bytes=50) == "é" * 20


def test_bad_utf8():
    assert reason(b'"\xff\xfe"') == "bad_utf8"
    assert reason(b'"\xed\xa0\x80"') == "bad_utf8"  # an encoded surrogate is not UTF-8


@pytest.mark.parametrize("text", ['"\\ud800"', '{"\\udfff": 1}', '["ok", "a\\ud83d"]'])
def test_lone_surrogate_escapes(text):
    assert reason(text) == "bad_unicode"


def test_lone_surrogate_in_str_input():
    assert reason('"\ud800"') == "bad_unicode"


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", '{"x": -Infinity}', "1e400", "[-1E999]"])
def test_non_finite(text):
    assert reason(text) == "non_finite"


def test_huge_int():
    assert loads_strict("-" + "9" * 18) == -(10**18 - 1)
    assert reason("1" + "0" * 18) == "huge_int"
    assert reason("[" + "7" * 5000 + "]") == "huge_int"
    assert reason("12345", max_int_digits=4) == "huge_int"


def test_duplicate_key():
    assert reason('{"a": 1, "a": 1}') == "duplicate_key"
    assert reason('[{"x": {"k": 1, "k": 2}}]') == "duplicate_key"


def test_depth_limit():
    assert loads_strict("[" * 16 + "]" * 16) is not None
    assert reason("[" * 17 + "]" * 17) == "too_deep"
    assert reason('{"a":' * 17 + "1" + "}" * 17) == "too_deep"
    # brackets inside strings (even after escaped quotes) do not count
    assert loads_strict(json.dumps(["[[[[{{{{" * 10, '\\"[[[[[[[[[[[[[[[[[[[[['])) is not None


def test_100k_deep_nesting_is_rejected_without_a_recursion_error():
    assert reason("[" * 100_000) == "too_deep"
    assert reason(b"{" + b'"a":[' * 50_000) == "too_deep"
    assert reason("[" * 100_000, max_depth=10**6) == "too_deep"  # past the pre-scan: still typed


@pytest.mark.parametrize(
    "text", ["", "{", "[1,]", "{'a': 1}", "01", '"tab\there"', "[1] x", "\ufeff[]"]
)
def test_bad_json(text):
    assert reason(text) == "bad_json"


def test_non_text_input_is_refused():
    assert reason(12) == "bad_type"


# --- limits at their edges, exact messages, and the depth pre-scan against a reference ----------
# (written from the mutants that survived `make mutate`; docs/testing.md)

import re  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from sapo_edge.data.safejson import _max_depth_exceeded  # noqa: E402


def message(data, **kw) -> tuple[str, str]:
    with pytest.raises(JsonError) as e:
        loads_strict(data, **kw)
    return e.value.reason, str(e.value)


def test_default_size_limit_is_one_mebibyte_counted_in_utf8_bytes_at_its_edge():
    mib = 1 << 20
    fits = '"' + "a" * (mib - 2) + '"'  # exactly 1 MiB
    assert loads_strict(fits) == "a" * (mib - 2)
    assert loads_strict(fits.encode()) == "a" * (mib - 2)
    over = '"' + "a" * (mib - 1) + '"'
    assert reason(over) == reason(over.encode()) == "too_large"


def test_size_limit_edges_for_bytes_str_and_multibyte_str():
    assert loads_strict(b"[1,2]", max_bytes=5) == [1, 2]
    assert loads_strict("[1,2]", max_bytes=5) == [1, 2]
    assert reason(b"[1,22]", max_bytes=5) == reason("[1,22]", max_bytes=5) == "too_large"
    # 5 characters, 6 UTF-8 bytes: refused by its byte count, not its length
    assert loads_strict('"ééé"', max_bytes=8) == "ééé"  # 8 bytes
    assert reason('"éééé"', max_bytes=9) == "too_large"  # 6 chars, 10 bytes


def test_bytearray_and_memoryview_are_bytes():
    assert loads_strict(bytearray(b'{"a":1}')) == {"a": 1}
    assert loads_strict(memoryview(b'{"a":1}')) == {"a": 1}
    assert reason(bytearray(b"[1,2,3]"), max_bytes=3) == "too_large"
    assert reason(memoryview(b'"\xff"')) == "bad_utf8"


@pytest.mark.parametrize(
    "data, kw, expected",
    [
        (
            b"[1,2,3]",
            {"max_bytes": 5},
            ("too_large", "JSON input is 7 bytes, over the 5-byte limit; send less."),
        ),
        (
            "[1,2,3]",
            {"max_bytes": 5},
            ("too_large", "JSON input is over the 5-byte limit; send less."),
        ),
        (
            '"ééé"',
            {"max_bytes": 6},
            ("too_large", "JSON input is 8 bytes, over the 6-byte limit; send less."),
        ),
        (
            b'"ab\xff"',
            {},
            ("bad_utf8", "JSON input is not valid UTF-8 (byte 3); encode text as UTF-8."),
        ),
        (
            '"\ud800"',
            {},
            ("bad_unicode", "JSON text holds a lone surrogate character; send valid Unicode text."),
        ),
        (
            '"\\ud800"',
            {},
            (
                "bad_unicode",
                "JSON strings must not hold lone surrogates like \\ud800; send valid Unicode text.",
            ),
        ),
        (3.5, {}, ("bad_type", "JSON input must be bytes or str, not float.")),
        (
            "[[[]]]",
            {"max_depth": 2},
            ("too_deep", "JSON nests arrays/objects deeper than 2 levels; flatten it."),
        ),
        (
            "-12345",
            {"max_int_digits": 4},
            ("huge_int", "JSON integer has 5 digits, over the 4-digit limit."),
        ),
        (
            "1e999",
            {},
            ("non_finite", "JSON number 1e999 overflows to infinity; send a finite number."),
        ),
        (
            "[" + "1" * 45 + "e999]",
            {},
            ("non_finite", f"JSON number {'1' * 40} overflows to infinity; send a finite number."),
        ),
        ("[-Infinity]", {}, ("non_finite", "JSON does not allow -Infinity; send a finite number.")),
        (
            '{"ab":1,"ab":2}',
            {},
            ("duplicate_key", "JSON object repeats the key 'ab'; send each key once."),
        ),
        (
            '{"' + "k" * 70 + '":1,"' + "k" * 70 + '":2}',
            {},
            ("duplicate_key", f"JSON object repeats the key {'k' * 60!r}; send each key once."),
        ),
    ],
)
def test_each_refusal_has_its_reason_and_exact_sentence(data, kw, expected):
    assert message(data, **kw) == expected


def test_bad_json_message_names_the_parser_error():
    r, msg = message("[1,]")
    assert r == "bad_json"
    assert re.fullmatch(r"input is not valid JSON \(.+line 1 column 4 \(char 3\)\)\.", msg), msg


def test_recursion_past_the_prescan_is_typed_even_at_a_low_recursion_limit():
    import sys

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(200)
    try:
        assert message("[" * 300 + "]" * 300, max_depth=10**6) == (
            "too_deep",
            "JSON nests too deeply to parse; flatten it.",
        )
    finally:
        sys.setrecursionlimit(old)


def test_surrogates_are_found_in_keys_values_and_nested_lists():
    assert reason('{"a":{"\\udc00":1}}') == "bad_unicode"
    assert reason('{"a":["x",["\\ud800"]]}') == "bad_unicode"
    assert reason('[{"ok":"\\udbff"}]') == "bad_unicode"
    assert loads_strict('{"a":[{"b":"\\ud83d\\ude00"}]}') == {"a": [{"b": "😀"}]}


def depth_of(value) -> int:
    """Reference: nesting depth of a parsed value, by recursion over the value itself."""
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    return 0


# strings full of the characters the pre-scan looks at: brackets, quotes, backslashes
_tricky = st.text(alphabet='[]{}"\\a', max_size=6)
_values = st.recursive(
    st.none() | st.integers(-5, 5) | _tricky,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(_tricky, kids, max_size=3),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(_values, st.integers(0, 6), st.booleans())
def test_depth_prescan_agrees_with_the_depth_of_the_parsed_value(value, limit, spaced):
    text = json.dumps(value, separators=(", ", ": ") if spaced else (",", ":"))
    too_deep = depth_of(value) > limit
    assert _max_depth_exceeded(text, limit) is too_deep
    if too_deep:
        assert reason(text, max_depth=limit) == "too_deep"
    else:
        assert loads_strict(text, max_depth=limit) == value


@pytest.mark.parametrize(
    "text, depth",
    [
        ('["\\\\", [[]]]', 3),  # an escaped backslash ends its escape: the quote after it closes
        ('["\\\\\\"[", []]', 2),  # backslash, escaped quote, bracket inside the string
        ('[["]"], {"}": []}]', 3),
        ("[[], [], [[]]]", 3),
        ('{"a": [], "b": {"c": [1]}}', 3),
        ("[[[], [[]]]]", 4),  # depth goes back down one level per closer, not to 1
    ],
)
def test_depth_prescan_on_hand_counted_texts(text, depth):
    assert depth_of(json.loads(text)) == depth  # the hand count, checked
    assert _max_depth_exceeded(text, depth) is False
    assert _max_depth_exceeded(text, depth - 1) is True


def test_depth_prescan_on_text_that_is_not_json():
    """The scan runs before the parser, so it sees any text: a string that closes right after
    it opens (`""`) leaves what follows outside it."""
    assert _max_depth_exceeded('""[[[', 2) is True
    assert _max_depth_exceeded('"[[["', 2) is False
    assert reason('""[[[', max_depth=2) == "too_deep"


def depth_exceeded_by_hand(text: str, limit: int) -> bool:
    """Reference for any text: one character at a time; in a string a backslash takes the next
    character with it, and a string that never closes runs to the end."""
    depth, in_string, i = 0, False, 0
    while i < len(text):
        ch = text[i]
        if in_string:
            if ch == "\\":
                i += 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return True
        elif ch in "]}":
            depth -= 1
        i += 1
    return False


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet='[]{}"\\a\n', max_size=40), st.integers(0, 5))
def test_depth_prescan_agrees_with_a_character_scan_on_any_text(text, limit):
    assert _max_depth_exceeded(text, limit) is depth_exceeded_by_hand(text, limit)


@pytest.mark.parametrize(
    "hostile, deep",
    [
        ('"\\"' * 300_000, False),  # quote, backslash, quote: the last string stays open
        ('"' * 900_001, False),  # empty strings, then one that never closes
        ("\\" * 900_000 + '"', False),  # backslashes outside a string, then an open one
        ('"' + "\\" * 900_001, False),  # backslashes inside one that never closes
        ('"' + "\\" * 900_000 + '"', True),  # ... and closes after the last escaped backslash
        ('"' + "\\a" * 450_000, False),  # escapes in one string that never closes
    ],
    ids=[
        "escaped-quotes",
        "quotes",
        "backslashes-outside",
        "backslashes-inside",
        "closed",
        "escapes",
    ],
)
def test_depth_prescan_stays_linear_on_a_megabyte_of_quotes_and_backslashes(hostile, deep):
    """The brackets come after the megabyte, so the whole of it is scanned, in linear time and
    in memory of the order of the text (a backtracking regex kept ~60 MB of state, 65x the
    text, on the last case: see _STRING)."""
    import time
    import tracemalloc

    text = hostile + "[" * 20
    t0 = time.process_time()
    tracemalloc.start()
    try:
        assert _max_depth_exceeded(text, 16) is deep
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.process_time() - t0 < 5  # quadratic would take hours; linear takes ~0.1 s
    assert peak < 8 * len(text), peak  # re.sub's pieces: up to ~6x the text (many matches)
    assert depth_exceeded_by_hand(text, 16) is deep
