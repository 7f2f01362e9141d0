"""Identities and the wire protocol: key files, message parsing (every bad input has its reason,
fuzzed with Hypothesis), and the checks on signed, sealed rollout batches."""

from __future__ import annotations

import json
import os
import stat
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from swarm_util import batch_for, group

from sapo_edge.data.rollout import encode_batch
from sapo_edge.swarm.batches import RolloutVerifier, make_rollouts, seal
from sapo_edge.swarm.identity import (
    Identity,
    IdentityError,
    load_or_create,
    name_for_id,
    verify,
)
from sapo_edge.swarm.protocol import (
    PROTOCOL_VERSION,
    Auth,
    Bye,
    Hello,
    ProtocolError,
    Rollouts,
    check_fields,
    known_reason,
    make_auth,
    make_bye,
    make_hello,
    new_nonce,
    parse_message,
)
from sapo_edge.swarm.roomkey import new_room_key, room_keys

KEYS = room_keys("lab", new_room_key())
ROOM = KEYS.lan_id


# --- identity ---------------------------------------------------------------------------------


def test_identity_is_made_once_private_and_stable(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SAPO_EDGE_HOME", str(tmp_path))
    ident, created = load_or_create()
    path = tmp_path / "identity.key"
    assert created and path.is_file() and stat.S_IMODE(path.stat().st_mode) == 0o600
    again, created_again = load_or_create()
    assert not created_again and again.node_id == ident.node_id and again.name == ident.name
    assert len(ident.node_id) == 32 and ident.name == name_for_id(ident.node_id)
    os.chmod(path, 0o644)  # someone loosened it: the next load tightens it again
    load_or_create()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_damaged_identity_file_says_what_to_do(tmp_path) -> None:
    bad = tmp_path / "identity.key"
    bad.write_bytes(b"not a key")
    with pytest.raises(IdentityError, match="move it away"):
        load_or_create(bad)


# --- parsing ----------------------------------------------------------------------------------


def hello_dict(**over) -> dict:
    d = json.loads(make_hello(Identity.generate(), ROOM, new_nonce(), b"\x01" * 32))
    d.update(over)
    return d


def auth_dict(**over) -> dict:
    d = json.loads(make_auth(Identity.generate(), "initiator", b"t" * 32, model="m", backend="cpu"))
    d.update(over)
    return d


def reason_of(data: bytes | str) -> str:
    with pytest.raises(ProtocolError) as e:
        parse_message(data)
    return e.value.reason


def test_a_good_hello_and_bye_parse() -> None:
    h = parse_message(json.dumps(hello_dict()).encode())
    assert isinstance(h, Hello) and h.room == ROOM and h.ephemeral == b"\x01" * 32
    a = parse_message(json.dumps(auth_dict()).encode())
    assert isinstance(a, Auth) and a.model == "m" and a.backend == "cpu"
    b = parse_message(b'{"type":"bye","reason":"shutdown","message":"bye now"}')
    assert b == Bye("shutdown", "bye now")


BAD_MESSAGES = [
    (b"x" * ((1 << 20) + 1), "too_large"),
    (b"[" * 100 + b"]" * 100, "too_deep"),
    (b'{"type":"bye","reason":NaN,"message":""}', "non_finite"),
    (b'{"type":"bye","reason":Infinity,"message":""}', "non_finite"),
    (b'{"type":"bye","reason":1' + b"0" * 40 + b',"message":""}', "huge_int"),
    (b'{"type":"bye","type":"bye","reason":"a","message":""}', "duplicate_key"),
    (b'{"type":"bye","reason":"\\ud800","message":""}', "bad_unicode"),
    (b'{"type":"bye","reason":"\xff\xfe","message":""}', "bad_utf8"),
    (b'{"type":"bye","reason":5,"message":""}', "bad_type"),
    (b'{"type":"bye","reason":"a"}', "missing_field"),
    (b'{"type":"bye","reason":"a","message":"","extra":1}', "unknown_field"),
    (b'{"type":"gossip"}', "unknown_type"),
    (b"[1,2]", "bad_type"),
    (b"{nope", "bad_json"),
    (json.dumps({"type": "bye", "reason": "r" * 41, "message": ""}).encode(), "too_large"),
    (json.dumps(hello_dict(version=1)).encode(), "unknown_version"),
    (json.dumps(hello_dict(node_id="0" * 32)).encode(), "bad_identity"),
    (json.dumps(hello_dict(nonce="XYZ")).encode(), "bad_value"),
    (json.dumps(hello_dict(role="boss")).encode(), "bad_value"),
    (json.dumps(hello_dict(ephemeral="ab")).encode(), "bad_value"),
    (json.dumps(hello_dict(room="ab" * 8)).encode(), "bad_value"),  # the old 16-hex room
    (json.dumps(auth_dict(capabilities=[1])).encode(), "bad_type"),
    (json.dumps(auth_dict(name="evil\x1b[2J")).encode(), "bad_value"),
]


# ids by position: the hello/auth cases hold fresh random keys (pytest-xdist and mutmut need
# the same test names at every collection)
@pytest.mark.parametrize(
    "data, reason", BAD_MESSAGES, ids=[f"{i}-{r}" for i, (_, r) in enumerate(BAD_MESSAGES)]
)
def test_every_bad_message_is_refused_with_its_reason(data: bytes, reason: str) -> None:
    assert reason_of(data) == reason


_FUZZ_ID = Identity.generate()
_VALID = make_rollouts(_FUZZ_ID, KEYS, batch_for(_FUZZ_ID), 1)[0]


def _splice(at_and_bytes: tuple[int, bytes]) -> bytes:
    at, junk = at_and_bytes
    return _VALID[:at] + junk + _VALID[at + len(junk) :]


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.tuples(st.integers(0, len(_VALID) - 1), st.binary(min_size=1, max_size=3)).map(_splice),
        st.binary(max_size=300),
        st.text(max_size=300),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
            lambda c: (
                st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=12), c, max_size=6)
            ),
            max_leaves=30,
        ).map(lambda v: json.dumps(v, allow_nan=True)),
        st.fixed_dictionaries(
            {"type": st.sampled_from(["hello", "auth", "rollouts", "bye"])},
            optional={
                k: st.one_of(st.text(max_size=70), st.integers(), st.floats(), st.none())
                for k in (
                    "version",
                    "node_id",
                    "reason",
                    "message",
                    "body",
                    "signature",
                    "ephemeral",
                )
            },
        ).map(lambda v: json.dumps(v, allow_nan=True)),
    )
)
def test_the_parser_never_raises_anything_but_protocol_error(data) -> None:
    """Random bytes, random JSON, near-miss envelopes and valid signed batches with a few bytes
    overwritten: parse and verify only ever refuse with a reason."""
    try:
        msg = parse_message(data)
        if isinstance(msg, Rollouts):
            RolloutVerifier(KEYS).verify(msg, "fuzz")
    except ProtocolError as e:
        assert e.reason and isinstance(e.reason, str)


# --- signed batches ---------------------------------------------------------------------------


def signed(ident: Identity, keys=KEYS, **kw) -> Rollouts:
    r = kw.pop("round_", 1)
    msg, _ = make_rollouts(ident, keys, batch_for(ident, r), r, **kw)
    parsed = RolloutVerifier(keys).open(seal(keys, msg))  # sealed and opened as on the wire
    assert isinstance(parsed, Rollouts)
    return parsed


def verify_reason(v: RolloutVerifier, msg: Rollouts, route: str = "peer") -> str:
    with pytest.raises(ProtocolError) as e:
        v.verify(msg, route)
    return e.value.reason


def test_a_signed_batch_verifies_and_carries_the_exact_payload() -> None:
    ident = Identity.generate()
    v = RolloutVerifier(KEYS)
    batch = v.verify(signed(ident), "peer")
    assert batch is not None and batch.sender == ident.node_id and batch.groups == 2
    assert batch.payload == batch_for(ident)


def test_tampering_forging_and_foreign_rooms_are_refused() -> None:
    ident, other = Identity.generate(), Identity.generate()
    v = RolloutVerifier(KEYS)
    msg = signed(ident)
    tampered = Rollouts(msg.sender, msg.public_key, msg.body.replace("What", "Wh4t"), msg.signature)
    assert verify_reason(v, tampered) == "bad_signature"
    forged = Rollouts(msg.sender, other.public_key, msg.body, msg.signature)
    assert verify_reason(v, forged) == "bad_identity"  # the key is not the sender's
    # signed for another room (by a member of both): opened with that room's key, refused here
    elsewhere = room_keys("elsewhere", new_room_key())
    env, _ = make_rollouts(ident, elsewhere, batch_for(ident), 1)
    with pytest.raises(ProtocolError) as e:
        v.open(seal(elsewhere, env))  # sealed for another room: does not even open
    assert e.value.reason == "wrong_secret"
    assert verify_reason(v, parse_message(env)) == "wrong_room"
    # groups that name another producer, even correctly signed, are not the signer's to send
    payload = encode_batch([group(other.node_id)])
    msg2, _ = make_rollouts(ident, KEYS, payload, 1)
    assert verify_reason(v, parse_message(msg2)) == "wrong_producer"
    assert v.verify(signed(ident), "peer") is not None  # nothing above poisoned the verifier


def test_replays_expired_and_stale_batches_are_refused_but_a_second_route_is_a_duplicate() -> None:
    ident = Identity.generate()
    v = RolloutVerifier(KEYS, window_s=60, stale_rounds=3)
    msg = signed(ident)
    assert v.verify(msg, "lan") is not None
    assert v.verify(msg, "relay") is None  # the same batch by another route: dropped quietly
    assert verify_reason(v, msg, "lan") == "replay"
    assert verify_reason(v, signed(ident, sent_at=time.time() - 3600)) == "expired"
    assert v.verify(signed(ident, round_=20), "lan") is not None
    msg_old, _ = make_rollouts(ident, KEYS, batch_for(ident, 5), 5)
    assert verify_reason(v, parse_message(msg_old)) == "stale_round"


# --- what each side signs and sends about itself ----------------------------------------------


def test_auth_signs_the_role_and_transcript_under_the_v2_label_and_caps_each_field():
    ident = Identity.generate()
    t = bytes(range(32))
    msg = parse_message(
        make_auth(ident, "node", t, name="n" * 100, model="m" * 300, backend="b" * 100)
    )
    assert isinstance(msg, Auth)
    assert (msg.name, msg.model, msg.backend) == ("n" * 64, "m" * 200, "b" * 40)
    assert msg.capabilities == ("rollouts/2",)
    signed = b"sapo-edge/2 auth\x00node\x00" + t  # the wire format, spelled out here
    assert verify(ident.public_key, msg.signature, signed)
    assert not verify(ident.public_key, msg.signature, b"sapo-edge/2 auth\x00relay\x00" + t)
    plain = parse_message(make_auth(ident, "relay", t))
    assert (plain.name, plain.model, plain.backend) == (ident.name, "", "")


def test_a_bye_carries_only_known_reasons_and_a_capped_message():
    assert parse_message(make_bye("muted", "too many.")) == Bye("muted", "too many.")
    assert parse_message(make_bye("made-up", "x" * 600)) == Bye("other", "x" * 500)
    assert known_reason("replay") == "replay" and known_reason("\x1b[2J") == "other"


def test_field_checks_say_what_is_wrong_in_words():
    spec = {"a": ("str", 8), "b": ("int", 0)}
    for obj, reason, message in (
        ([1], "bad_type", "a thing must be a JSON object."),
        ({}, "missing_field", "thing lacks a, b."),
        ({"a": "x", "b": 1, "c": 2}, "unknown_field", "thing has unknown field(s) c."),
    ):
        with pytest.raises(ProtocolError) as e:
            check_fields(obj, spec, "thing")
        assert (e.value.reason, str(e.value)) == (reason, message)
    assert check_fields({"a": "x", "b": 1}, spec, "thing") == {"a": "x", "b": 1}


# --- each field kind at its edges, with the exact sentence (from `make mutate`'s survivors) ------


def field_error(obj, spec) -> tuple[str, str]:
    with pytest.raises(ProtocolError) as e:
        check_fields(obj, spec, "thing")
    return e.value.reason, str(e.value)


@pytest.mark.parametrize(
    "kind, cap, good, bad, expected",
    [
        ("str", 3, ["", "abc"], ["abcd"], ("too_large", "thing.f has 4 characters, over 3.")),
        ("str", 3, [], [3, None, b"ab", ["a"]], ("bad_type", "thing.f must be a string.")),
        (
            "hex",
            4,
            ["00ff", "a1b2"],
            ["00f", "00fff", "00FF", "00fg", " 0ff"],
            ("bad_value", "thing.f must be 4 lowercase hex characters."),
        ),
        ("hex", 4, [], [1234, None], ("bad_type", "thing.f must be a string.")),
        (
            "int",
            0,
            [0, 1, 2**63 - 1],
            [-1, 2**63],
            ("bad_value", "thing.f must be a non-negative integer."),
        ),
        ("int", 0, [], [True, False, 1.0, "1", None], ("bad_type", "thing.f must be an integer.")),
        (
            "float",
            0,
            [0, -2, 1.5, 2**70, -1e300],
            [float("inf"), float("-inf"), float("nan")],
            ("non_finite", "thing.f must be finite."),
        ),
        ("float", 0, [], [True, "1.5", None], ("bad_type", "thing.f must be a number.")),
        (
            "list",
            2,
            [[], ["a", "b"], ["x" * 40]],
            [["a", "b", "c"]],
            ("too_large", "thing.f has over 2 entries."),
        ),
        (
            "list",
            2,
            [],
            [["x" * 41], [1], "ab", None, [["a"]]],
            ("bad_type", "thing.f must be a list of short strings."),
        ),
    ],
)
def test_each_field_kind_accepts_its_edge_and_refuses_past_it(kind, cap, good, bad, expected):
    spec = {"f": (kind, cap)}
    for v in good:
        assert check_fields({"f": v}, spec, "thing") == {"f": v}
    for v in bad:
        assert field_error({"f": v}, spec) == expected, v


def test_every_field_is_checked_not_only_the_first():
    spec = {"a": ("str", 8), "b": ("int", 0), "c": ("hex", 2)}
    assert field_error({"a": "x", "b": 1, "c": "zz"}, spec)[0] == "bad_value"
    assert field_error({"a": "x", "b": -1, "c": "00"}, spec)[0] == "bad_value"


def test_unknown_fields_are_named_at_most_five_and_cut_to_40_characters():
    spec = {"a": ("str", 8)}
    obj = {"a": "x", **{f"k{i}": 1 for i in range(7)}}
    assert field_error(obj, spec) == (
        "unknown_field",
        "thing has unknown field(s) k0, k1, k2, k3, k4.",
    )
    long = "z" * 50
    assert field_error({"a": "x", long: 1}, spec) == (
        "unknown_field",
        f"thing has unknown field(s) {'z' * 40}.",
    )
    assert field_error({}, {"a": ("str", 8), "b": ("int", 0)}) == (
        "missing_field",
        "thing lacks a, b.",
    )
    assert field_error({"b": 1}, {"a": ("str", 8), "b": ("int", 0)}) == (
        "missing_field",
        "thing lacks a.",
    )


def parse_error(obj) -> tuple[str, str]:
    with pytest.raises(ProtocolError) as e:
        parse_message(json.dumps(obj).encode() if not isinstance(obj, bytes) else obj)
    return e.value.reason, str(e.value)


def test_message_level_refusals_say_what_to_do():
    assert parse_error(b"[]") == ("bad_type", "a message must be a JSON object.")
    for t in ({"type": "gossip"}, {"type": 5}, {"x": 1}):
        assert parse_error(t) == (
            "unknown_type",
            "message type must be one of hello, auth, rollouts, stats, bye, rekey.",
        )
    assert parse_error(hello_dict(version=PROTOCOL_VERSION + 1)) == (
        "unknown_version",
        f"peer speaks protocol version {PROTOCOL_VERSION + 1}; this node speaks "
        f"{PROTOCOL_VERSION}: upgrade one side.",
    )
    assert parse_error(hello_dict(role="boss")) == (
        "bad_value",
        "hello.role must be one of node, relay.",
    )
    assert parse_error(hello_dict(node_id="0" * 32)) == (
        "bad_identity",
        "hello.node_id is not the hash of its public key.",
    )
    for key in ("name", "model", "backend"):
        assert parse_error(auth_dict(**{key: "a\nb"})) == (
            "bad_value",
            f"auth.{key} holds control characters.",
        )


def test_a_message_over_the_given_limit_or_nested_past_8_is_refused():
    bye = b'{"type":"bye","reason":"shutdown","message":"' + b"m" * 100 + b'"}'
    assert isinstance(parse_message(bye, max_bytes=len(bye)), Bye)
    assert parse_error_at(bye, len(bye) - 1) == "too_large"
    deep8 = b'{"type":"bye","reason":"a","message":"","x":' + b"[" * 7 + b"]" * 7 + b"}"
    deep9 = b'{"type":"bye","reason":"a","message":"","x":' + b"[" * 8 + b"]" * 8 + b"}"
    assert parse_error_at(deep8, 1 << 20) == "unknown_field"  # depth 8 parses, then is checked
    assert parse_error_at(deep9, 1 << 20) == "too_deep"


def parse_error_at(data: bytes, max_bytes: int) -> str:
    with pytest.raises(ProtocolError) as e:
        parse_message(data, max_bytes=max_bytes)
    return e.value.reason


def test_every_field_of_a_hello_and_an_envelope_comes_through():
    ident = Identity.generate()
    nonce = new_nonce()
    assert len(nonce) == 32 and set(nonce) <= set("0123456789abcdef") and nonce != new_nonce()
    h = parse_message(make_hello(ident, ROOM, nonce, b"\x07" * 32, role="relay"))
    assert h == Hello(
        PROTOCOL_VERSION, "relay", ident.node_id, ident.public_key, ROOM, nonce, b"\x07" * 32
    )
    from sapo_edge.swarm.protocol import Stats

    sig = "ab" * 64
    for kind, cls in (("rollouts", Rollouts), ("stats", Stats)):
        env = {
            "type": kind,
            "sender": ident.node_id,
            "public_key": ident.public_key.hex(),
            "body": "{}",
            "signature": sig,
        }
        assert parse_message(json.dumps(env).encode()) == cls(
            ident.node_id, ident.public_key, "{}", bytes.fromhex(sig)
        )
    a = parse_message(json.dumps(auth_dict(name="n", capabilities=["x", "y"])).encode())
    assert a.name == "n" and a.capabilities == ("x", "y") and len(a.signature) == 64


def test_parse_errors_keep_the_json_sentence_and_name_the_message_kind():
    with pytest.raises(ProtocolError) as e:
        parse_message(b"[1,2,3]", max_bytes=5)
    assert (e.value.reason, str(e.value)) == (
        "too_large",
        "JSON input is 7 bytes, over the 5-byte limit; send less.",
    )
    assert parse_error(b'{"type":"bye","reason":5,"message":""}') == (
        "bad_type",
        "bye.reason must be a string.",
    )
    assert parse_error(hello_dict(nonce="x")) == (
        "bad_value",
        "hello.nonce must be 32 lowercase hex characters.",
    )
