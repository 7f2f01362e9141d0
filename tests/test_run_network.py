"""run/network.py: run, join and host build their node's NetworkTransport in one place (issue
46): the settings give the room, listen address, peers, relay and mDNS; a class replaces what it
decides; the room's secret is read only when none is given (a class's never asks for one)."""

from __future__ import annotations

import pytest

from sapo_edge.config.settings import Config
from sapo_edge.run import network
from sapo_edge.swarm.identity import Identity
from sapo_edge.swarm.network import NetworkTransport
from sapo_edge.swarm.roomkey import room_keys


def test_the_settings_give_the_transport_its_options(monkeypatch):
    monkeypatch.setattr("sapo_edge.swarm.roomkey.read_secret", lambda secret, path: "hunter2")
    cfg = Config(room="lab", listen="127.0.0.1:0", peer=["10.0.0.9:7744"], mdns=False)
    t = network.network_for(cfg, Identity.generate(), name="anna", log=lambda _m: None)
    assert type(t) is NetworkTransport and t._thread is None  # built, not started
    assert (t.name, t.listen, t.manual, t.relay_url) == (
        "anna",
        "127.0.0.1:0",
        ["10.0.0.9:7744"],
        "",
    )
    assert t.keys == room_keys("lab", "hunter2")


def test_a_class_replaces_what_it_decides_and_its_secret_is_never_read(monkeypatch):
    def no_reading(*_a):
        raise AssertionError("a class's secret comes from its admission, never the settings")

    monkeypatch.setattr("sapo_edge.swarm.roomkey.read_secret", no_reading)

    class Host(NetworkTransport):
        pass

    cfg = Config(room="lab", listen="127.0.0.1:0", mdns=False)
    t = network.network_for(
        cfg,
        Identity.generate(),
        name="teacher",
        log=lambda _m: None,
        kind=Host,
        room="class",
        secret="k" * 32,
        peers=[],
        relay="ws://127.0.0.1:7745",
    )
    assert type(t) is Host and t.relay_url == "ws://127.0.0.1:7745" and t.manual == []
    assert t.keys == room_keys("class", "k" * 32)
    with pytest.raises(TypeError):  # a misspelt option is an error, not silently dropped
        network.network_for(cfg, Identity.generate(), name="x", log=print, secret="s", relya="")
