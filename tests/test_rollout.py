"""Rollout groups on the wire: round trips, every bad payload refused with its reason, fuzzing."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sapo_edge.data.rollout import (
    DEFAULT_LIMITS,
    ROLLOUT_VERSION,
    Batch,
    Limits,
    RolloutError,
    RolloutGroup,
    decode_batch,
    encode_batch,
    groups_of,
)
from sapo_edge.data.tasks import TaskRef


def group(**over: Any) -> RolloutGroup:
    fields: dict[str, Any] = dict(
        task_ref=TaskRef.make(
            "basic_arithmetic", {"min_terms": 2, "ops": ["+", "-"]}, seed=7, index=3
        ),
        question="What is 2 + 3 - 1?",
        reference_answer="4",
        completions=("<answer>4</answer>", "<answer>5</answer>", "it is 4 ✓"),
        rewards=(1.0, 0.0, 0.5),
        producer="node-a",
        model="Qwen/Qwen2.5-0.5B-Instruct",
        round=12,
        created_at=1_700_000_000.25,
    )
    fields.update(over)
    return RolloutGroup(**fields)


def valid_dict() -> dict[str, Any]:
    return group().to_dict()


def batch(*dicts: Any, **top: Any) -> bytes:
    return json.dumps({"version": ROLLOUT_VERSION, "groups": list(dicts), **top}).encode()


def reason(d: Any, limits: Limits = DEFAULT_LIMITS) -> str:
    """Reason code from decoding one group dict both directly and as a batch (they must agree)."""
    with pytest.raises(RolloutError) as direct:
        RolloutGroup.from_dict(d, limits)
    with pytest.raises(RolloutError) as wire:
        decode_batch(batch(d), limits)
    assert direct.value.reason == wire.value.reason
    assert str(wire.value).startswith("group 0: ")
    return direct.value.reason


# --- round trips ------------------------------------------------------------------------------


def test_batch_round_trip_keeps_every_field():
    groups = [group(), group(producer="node-b", reference_answer=None, round=0, rewards=(1, 0, 0))]
    data = encode_batch(groups)
    assert isinstance(data, bytes)
    assert json.loads(data)["version"] == ROLLOUT_VERSION
    back = decode_batch(data)
    assert back == [
        group(),
        group(producer="node-b", reference_answer=None, round=0, rewards=(1.0, 0.0, 0.0)),
    ]
    assert decode_batch(data.decode()) == back
    assert decode_batch(encode_batch([])) == []


def test_to_dict_from_dict_round_trip():
    g = group()
    d = g.to_dict()
    assert d["version"] == ROLLOUT_VERSION
    assert RolloutGroup.from_dict(json.loads(json.dumps(d))) == g


def test_finished_flags_travel_with_the_group_and_default_to_unfinished():
    g = group(finished=(True, False, True))
    assert decode_batch(encode_batch([g]))[0].finished == (True, False, True)
    assert g.to_dict()["finished"] == [True, False, True]
    # a group built without flags claims nothing: no end token will be trained for it
    assert group().finished == (False, False, False)
    assert group(finished=(False, False, True)).group_id == g.group_id  # content, not flags


def test_an_old_version_batch_says_what_to_do():
    old = {k: v for k, v in valid_dict().items() if k != "finished"}
    with pytest.raises(RolloutError) as e:
        decode_batch(json.dumps({"version": 1, "groups": [{**old, "version": 1}]}).encode())
    assert e.value.reason == "old_version"
    assert "version 1" in str(e.value) and "upgrade sapo-edge on that node" in str(e.value)


def test_group_id_depends_on_task_and_completions_only():
    g = group()
    assert len(g.group_id) == 32 and int(g.group_id, 16) >= 0
    # the same content re-sent or relayed by someone else keeps its id
    assert (
        group(producer="relay", round=99, created_at=5.0, rewards=(0, 0, 0)).group_id == g.group_id
    )
    assert decode_batch(encode_batch([g]))[0].group_id == g.group_id
    assert group(completions=("a", "b", "c")).group_id != g.group_id
    assert (
        group(
            task_ref=TaskRef.make("basic_arithmetic", {"min_terms": 2, "ops": ["+", "-"]}, 7, 4)
        ).group_id
        != g.group_id
    )


def test_encode_takes_a_batch_exactly_at_its_caps_and_checks_groups_with_its_limits():
    one = len(encode_batch([group()]))
    assert decode_batch(encode_batch([group()], Limits(max_batch_bytes=one)))  # exactly at the cap
    two = Limits(max_groups_per_batch=2)
    assert len(decode_batch(encode_batch([group(), group(round=2)], two), two)) == 2
    with pytest.raises(RolloutError) as e:  # a peer with these limits would refuse the model id
        encode_batch([group()], Limits(max_id_chars=4))
    assert e.value.reason == "too_large"
    with pytest.raises(RolloutError, match="batch has 3 groups, over the limit of 2; split it"):
        encode_batch([group()] * 3, two)
    with pytest.raises(RolloutError, match=f"batch is {one} bytes, over the {one - 1}-byte limit"):
        encode_batch([group()], Limits(max_batch_bytes=one - 1))


def test_encode_refuses_what_peers_would_reject():
    with pytest.raises(RolloutError) as e:
        encode_batch([group(rewards=(float("nan"), 0.0, 1.0))])
    assert e.value.reason == "non_finite"
    with pytest.raises(RolloutError) as e:
        encode_batch([group()] * 3, Limits(max_groups_per_batch=2))
    assert e.value.reason == "too_large"
    with pytest.raises(RolloutError) as e:
        encode_batch([group()] * 10, Limits(max_batch_bytes=1000))
    assert e.value.reason == "too_large"


# --- every bad group, with its reason ---------------------------------------------------------


def with_(**over: Any) -> dict[str, Any]:
    return {**valid_dict(), **over}


def without(name: str) -> dict[str, Any]:
    d = valid_dict()
    del d[name]
    return d


BAD_GROUPS = [
    ("not an object", ["a list"], "bad_type"),
    ("future version", with_(version=3), "unknown_version"),
    ("old version", with_(version=1), "old_version"),
    ("string version", with_(version="2"), "unknown_version"),
    ("bool version", with_(version=True), "unknown_version"),
    ("no version", without("version"), "missing_field"),
    ("no completions", without("completions"), "missing_field"),
    ("no producer", without("producer"), "missing_field"),
    ("no finished flags", without("finished"), "missing_field"),
    ("finished not a list", with_(finished=True), "bad_type"),
    ("finished as numbers", with_(finished=[1, 0, 0]), "bad_type"),
    ("finished as strings", with_(finished=["true", "false", "true"]), "bad_type"),
    ("one finished flag short", with_(finished=[True, False]), "bad_shape"),
    ("extra field", with_(tokens=[1, 2, 3]), "unknown_field"),
    ("extra group_id", with_(group_id="f" * 32), "unknown_field"),
    ("question not str", with_(question=3), "bad_type"),
    ("answer not str", with_(reference_answer=4), "bad_type"),
    ("completion not str", with_(completions=["a", 1], rewards=[0, 1]), "bad_type"),
    ("completions not list", with_(completions="ab", rewards=[0, 1]), "bad_type"),
    ("reward is str", with_(rewards=[1, "0", 0]), "bad_type"),
    ("reward is bool", with_(rewards=[True, False, False]), "bad_type"),
    ("round is bool", with_(round=True), "bad_type"),
    ("round is float", with_(round=1.0), "bad_type"),
    ("created_at is str", with_(created_at="now"), "bad_type"),
    ("model is null", with_(model=None), "bad_type"),
    ("one completion", with_(completions=["a"], rewards=[1]), "bad_shape"),
    ("no completions", with_(completions=[], rewards=[]), "bad_shape"),
    ("rewards shorter", with_(rewards=[1, 0]), "bad_shape"),
    ("negative round", with_(round=-1), "bad_value"),
    ("empty producer", with_(producer=""), "bad_value"),
    ("empty model", with_(model=""), "bad_value"),
    ("task ref not object", with_(task_ref="basic_arithmetic"), "bad_task_ref"),
    (
        "task ref missing seed",
        with_(task_ref={"dataset": "x", "config": {}, "index": 0}),
        "bad_task_ref",
    ),
    (
        "task ref negative index",
        with_(task_ref={"dataset": "x", "config": {}, "seed": 0, "index": -1}),
        "bad_task_ref",
    ),
    (
        "task ref nested config",
        with_(task_ref={"dataset": "x", "config": {"a": {"b": 1}}, "seed": 0, "index": 0}),
        "bad_task_ref",
    ),
]


@pytest.mark.parametrize(
    "d, code", [(d, c) for _, d, c in BAD_GROUPS], ids=[n for n, _, _ in BAD_GROUPS]
)
def test_bad_group_is_rejected_with_its_reason(d, code):
    assert reason(d) == code


@pytest.mark.parametrize("rnd", [2**63, 10**30])
def test_a_round_past_63_bits_is_refused_in_a_dict_and_on_the_wire(rnd):
    with pytest.raises(RolloutError) as e:
        RolloutGroup.from_dict(with_(round=rnd))
    assert e.value.reason == "bad_value"
    with pytest.raises(RolloutError) as e:  # the strict JSON parser stops it before from_dict
        decode_batch(batch(with_(round=rnd)))
    assert e.value.reason == "huge_int"


def test_the_largest_round_and_a_one_character_model_are_accepted():
    g = RolloutGroup.from_dict(with_(round=2**63 - 1, model="m", producer="p"))
    assert (g.round, g.model, g.producer) == (2**63 - 1, "m", "p")


def test_non_finite_numbers_are_rejected():
    for text in ("NaN", "Infinity", "-Infinity", "1e400"):
        data = batch(valid_dict()).replace(b'"rewards": [1.0', b'"rewards": [' + text.encode())
        assert text.encode() in data
        with pytest.raises(RolloutError) as e:
            decode_batch(data)
        assert e.value.reason == "non_finite"
    for bad in (float("nan"), float("inf")):  # straight from Python, not via JSON
        with pytest.raises(RolloutError) as e:
            RolloutGroup.from_dict(with_(created_at=bad))
        assert e.value.reason == "non_finite"
    with pytest.raises(RolloutError) as e:
        RolloutGroup.from_dict(with_(rewards=[10**400, 0, 0]))
    assert e.value.reason == "non_finite"


def test_caps_reject_oversized_fields():
    small = Limits(
        max_completions=3,
        max_completion_chars=10,
        max_question_chars=20,
        max_answer_chars=2,
        max_id_chars=8,
    )
    assert reason(valid_dict(), small) == "too_large"  # model id is over 8 chars
    ok = {
        **valid_dict(),
        "model": "qwen",
        "producer": "a",
        "reference_answer": "4",
        "completions": ["4", "5", "6"],
        "task_ref": {"dataset": "ds", "config": {}, "seed": 0, "index": 0},
    }
    assert RolloutGroup.from_dict(ok, small).model == "qwen"
    for over in (
        {"completions": ["a"] * 4, "rewards": [0] * 4},
        {"completions": ["a", "b" * 11], "rewards": [0, 1]},
        {"question": "q" * 21},
        {"reference_answer": "123"},
        {"producer": "p" * 9},
        {"task_ref": {"dataset": "d" * 9, "config": {}, "seed": 0, "index": 0}},
    ):
        assert reason({**ok, **over}, small) == "too_large", over


def test_default_caps():
    assert reason(with_(completions=["x"] * 65, rewards=[0] * 65)) == "too_large"
    assert reason(with_(question="q" * 16_001)) == "too_large"
    assert reason(with_(reference_answer="a" * 2_001)) == "too_large"
    assert reason(with_(producer="n" * 129)) == "too_large"


# --- bad batches ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, code",
    [
        (b"\xff", "bad_utf8"),
        (b"{nope", "bad_json"),
        (b"[]", "bad_type"),
        (b'{"version": 2}', "missing_field"),
        (b'{"groups": []}', "missing_field"),
        (b'{"version": 3, "groups": []}', "unknown_version"),
        (b'{"version": 1, "groups": []}', "old_version"),
        (b'{"version": 0, "groups": []}', "unknown_version"),
        (b'{"version": 2, "groups": {}}', "bad_type"),
        (b'{"version": 2, "groups": [], "extra": 0}', "unknown_field"),
        (b'{"version": 2, "version": 2, "groups": []}', "duplicate_key"),
        (b'{"version": 2, "groups": [' + b"[" * 100_000, "too_deep"),
        (b'{"version": 2, "groups": [], "n": 1' + b"0" * 30 + b"}", "huge_int"),
        (b'{"version": 2, "groups": ["\\udc00"]}', "bad_unicode"),
    ],
)
def test_bad_batch_is_rejected_with_its_reason(data, code):
    with pytest.raises(RolloutError) as e:
        decode_batch(data)
    assert e.value.reason == code


def test_batch_caps():
    with pytest.raises(RolloutError) as e:
        decode_batch(batch(*[valid_dict()] * 3), Limits(max_groups_per_batch=2))
    assert e.value.reason == "too_large"
    with pytest.raises(RolloutError) as e:
        decode_batch(b" " * (DEFAULT_LIMITS.max_batch_bytes + 1))
    assert e.value.reason == "too_large"


def test_one_bad_group_says_which():
    with pytest.raises(RolloutError) as e:
        decode_batch(batch(valid_dict(), with_(round=-5)))
    assert e.value.reason == "bad_value"
    assert str(e.value).startswith("group 1: ")


# --- fuzzing: only RolloutError ever comes out ------------------------------------------------

# Under `make mutate` (mutmut sets MUTANT_UNDER_TEST) these run once per mutant of the validators:
# a tenth of the examples there, the full count in `make test`.
_SCALE = 10 if "MUTANT_UNDER_TEST" in os.environ else 1
FUZZ_BYTES = settings(max_examples=3000 // _SCALE, deadline=None, database=None)
FUZZ = settings(max_examples=600 // _SCALE, deadline=None, database=None)  # structures cost more

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.sampled_from(["\ud800", "basic_arithmetic", "", "self", "1"])
)
jsonish = st.recursive(
    scalars,
    lambda kids: (
        st.lists(kids, max_size=5) | st.dictionaries(st.text(max_size=8), kids, max_size=5)
    ),
    max_leaves=30,
)


def decode_or_reject(data: bytes | str) -> None:
    try:
        groups = decode_batch(data)
    except RolloutError as e:
        assert e.reason and str(e)
    else:
        assert all(isinstance(g, RolloutGroup) for g in groups)


@FUZZ_BYTES
@given(st.binary(max_size=400))
def test_fuzz_arbitrary_bytes(data):
    decode_or_reject(data)
    decode_or_reject(b'{"version":1,"groups":[' + data)


@FUZZ
@given(jsonish)
def test_fuzz_arbitrary_json_values(value):
    decode_or_reject(json.dumps(value))
    decode_or_reject(json.dumps({"version": 1, "groups": [value]}))


@FUZZ
@given(
    st.sampled_from(sorted(valid_dict())),
    jsonish,
    st.sampled_from(["replace", "delete", "add"]),
)
def test_fuzz_mutated_valid_groups(field, value, how):
    d = valid_dict()
    if how == "replace":
        d[field] = value
    elif how == "delete":
        del d[field]
    else:
        d["x_" + field] = value
    decode_or_reject(json.dumps({"version": 1, "groups": [d]}, ensure_ascii=False))
    try:  # the same dict handed over in-process, with Python values JSON cannot even carry
        RolloutGroup.from_dict(d)
    except RolloutError:
        pass


# --- exact sentences, the value descriptions and every default cap at its edge -----------------
# (from `make mutate`'s survivors: the reason codes were tested, the words a person reads not)

FIELDS = (
    "version, task_ref, question, reference_answer, completions, finished, rewards, producer, "
    "model, round, created_at"
)


def refusal(d: Any, limits: Limits = DEFAULT_LIMITS) -> tuple[str, str]:
    with pytest.raises(RolloutError) as e:
        RolloutGroup.from_dict(d, limits)
    return e.value.reason, str(e.value)


@pytest.mark.parametrize(
    "d, expected",
    [
        (None, ("bad_type", "a rollout group must be a JSON object, not null.")),
        ([], ("bad_type", "a rollout group must be a JSON object, not an array.")),
        (
            without("version"),
            ("missing_field", "rollout group lacks field version; send version 2."),
        ),
        (
            with_(version=7),
            (
                "unknown_version",
                "rollout group has version 7; this node speaks version 2, upgrade one side.",
            ),
        ),
        (
            with_(version=0),
            (
                "unknown_version",
                "rollout group has version 0; this node speaks version 2, upgrade one side.",
            ),
        ),
        (
            with_(version=True),
            (
                "unknown_version",
                "rollout group has version True; this node speaks version 2, upgrade one side.",
            ),
        ),
        (
            with_(version=2.0),
            (
                "unknown_version",
                "rollout group has version 2.0; this node speaks version 2, upgrade one side.",
            ),
        ),
        (
            with_(version=1),
            (
                "old_version",
                "rollout group has version 1, from an older sapo-edge that does not say which completions finished; this node speaks version 2: upgrade sapo-edge on that node.",
            ),
        ),
        (
            without("model"),
            ("missing_field", f"rollout group lacks field(s) model; send all of {FIELDS}."),
        ),
        (
            {"version": 2},
            (
                "missing_field",
                f"rollout group lacks field(s) {FIELDS.replace('version, ', '')}; send all of {FIELDS}.",
            ),
        ),
        (
            with_(**{"z" * 45: 1, "b": 2}),
            (
                "unknown_field",
                f"rollout group has unknown field(s) b, {'z' * 40}; send only {FIELDS}.",
            ),
        ),
        (
            with_(**{f"x{i}": 0 for i in range(7)}),
            (
                "unknown_field",
                f"rollout group has unknown field(s) x0, x1, x2, x3, x4; send only {FIELDS}.",
            ),
        ),
        (with_(question=3), ("bad_type", "question must be a string, not a number.")),
        (with_(question=None), ("bad_type", "question must be a string, not null.")),
        (
            with_(reference_answer=["4"]),
            ("bad_type", "reference_answer must be a string, not an array."),
        ),
        (
            with_(completions=["a", {}], rewards=[0, 1], finished=[True, True]),
            ("bad_type", "completions[1] must be a string, not an object."),
        ),
        (with_(completions="ab"), ("bad_type", "completions and rewards must be JSON arrays.")),
        (with_(rewards={}), ("bad_type", "completions and rewards must be JSON arrays.")),
        (
            with_(completions=["a"], rewards=[1], finished=[True]),
            (
                "bad_shape",
                "rollout group has 1 completion(s); a group needs at least 2 to compare.",
            ),
        ),
        (
            with_(rewards=[1, 0]),
            (
                "bad_shape",
                "rollout group has 3 completions but 2 rewards; send one reward per completion.",
            ),
        ),
        (
            with_(finished=[True]),
            (
                "bad_shape",
                "rollout group has 3 completions but 1 finished flags; send one per completion.",
            ),
        ),
        (
            with_(finished="yes"),
            ("bad_type", "finished must be a JSON array of true/false, one per completion."),
        ),
        (with_(rewards=[1, 0, "x"]), ("bad_type", "rewards[2] must be a number, not a string.")),
        (with_(rewards=[1, False, 0]), ("bad_type", "rewards[1] must be a number, not a boolean.")),
        (
            with_(rewards=[1, 0, 10**400]),
            ("non_finite", "rewards[2] is an integer of 1329 bits; it must be a finite number."),
        ),
        (
            with_(created_at=float("-inf")),
            ("non_finite", "created_at is -inf; it must be a finite number."),
        ),
        (
            with_(producer=""),
            ("bad_value", "rollout group has an empty producer; send a non-empty id."),
        ),
        (with_(model=""), ("bad_value", "rollout group has an empty model; send a non-empty id.")),
        (with_(model=5), ("bad_type", "model must be a string, not a number.")),
        (with_(round="1"), ("bad_type", "round must be an integer, not a string.")),
        (with_(round=False), ("bad_type", "round must be an integer, not a boolean.")),
        (with_(round=-3), ("bad_value", "round is -3; it must be a non-negative integer.")),
        (
            with_(round=2**63),
            ("bad_value", "round is an integer of 64 bits; it must be a non-negative integer."),
        ),
        (
            with_(round=-(10**18)),
            ("bad_value", "round is an integer of 60 bits; it must be a non-negative integer."),
        ),
        (
            with_(round=-(10**18) + 1),
            ("bad_value", f"round is {-(10**18) + 1}; it must be a non-negative integer."),
        ),
        (
            with_(question="q" * 16_001),
            ("too_large", "question has 16001 characters, over the limit of 16000."),
        ),
    ],
)
def test_each_refusal_says_what_is_wrong_in_its_own_words(d, expected):
    assert refusal(d) == expected


def test_a_bad_task_ref_says_why():
    r, msg = refusal(with_(task_ref="basic_arithmetic"))
    assert r == "bad_task_ref" and msg.startswith("rollout group has a bad task_ref: ")
    assert msg.endswith(".") and len(msg) > len("rollout group has a bad task_ref: .") + 5


def test_every_default_cap_at_its_edge():
    assert Limits() == DEFAULT_LIMITS
    assert (
        DEFAULT_LIMITS.max_completions,
        DEFAULT_LIMITS.max_completion_chars,
        DEFAULT_LIMITS.max_question_chars,
        DEFAULT_LIMITS.max_answer_chars,
        DEFAULT_LIMITS.max_id_chars,
        DEFAULT_LIMITS.max_groups_per_batch,
        DEFAULT_LIMITS.max_batch_bytes,
    ) == (64, 16_000, 16_000, 2_000, 128, 256, 1 << 20)
    at_caps = with_(
        completions=["c" * 16_000, "d"] + ["e"] * 62,
        rewards=[0.0] * 64,
        finished=[False] * 64,
        question="q" * 16_000,
        reference_answer="a" * 2_000,
        producer="p" * 128,
        model="m" * 128,
        task_ref={"dataset": "d" * 128, "config": {}, "seed": 0, "index": 0},
    )
    g = RolloutGroup.from_dict(at_caps)
    assert len(g.completions) == 64 and g.model == "m" * 128
    for over in (
        {"completions": ["c"] * 65, "rewards": [0] * 65, "finished": [False] * 65},
        {"completions": ["c" * 16_001, "d"], "rewards": [0, 0], "finished": [False] * 2},
        {"question": "q" * 16_001},
        {"reference_answer": "a" * 2_001},
        {"producer": "p" * 129},
        {"model": "m" * 129},
        {"task_ref": {"dataset": "d" * 129, "config": {}, "seed": 0, "index": 0}},
    ):
        assert refusal({**at_caps, **over})[0] == "too_large", list(over)


def test_batch_refusals_in_words_and_the_group_count_edge():
    def batch_refusal(data: bytes, limits: Limits = DEFAULT_LIMITS) -> tuple[str, str]:
        with pytest.raises(RolloutError) as e:
            decode_batch(data, limits)
        return e.value.reason, str(e.value)

    assert batch_refusal(b"[]") == (
        "bad_type",
        "a rollout batch must be a JSON object, not an array.",
    )
    assert batch_refusal(b'"x"') == (
        "bad_type",
        "a rollout batch must be a JSON object, not a string.",
    )
    assert batch_refusal(b"true") == (
        "bad_type",
        "a rollout batch must be a JSON object, not a boolean.",
    )
    assert batch_refusal(b"1.5") == (
        "bad_type",
        "a rollout batch must be a JSON object, not a number.",
    )
    assert batch_refusal(b'{"version": 2}') == (
        "missing_field",
        "rollout batch lacks field groups; send {version, groups}.",
    )
    assert batch_refusal(b'{"groups": []}') == (
        "missing_field",
        "rollout batch lacks field version; send version 2.",
    )
    assert batch_refusal(b'{"version": 2, "groups": [], "b": 0, "a": 1}') == (
        "unknown_field",
        "rollout batch has unknown field(s) a, b; send only version and groups.",
    )
    assert batch_refusal(b'{"version": 2, "groups": 5}') == (
        "bad_type",
        "rollout batch groups must be an array, not a number.",
    )
    three = batch(*[valid_dict()] * 3)
    assert len(decode_batch(three, Limits(max_groups_per_batch=3))) == 3
    assert batch_refusal(three, Limits(max_groups_per_batch=2)) == (
        "too_large",
        "batch has 3 groups, over the limit of 2.",
    )
    r, msg = batch_refusal(b"[1,", Limits())
    assert r == "bad_json" and msg.startswith("rollout batch rejected: input is not valid JSON (")
    r, msg = batch_refusal(b"[1]", Limits(max_batch_bytes=2))
    assert (r, msg) == (
        "too_large",
        "rollout batch rejected: JSON input is 3 bytes, over the 2-byte limit; send less.",
    )
    _, msg = batch_refusal(batch(valid_dict(), with_(round=-5)))
    assert msg == "group 1: round is -5; it must be a non-negative integer."


def test_encode_refuses_with_words_at_both_caps():
    g = group()
    with pytest.raises(RolloutError) as e:
        encode_batch([g] * 3, Limits(max_groups_per_batch=2))
    assert (e.value.reason, str(e.value)) == (
        "too_large",
        "batch has 3 groups, over the limit of 2; split it.",
    )
    assert len(encode_batch([g] * 2, Limits(max_groups_per_batch=2))) > 0
    size = len(encode_batch([g]))
    assert encode_batch([g], Limits(max_batch_bytes=size)) == encode_batch([g])
    with pytest.raises(RolloutError) as e:
        encode_batch([g], Limits(max_batch_bytes=size - 1))
    assert str(e.value) == f"batch is {size} bytes, over the {size - 1}-byte limit; split it."
    # the bytes are canonical UTF-8 JSON (raw Unicode, sorted keys, no spaces)
    data = encode_batch([g])
    assert "✓".encode() in data and b'{"groups":[{' in data and data.endswith(b',"version":2}')


def test_group_id_is_sha256_of_the_task_key_and_completions_in_compact_json():
    import hashlib

    g = group()
    key = (
        '{"config":{"min_terms":2,"ops":["+","-"]},"dataset":"basic_arithmetic","index":3,"seed":7}'
    )
    assert g.task_ref.key == key
    escaped = key.replace('"', '\\"')
    payload = '["' + escaped + '",["<answer>4</answer>","<answer>5</answer>","it is 4 \\u2713"]]'
    assert g.group_id == hashlib.sha256(payload.encode()).hexdigest()[:32]


@pytest.mark.parametrize(
    "over, expected",
    [
        (
            {"task_ref": {"dataset": "d" * 129, "config": {}, "seed": 0, "index": 0}},
            "task_ref.dataset has 129 characters, over the limit of 128.",
        ),
        (
            {"reference_answer": "a" * 2_001},
            "reference_answer has 2001 characters, over the limit of 2000.",
        ),
        (
            {"completions": ["c"] * 65, "rewards": [0] * 65, "finished": [False] * 65},
            "rollout group has 65 completions, over the limit of 64.",
        ),
        (
            {"completions": ["c", "c" * 16_001], "rewards": [0, 0], "finished": [False] * 2},
            "completions[1] has 16001 characters, over the limit of 16000.",
        ),
        ({"producer": 5}, "producer must be a string, not a number."),
        ({"producer": "p" * 129}, "producer has 129 characters, over the limit of 128."),
        ({"model": "m" * 129}, "model has 129 characters, over the limit of 128."),
        (
            {"question": b"bytes"},
            "question must be a string, not bytes.",
        ),  # a Python caller's value
        (
            {"version": "2"},
            "rollout group has version a string; this node speaks version 2, upgrade one side.",
        ),
        (
            {"version": [2]},
            "rollout group has version an array; this node speaks version 2, upgrade one side.",
        ),
    ],
)
def test_each_field_names_itself_in_its_refusal(over, expected):
    assert refusal(with_(**over))[1] == expected


def test_a_batch_names_at_most_five_unknown_fields_cut_to_40_characters():
    extra = {f"{c}" * 45: 0 for c in "abcdefg"}
    with pytest.raises(RolloutError) as e:
        decode_batch(json.dumps({"version": 2, "groups": [], **extra}).encode())
    names = ", ".join(c * 40 for c in "abcde")
    assert (
        str(e.value) == f"rollout batch has unknown field(s) {names}; send only version and groups."
    )


# --- a Batch: decoded once on its way (tests/test_decoded_once.py follows one over the network)


def test_encode_batch_carries_exactly_the_groups_its_bytes_decode_to() -> None:
    sent = [group(round=i, rewards=(0.1 + i / 3, 1 / 7, 0.0), producer="p" * 32) for i in range(4)]
    batch = encode_batch(sent)
    assert isinstance(batch, Batch) and list(batch.groups) == decode_batch(bytes(batch))
    assert groups_of(batch) == decode_batch(bytes(batch))
    assert groups_of(batch) is not groups_of(batch)  # a fresh list each time
    assert type(bytes(batch)) is bytes and bytes(batch) == batch  # the wire holds the bytes only


def test_a_batch_from_the_verifier_is_read_not_parsed_again() -> None:
    wire = bytes(encode_batch([group()]))
    decoded = [group(question="not what the bytes say")]
    assert groups_of(Batch(wire, decoded)) == decoded  # its groups, as the verifier left them
    assert groups_of(wire) == [group()]  # plain bytes (the simulator's hub) are decoded


def test_plain_bytes_are_decoded_with_the_limits_given_and_refused_with_a_reason() -> None:
    wire = bytes(encode_batch([group(), group(round=13)]))
    with pytest.raises(RolloutError) as e:
        groups_of(wire, Limits(max_groups_per_batch=1))
    assert e.value.reason == "too_large"
    with pytest.raises(RolloutError) as e:
        groups_of(b"{not json")
    assert e.value.reason


def test_encode_refuses_what_only_the_peers_parser_refuses() -> None:
    """A round of 10**18 passes a group's own checks (under 2**63) but not the wire parser's
    digit cap: encode_batch runs the peers' parser, so it is never published to be refused
    (and charged to this node) by every peer."""
    RolloutGroup.from_dict(group(round=10**18).to_dict())  # a group's own checks pass it
    with pytest.raises(RolloutError) as e:
        encode_batch([group(round=10**18)])
    assert e.value.reason == "huge_int"


def test_a_batch_copies_and_pickles_with_its_groups() -> None:
    import copy
    import pickle

    batch = encode_batch([group()])
    for again in (copy.copy(batch), copy.deepcopy(batch), pickle.loads(pickle.dumps(batch))):
        assert again == batch and again.groups == batch.groups


def test_a_batch_costs_what_it_holds_not_its_wire_size() -> None:
    """Decoded, many short completions take several times their bytes on the wire: the
    footprint (what the network's inbox counts) covers the groups' objects too."""
    many = [group(completions=("x",) * 64, rewards=(0.5,) * 64, round=i) for i in range(64)]
    batch = encode_batch(many)
    assert batch.footprint > 3 * len(batch)
    assert batch.footprint == batch.footprint  # counted once, the same each time
