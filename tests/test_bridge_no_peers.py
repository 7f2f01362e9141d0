"""The dashboard's "No peers yet" warning (tui/bridge.py) tells a node alone by design (--solo:
NullTransport) to set J to 0, and a networked one that found nobody to check its room and
network: decided by the transport's type, not by the words its status line happens to use."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sapo_edge.config.settings import Config
from sapo_edge.swarm.transport import InProcessHub, NullTransport
from sapo_edge.tui.bridge import NO_PEERS_AFTER_ROUNDS, NO_PEERS_TITLE, TuiCallback


class _Worded:
    """A networked transport whose status line happens to contain the word 'solo'."""

    def describe(self) -> str:
        return "LAN: 0 peers (console solo-mode off)"


@pytest.mark.parametrize(
    ("transport", "says"),
    [
        (NullTransport(), "Set J to 0"),
        (InProcessHub().connect("a"), "Nothing arrived in"),
        (_Worded(), "Nothing arrived in"),
    ],
)
def test_the_no_peers_remedy_follows_the_transport_not_its_words(transport, says) -> None:
    posted = []
    cb = TuiCallback(posted.append)
    node = SimpleNamespace(cfg=Config(external_samples=4), transport=transport)
    cb._maybe_warn_no_peers(node, NO_PEERS_AFTER_ROUNDS - 1)
    problems = [m for m in posted if getattr(m, "title", "") == NO_PEERS_TITLE]
    assert len(problems) == 1 and says in problems[0].remedy, posted
