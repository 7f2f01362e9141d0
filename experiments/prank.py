"""The prank, measured (issue 57, item 3): a classmate whose right answers carry extra words.

In SAPO every node trains on the text of its classmates' rewarded answers, and the verifier
checks only the answer, so words a student writes beside a right answer are rewarded with it and
taught to every node that samples its groups. Here, on the aha task (experiments/aha.toml: node 0
sees the worked example, scoring is strict), node PRANKSTER writes PHRASE beside each of its
answers that its own verifier rewarded, in the completions it shares (its own training and the
rewards it sends are unchanged; the receivers' verifiers find the same answer). Split suffixes of
experiments/evidence.py choose the cell:

    4/4+prank                 the phrase right after the answer's closing tag; no defence (the
                              config's external_after_answer: aha.toml keeps "train")
    4/4+prank+trim            defence (a): external_after_answer = drop, a peer's text after its
                              answer is not trained (sapo_edge/rl/peer_text.py)
    4/4+prank+remove          defence (b): the teacher removes the prankster before round
                              REMOVE_AT: every classmate's pool drops its groups and refuses
                              them from then on (ExternalPool.refuse_producer, what a member does
                              on the host's word), and it runs no more rounds (in a class it
                              would go on alone, which its classmates never see)
    4/4+prank-before+trim     the phrase just before the opening tag instead, with defence (a):
                              what (a) cannot catch

Per node and round the watcher writes prank.jsonl beside metrics.jsonl: the share of the node's
own completions that contain the phrase (`phrase_share`), and the peer completions it trained
that did (`phrase_trained`); the prankster's completions that carried it (`pranked`). A resumed
cell writes its re-run rounds again; the last line of a round counts.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from sapo_edge.data.rollout import encode_batch, groups_of
from sapo_edge.events import Forward
from sapo_edge.rl.prompts import CLOSE, OPEN, answer_span
from sapo_edge.run.build import node_id_for

PHRASE = "Tom smells"  # a rude phrase with a classmate's name: nothing the task asks for
PRANKSTER = 3  # the node that pranks (an unhinted one: aha.toml hints node 0)
REMOVE_AT = 8  # defence (b): the teacher removes it before this round (0-based: 8 rounds ran)

PRANK, PRANK_BEFORE, TRIM, REMOVE = "+prank", "+prank-before", "+trim", "+remove"
SUFFIXES = (PRANK, PRANK_BEFORE, TRIM, REMOVE)  # stripped last to first (evidence.parse_split)
WHERE = {PRANK: "after", PRANK_BEFORE: "before"}


@dataclasses.dataclass(frozen=True)
class Prank:
    phrase: str = PHRASE
    node: int = PRANKSTER
    where: str = "after"  # right after the answer's closing tag | "before" its opening tag
    remove_at: int = 0  # 0: never removed; else removed before this round

    def __post_init__(self) -> None:
        if re.search(r"\d", self.phrase) or OPEN in self.phrase or CLOSE in self.phrase:
            raise ValueError("the phrase must hold no digit and no answer tag (it would score)")
        if self.where not in ("after", "before"):
            raise ValueError(f"where is {self.where!r}: after or before")

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "on": "the prankster's rewarded answers"}


def check_suffixes(split: str, suffixes: set[str]) -> None:
    """SystemExit with the fix for a prank split that cannot run."""
    if PRANK in suffixes and PRANK_BEFORE in suffixes:
        raise SystemExit(f"split {split!r}: one prank, {PRANK} or {PRANK_BEFORE}.")
    if REMOVE in suffixes and not suffixes & set(WHERE):
        raise SystemExit(f"split {split!r}: {REMOVE} removes the prankster; add {PRANK}.")
    if suffixes & set(WHERE) and "+alone" in suffixes:  # (alone.py's phases would drop it)
        raise SystemExit(f"split {split!r}: a prank runs shared to its end; leave out +alone.")


def for_split(suffixes: set[str]) -> Prank | None:
    """The cell's prank (None: no prank in it)."""
    where = next((WHERE[s] for s in WHERE if s in suffixes), None)
    if where is None:
        return None
    return Prank(where=where, remove_at=REMOVE_AT if REMOVE in suffixes else 0)


def pranked(text: str, phrase: str, where: str, lenient: bool = False) -> str:
    """The text with the phrase beside its answer (after its closing tag, or before its opening
    tag); a text with no answer gets it at its end."""
    span = answer_span(text, lenient)
    if span is None:
        return f"{text} {phrase}"
    if where == "after":
        return f"{text[: span[1]]} {phrase}{text[span[1] :]}"
    return f"{text[: span[0]]}{phrase} {text[span[0] :]}"


def contains(text: str, phrase: str) -> bool:
    """The phrase's words in order, any case, any spacing or punctuation between them."""
    words = re.findall(r"\w+", phrase)
    return re.search(r"\b" + r"\W+".join(map(re.escape, words)) + r"\b", text, re.I) is not None


class PrankTransport:
    """The prankster's transport: each group it shares has the phrase beside every answer its
    own verifier rewarded (the group's rewards, which receivers ignore); the rest as it was."""

    def __init__(self, inner, prank: Prank, lenient: bool) -> None:
        self.inner, self.prank, self.lenient = inner, prank, lenient
        self.pranked = 0  # completions that carried the phrase, since the last count

    def publish(self, payload) -> None:
        groups = []
        for g in groups_of(payload):
            texts = tuple(
                pranked(t, self.prank.phrase, self.prank.where, self.lenient) if r > 0 else t
                for t, r in zip(g.completions, g.rewards, strict=True)
            )
            self.pranked += sum(a != b for a, b in zip(texts, g.completions, strict=True))
            groups.append(dataclasses.replace(g, completions=texts))
        self.inner.publish(encode_batch(groups))

    def receive(self):
        return self.inner.receive()

    def describe(self) -> str:
        return self.inner.describe()


class PrankRun(Forward):
    """A sim's scenario (sapo_edge/run/runner.run_sim) and its watcher in one: the prankster's
    transport, its removal, and each node's prank.jsonl line after every round."""

    def __init__(self, inner, prank: Prank, names: list[str], lenient: bool) -> None:
        super().__init__(inner)
        self.prank, self.names = prank, names
        self.ids = [node_id_for(n) for n in names]
        self.transport: PrankTransport | None = None
        self.lenient = lenient
        self.nodes: dict[str, object] = {}

    def connect(self, node_id: str, transport):
        if node_id != self.ids[self.prank.node]:
            return transport
        self.transport = PrankTransport(transport, self.prank, self.lenient)
        return self.transport

    def before_round(self, nodes: list, round_: int) -> set[int]:
        self.nodes = {n.name: n for n in nodes}
        if not self.prank.remove_at or round_ < self.prank.remove_at:
            return set()
        for i, node in enumerate(nodes):  # again each round: a resumed pool forgot it
            if i != self.prank.node:
                node.pool.refuse_producer(self.ids[self.prank.node])
        return {self.prank.node}

    def on_round(self, report) -> None:
        node = self.nodes.get(report.node)
        if node is not None:
            own, external = node.last_groups.own, node.last_groups.external
            texts = [t for g in own for t in g.completions]
            line = {
                "round": report.round,
                "phrase_share": sum(contains(t, self.prank.phrase) for t in texts) / len(texts),
                "phrase_trained": sum(
                    contains(t, self.prank.phrase) for g in external for t in g.completions
                ),
                "pranked": 0,
            }
            if self.transport is not None and report.node == self.names[self.prank.node]:
                line["pranked"], self.transport.pranked = self.transport.pranked, 0
            with (node.out_dir / "prank.jsonl").open("a", encoding="utf-8") as f:
                f.write(json.dumps(line) + "\n")
        super().on_round(report)


KEYS = ("phrase_share", "phrase_trained", "pranked")


def read(out: Path, names: list[str], rounds: int) -> dict:
    """The summary's part: per key, per node, one value a round (None for a round it did not
    run), the last line of each round winning."""
    part: dict = {k: {} for k in KEYS}
    for name in names:
        path = out / name / "prank.jsonl"
        by_round: dict[int, dict] = {}
        if path.is_file():
            for ln in path.read_text(encoding="utf-8").splitlines():
                if ln.strip():
                    d = json.loads(ln)
                    by_round[d["round"]] = d
        for k in KEYS:
            part[k][name] = [by_round.get(r, {}).get(k) for r in range(rounds)]
    return part
