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

from sapo_edge.rollout import encode_batch
from sapo_edge.swarm.batches import RolloutVerifier, make_rollouts, seal
from sapo_edge.swarm.identity import (
    Identity,
    IdentityError,
    load_or_create,
    name_for_id,
    verify,
)
from sapo_edge.swarm.protocol import (
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
