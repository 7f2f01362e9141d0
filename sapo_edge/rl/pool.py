"""The pool of classmates' groups waiting to be sampled (SampleExternal's source): bounded by
groups, text and one producer's share, fair when full, saved in checkpoints, and giving back the
groups a stopped round took."""

from __future__ import annotations

import random
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..data.rollout import RolloutError, RolloutGroup
from .advantages import is_informative
from .sampling import PREFER_TRIES, ScoredGroup


@dataclass
class _Entry:
    group: RolloutGroup
    received_round: int  # this node's round when the group arrived
    size: int = 0  # characters of text it holds (what bounds the pool's memory)


# what a group counts against the pool's text bound at least: an empty group holds objects, not
# nothing, and a weightless one never drew an eviction (issue 54: ~2,300 empty groups from one
# sender made every eviction hit the honest producers)
GROUP_FLOOR = 1024


def _text_size(g: RolloutGroup) -> int:
    return len(g.question) + len(g.reference_answer or "") + sum(len(c) for c in g.completions)


def _empty(g: RolloutGroup) -> bool:
    """No completion says anything: nothing to learn from, whatever its rewards."""
    return not any(c.strip() for c in g.completions)


class ExternalPool:
    """Groups received from peers, waiting to be sampled. Thread-safe: the network thread adds,
    the training thread samples. Every group is used at most once and accepted at most once.

    Bounded three ways, each evicting by what is over: past `capacity` groups, the oldest group
    of the producer holding the most groups goes; past `max_chars` of text (each group counted
    at least `group_floor`), the oldest of the producer holding the most text; and one producer
    holds at most `max_producer_share` of the capacity (its own oldest goes first). A group whose
    completions are all empty is refused (`empty`), and so is every group of a producer the
    class's host removed (`refuse_producer`: `removed`, its groups held here dropped).
    """

    COUNTERS = (
        "added",
        "own",
        "empty",
        "foreign_task",
        "removed",
        "duplicate",
        "evicted",
        "stale",
        "rescore_failed",
        "zero_advantage",
        "used",
    )

    def __init__(
        self,
        self_id: str,
        capacity: int = 2048,
        freshness_rounds: int = 5,
        max_peer_share: float = 1.0,
        max_age_rounds: int | None = None,
        max_chars: int = 128 << 20,
        max_producer_share: float = 0.25,
        group_floor: int = GROUP_FLOOR,
        accepts: Callable[[Any], bool] = lambda _ref: True,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"pool capacity is {capacity}; it must hold at least one group.")
        if freshness_rounds < 0:
            raise ValueError(f"freshness_rounds is {freshness_rounds}; use 0 or more rounds.")
        for name, share in (
            ("max_peer_share", max_peer_share),
            ("max_producer_share", max_producer_share),
        ):
            if not 0.0 < share <= 1.0:
                raise ValueError(f"{name} is {share}; use a fraction in (0, 1].")
        self.self_id = self_id
        self.capacity = capacity
        self.freshness_rounds = freshness_rounds
        self.max_age_rounds = 4 * freshness_rounds if max_age_rounds is None else max_age_rounds
        self.max_peer_share = max_peer_share
        self._lock = threading.Lock()
        self._pool: OrderedDict[str, _Entry] = OrderedDict()  # arrival order: oldest first
        self._seen: dict[str, None] = {}  # ordered set of accepted ids, bounded
        self._seen_capacity = 8 * capacity
        self._counts: dict[str, int] = dict.fromkeys(self.COUNTERS, 0)
        # bounded by text size too; when full, the producer holding the most text loses its
        # oldest group, so free identities flooding big groups cannot push out an honest peer
        self.max_chars = max_chars
        self.max_per_producer = max(1, int(capacity * max_producer_share))
        self.group_floor = group_floor
        # the sampler's check of a task ref (its domains and configs): a group it would refuse
        # is never held (`foreign_task`), not kept until the sampler tries it
        self.accepts = accepts
        self.last_refusal = ""  # why the latest add() returned False
        self.refused: set[str] = set()  # producers removed from the class: none of theirs kept
        self._chars: dict[str, int] = {}  # producer -> characters held
        self._held: dict[str, OrderedDict[str, None]] = {}  # producer -> its ids, oldest first
        self._total_chars = 0
        self.last_targeted = 0  # groups the latest sample() took for being preferred

    def add(self, group: RolloutGroup, local_round: int) -> bool:
        """Keep a peer's group; False (counted, and said in `last_refusal`) for an own group, one
        whose completions are all blank, one of a task `accepts` refuses, and an id seen before."""
        gid = group.group_id
        refusal = (
            "own"
            if group.producer == self.self_id
            else "removed"
            if group.producer in self.refused or "*" in self.refused
            else "empty"
            if _empty(group)
            else "foreign_task"
            if not self.accepts(group.task_ref)
            else ""
        )
        with self._lock:
            if not refusal and gid in self._seen:
                refusal = "duplicate"
            self.last_refusal = refusal
            if refusal:
                self._counts[refusal] = self._counts.get(refusal, 0) + 1
                return False
            self._seen[gid] = None
            if len(self._seen) > self._seen_capacity:
                del self._seen[next(iter(self._seen))]
            self._keep(gid, _Entry(group, local_round, self._size(group)))
            self._counts["added"] += 1
            if len(self._held[group.producer]) > self.max_per_producer:
                self._evict_oldest(group.producer)
            while len(self._pool) > self.capacity:
                self._evict_oldest(max(self._held, key=lambda p: (len(self._held[p]), p)))
            while len(self._pool) > 1 and self._total_chars > self.max_chars:
                self._evict_oldest(max(self._chars, key=lambda p: (self._chars[p], p)))
            return True

    def refuse_producer(self, producer: str, refused: bool = True) -> int:
        """A member the class's host removed: its groups held here go (counted `removed`) and
        none is kept or trained on until it is let back (refused=False). How many went. "*":
        every producer (this laptop was removed: it trains alone)."""
        with self._lock:
            if not refused:
                self.refused.discard(producer)
                return 0
            self.refused.add(producer)
            gone = list(self._pool) if producer == "*" else list(self._held.get(producer, ()))
            for gid in gone:
                self._drop(gid)
            self._counts["removed"] += len(gone)
            return len(gone)

    def _size(self, group: RolloutGroup) -> int:
        """What a group counts against the text bound: its characters, group_floor at least."""
        return max(self.group_floor, _text_size(group))

    def _keep(self, gid: str, entry: _Entry) -> None:
        """Put one group in the pool and count it for its producer (the lock is held)."""
        producer = entry.group.producer
        self._pool[gid] = entry
        self._held.setdefault(producer, OrderedDict())[gid] = None
        self._chars[producer] = self._chars.get(producer, 0) + entry.size
        self._total_chars += entry.size

    def _evict_oldest(self, producer: str) -> None:
        self._drop(next(iter(self._held[producer])))
        self._counts["evicted"] += 1

    def _drop(self, gid: str) -> _Entry:
        """Remove one group from the pool (the lock is held)."""
        entry = self._pool.pop(gid)
        producer = entry.group.producer
        self._total_chars -= entry.size
        left = self._chars.get(producer, 0) - entry.size
        if left > 0:
            self._chars[producer] = left
        else:
            self._chars.pop(producer, None)
        ids = self._held.get(producer)
        if ids is not None:
            ids.pop(gid, None)
            if not ids:
                del self._held[producer]
        return entry

    def _recount(self) -> None:
        """What each producer holds, recomputed from the pool (the lock is held)."""
        pool = self._pool
        self._pool, self._chars, self._held, self._total_chars = OrderedDict(), {}, {}, 0
        for gid, e in pool.items():
            self._keep(gid, e)

    def reject(self, reason: str, n: int = 1) -> None:
        """Count a rejection (or other event) decided elsewhere, e.g. a decode error's reason code."""
        with self._lock:
            self._counts[reason] = self._counts.get(reason, 0) + n

    # ------------------------------------------------------------------- round undo, checkpoints
    def snapshot(self) -> tuple:
        """The pool as it is now, for restore() when a round stops before training. The trainer
        takes it after receiving and before sampling; nothing adds to the pool in between."""
        with self._lock:
            return OrderedDict(self._pool), dict(self._seen), dict(self._counts)

    def restore(self, snap: tuple) -> None:
        """Back to a snapshot(): the groups a stopped round took are waiting again, in order."""
        pool, seen, counts = snap
        with self._lock:
            self._pool, self._seen, self._counts = OrderedDict(pool), dict(seen), dict(counts)
            self._recount()

    def state_dict(self) -> dict:
        """Plain JSON for a checkpoint: the groups waiting (with their arrival round), ids seen and
        counters, so a resumed node samples exactly what it would have sampled."""
        with self._lock:
            return {
                "version": 1,
                "entries": [[e.group.to_dict(), e.received_round] for e in self._pool.values()],
                "seen": list(self._seen),
                "counts": dict(self._counts),
            }

    def load_state_dict(self, d: dict) -> int:
        """Restore state_dict(); groups that no longer validate (an older format) are left out.
        Returns how many were left out."""
        if not isinstance(d, dict) or d.get("version") != 1:
            raise ValueError("the rollout pool's saved state is not one this version can read.")
        pool: OrderedDict[str, _Entry] = OrderedDict()
        dropped = 0
        for group, received in d.get("entries", []):
            try:
                g = RolloutGroup.from_dict(group)
            except RolloutError:
                dropped += 1
                continue
            pool[g.group_id] = _Entry(g, int(received), self._size(g))
        with self._lock:
            self._pool = pool
            self._recount()
            self._seen = dict.fromkeys(str(x) for x in d.get("seen", []))
            self._counts = {**dict.fromkeys(self.COUNTERS, 0), **d.get("counts", {})}
        return dropped

    def sample(
        self,
        count: int,
        local_round: int,
        rescore: Callable[[RolloutGroup], ScoredGroup | None],
        rng: random.Random,
        prefer: Callable[[RolloutGroup], Any] | None = None,
        prefer_max: int = 0,
    ) -> list[ScoredGroup]:
        """SampleExternal: up to `count` unused groups, fresh ones first, uniform within each tier.

        `rescore` regenerates the task and scores the completions with this node's verifier;
        it returns None (or raises ValueError, e.g. TaskError) to reject a group. Groups whose
        re-scored rewards are all alike are dropped. At most max(1, floor(max_peer_share*count))
        groups come from any one producer; the rest stay in the pool for later rounds.

        With `prefer` (targeted sampling, sapo_edge/rl/targeting.py): first up to `prefer_max`
        groups in the order of prefer(group), a sort key or None for groups not preferred (ties
        in the uniform order), trying at most PREFER_TRIES per slot; then the uniform draw
        fills the rest. `last_targeted` says how many were taken for being preferred. With no
        group preferred the draw is exactly the uniform one.
        """
        self.last_targeted = 0
        if count <= 0:
            return []
        with self._lock:
            for gid in [
                g
                for g, e in self._pool.items()
                if local_round - e.received_round > self.max_age_rounds
            ]:
                self._drop(gid)
                self._counts["stale"] += 1
            fresh = [
                g
                for g, e in self._pool.items()
                if local_round - e.received_round <= self.freshness_rounds
            ]
            older = [
                g
                for g, e in self._pool.items()
                if local_round - e.received_round > self.freshness_rounds
            ]
        rng.shuffle(fresh)
        rng.shuffle(older)
        order = fresh + older

        per_peer_cap = max(1, int(self.max_peer_share * count))
        per_peer: dict[str, int] = {}
        out: list[ScoredGroup] = []
        if prefer is not None and prefer_max > 0:
            with self._lock:
                keyed = [
                    ((key, pos >= len(fresh)), gid)  # fresh first among equally wanted
                    for pos, gid in enumerate(order)
                    if gid in self._pool  # (the network thread may have evicted it)
                    and (key := prefer(self._pool[gid].group)) is not None
                ]
            # ties in an order of their own: taking the first wanted groups of `order` would
            # leave the rest of them late in it, and the uniform draw below would favour others
            if keyed:
                rng.shuffle(keyed)
                keyed.sort(key=lambda kg: kg[0])
            tries = 0
            for _, gid in keyed:
                if min(prefer_max, count) <= len(out) or tries >= PREFER_TRIES * prefer_max:
                    break
                got, tried = self._take(gid, rescore, per_peer, per_peer_cap)
                tries += tried
                if got is not None:
                    out.append(got)
            self.last_targeted = len(out)
            if out:
                with self._lock:
                    self._counts["targeted"] = self._counts.get("targeted", 0) + len(out)
        for gid in order:
            if len(out) >= count:
                break
            got, _ = self._take(gid, rescore, per_peer, per_peer_cap)
            if got is not None:
                out.append(got)
        return out

    def _take(
        self,
        gid: str,
        rescore: Callable[[RolloutGroup], ScoredGroup | None],
        per_peer: dict[str, int],
        per_peer_cap: int,
    ) -> tuple[ScoredGroup | None, bool]:
        """Claim one group and re-score it: (the group to train or None, whether it was tried).
        A claimed group leaves the pool whatever its score."""
        with self._lock:
            entry = self._pool.get(gid)
            if entry is None or per_peer.get(entry.group.producer, 0) >= per_peer_cap:
                return None, False
            self._drop(gid)
            if entry.group.producer in self.refused or "*" in self.refused:  # from a snapshot
                self._counts["removed"] += 1
                return None, False
        try:
            sg = rescore(entry.group)  # outside the lock: regenerating a task may be slow
        except ValueError:
            sg = None
        reason = (
            "rescore_failed"
            if sg is None
            else "zero_advantage"
            if not is_informative(sg.rewards)
            else "used"
        )
        with self._lock:
            self._counts[reason] += 1
        if sg is None or reason != "used":
            return None, True
        per_peer[entry.group.producer] = per_peer.get(entry.group.producer, 0) + 1
        return sg, True

    def fillable(self, count: int, local_round: int) -> int:
        """At most how many groups sample(count, local_round, ...) could return: the groups not
        too old to use, at most max(1, floor(max_peer_share*count)) from one producer (before
        re-scoring, which may reject some)."""
        if count <= 0:
            return 0
        cap = max(1, int(self.max_peer_share * count))
        per_peer: dict[str, int] = {}
        with self._lock:
            for e in self._pool.values():
                if local_round - e.received_round <= self.max_age_rounds:
                    per_peer[e.group.producer] = per_peer.get(e.group.producer, 0) + 1
        return min(count, sum(min(n, cap) for n in per_peer.values()))

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {**self._counts, "size": len(self._pool)}

    def __len__(self) -> int:
        with self._lock:
            return len(self._pool)
