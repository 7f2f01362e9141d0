"""Strict JSON parsing: every kind of hostile input is refused with its reason code."""

import json

import pytest

from sapo_edge.safejson import JsonError, dumps_canonical, loads_strict


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
