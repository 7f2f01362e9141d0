"""host:port text as servers bind it (issue 46: '--listen [::]:7744' was bound as '[::]')."""

from __future__ import annotations

import pytest

from sapo_edge.data.addresses import bind_address
from sapo_edge.run.doctor import check_port


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("0.0.0.0:7744", ("0.0.0.0", 7744)),
        ("[::]:7744", ("::", 7744)),
        ("[::1]:0", ("::1", 0)),
        (":7744", ("0.0.0.0", 7744)),
        ("7744", ("0.0.0.0", 7744)),
        ("10.0.0.5:1", ("10.0.0.5", 1)),
    ],
)
def test_a_listen_address_is_bound_as_a_server_needs_it(text, want):
    assert bind_address(text) == want


@pytest.mark.parametrize("bad", ["10.0.0.5", "[::1]", "host:port"])
def test_an_address_without_a_port_says_how_to_write_one(bad):
    with pytest.raises(ValueError, match="HOST:PORT"):
        bind_address(bad)


def test_a_node_listens_on_ipv6_and_a_peer_reaches_it(nodes):
    """A node told --listen [::1]:0 binds IPv6 loopback (it failed to start: '[::1]' is no
    host to bind); a peer given its address in brackets links to it."""
    server = nodes(listen="[::1]:0")
    peer = nodes(listen="127.0.0.1:0", peers=[f"[::1]:{server.port}"])
    assert peer.wait_for(lambda: server.ident.node_id in peer.connected(), 10)


def test_doctor_checks_an_ipv6_port():
    assert check_port("[::1]:0").status == "ok"
