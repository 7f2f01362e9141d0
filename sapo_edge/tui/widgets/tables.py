"""Per-domain reward (first rounds vs recent) and the peers table."""

from __future__ import annotations

import statistics

from rich.text import Text
from textual.widgets import DataTable

from ...data.textsafe import clean, short_name
from ...swarm.peers import PeerInfo

SPAN = 5  # rounds in "first" and "recent"


class DomainTable(DataTable):
    def __init__(self, **kw) -> None:
        super().__init__(cursor_type="none", zebra_stripes=True, **kw)
        self.history: dict[str, list[float]] = {}

    def on_mount(self) -> None:
        self.border_title = "reward per domain"
        self.add_columns("domain", f"first{SPAN}", f"last{SPAN}", "Δ")

    def add_round(self, by_domain: dict[str, float]) -> None:
        for d, r in by_domain.items():
            self.history.setdefault(d, []).append(r)
        self.clear()
        for d, rs in sorted(self.history.items()):
            first, recent = statistics.fmean(rs[:SPAN]), statistics.fmean(rs[-SPAN:])
            change = recent - first
            colour = "green" if change > 0 else "red" if change < 0 else "dim"
            self.add_row(
                _cut(d, 16), f"{first:.2f}", f"{recent:.2f}", Text(f"{change:+.2f}", style=colour)
            )


def ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    return f"{s}s ago" if s < 90 else f"{s // 60}m ago" if s < 5400 else f"{s // 3600}h ago"


class PeersTable(DataTable):
    def __init__(self, **kw) -> None:
        super().__init__(cursor_type="none", zebra_stripes=True, **kw)

    def on_mount(self) -> None:
        self.border_title = "peers"
        self.add_columns("peer", "model · backend", "conn", "seen", "rcv/acc/rej", "top rejection")

    def show(self, peers: list[PeerInfo], now: float, source: str) -> None:
        self.border_title = "peers" if source == "transport" else "peers (from groups received)"
        self.clear()
        for p in peers:
            model = (p.model or "?").split("/")[-1].removesuffix("-Instruct")
            self.add_row(
                Text(short_name(clean(p.name or p.node_id), 12)),  # 'swift-ba…6aea'
                _cut(f"{model} · {p.backend or '?'}", 26),
                _cut(p.connection, 12),
                ago(None if p.last_seen is None else now - p.last_seen),
                f"{p.received}/{p.accepted}/{p.rejected}",
                _cut(p.top_rejection or "-", 16),
            )
        if not peers:
            self.add_row("none yet", "", "", "", "", "")


def _cut(text: str, width: int) -> Text:
    """Peer-supplied text as one plain line (control characters gone, markup literal)."""
    return Text(clean(text, width))
