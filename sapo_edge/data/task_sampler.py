"""The paper's SampleBatch for one node: each round k distinct weighted domains, one new
question from each, as TaskRefs (tasks.py regenerates them); seeded per node (node_seed) and
saved with each checkpoint (state_dict), so a resumed run draws the questions it would have."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import random
from typing import Any

from .tasks import TaskError, TaskRef, check_dataset, config_json, dataset_size, regenerate

SKIP_TRIES = 8  # questions in a row a domain may fail to build before the run stops


def node_seed(node_id: str, base_seed: int = 0) -> int:
    """A stable 31-bit seed from (node id, base seed): nodes with different ids draw different questions."""
    digest = hashlib.sha256(f"{base_seed}:{node_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 2**31


class TaskSampler:
    """The paper's SampleBatch: k distinct weighted domains per round, one new question from each."""

    def __init__(
        self, domains: dict[str, float], domain_configs: dict[str, dict] | None, seed: int
    ):
        if not isinstance(domains, dict) or not domains:
            raise TaskError(
                f"domains must map at least one domain to a weight, e.g. {{'basic_arithmetic': 1.0}}; got {domains!r}."
            )
        configs = dict(domain_configs or {})
        for name in configs:
            if name not in domains:
                raise TaskError(
                    f"domain_configs has a config for {name!r}, which is not in domains; add it to domains or remove the config."
                )
        for name, w in domains.items():
            if not isinstance(name, str):
                raise TaskError(f"domain names are strings, got {name!r}.")
            check_dataset(name)
            if (
                isinstance(w, bool)
                or not isinstance(w, int | float)
                or not math.isfinite(w)
                or w < 0
            ):
                raise TaskError(
                    f"weight for domain {name!r} must be a finite number >= 0, got {w!r}."
                )
        if not any(w > 0 for w in domains.values()):
            raise TaskError(
                "all domain weights are zero; give at least one domain a positive weight."
            )
        self.seed = int(seed)
        self.weights = {name: float(w) for name, w in domains.items()}
        self.refs = {name: TaskRef.make(name, configs.get(name), self.seed, 0) for name in domains}
        for ref in self.refs.values():
            regenerate(ref)  # a config reasoning-gym rejects fails here, not mid-run
        self._next = {name: 0 for name in domains}
        self._rng = random.Random(self.seed)
        self.skipped = 0  # questions reasoning-gym could not build, passed over (build_batch)

    def accepts(self, ref: TaskRef) -> bool:
        """True when ref is a question of one of this sampler's domains with its exact config and a
        valid index: the cheap check to run on a peer's ref (a hostile config can make generation slow)."""
        mine = self.refs.get(ref.dataset)
        return (
            mine is not None
            and config_json(mine) == config_json(ref)
            and 0 <= ref.index < dataset_size(ref.dataset)
        )

    def _pick_domains(self, k: int) -> list[str]:
        positive = [name for name, w in self.weights.items() if w > 0]
        picked: list[str] = []
        pool: list[str] = []
        while len(picked) < k:
            if not pool:  # every positive domain once per pass, then wrap around
                pool = list(positive)
            total = sum(self.weights[n] for n in pool)
            x, acc = self._rng.random() * total, 0.0
            choice = pool[-1]
            for name in pool:
                acc += self.weights[name]
                if x < acc:
                    choice = name
                    break
            pool.remove(choice)
            picked.append(choice)
        return picked

    def sample_batch(self, k: int) -> list[TaskRef]:
        """k refs from k distinct domains (wrapping around when k exceeds the weighted domains)."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise TaskError(f"sample_batch needs a batch size k >= 0, got {k!r}.")
        names = self._pick_domains(k)
        for name in set(names):
            if self._next[name] + names.count(name) > dataset_size(name):
                raise TaskError(
                    f"domain {name!r} has used all {dataset_size(name)} questions of seed {self.seed}; start with another seed."
                )
        refs = []
        for name in names:
            refs.append(dataclasses.replace(self.refs[name], index=self._next[name]))
            self._next[name] += 1
        return refs

    def build_batch(self, k: int) -> list[Any]:
        """sample_batch(k) built into Tasks. A question reasoning-gym cannot build (a generator's
        own bug: basic_arithmetic raised ZeroDivisionError for about 1 item in 100,000 and the
        run stopped with "Cannot continue") is skipped for the next index of the same domain
        (counted in `skipped`), at most SKIP_TRIES times in a row."""
        tasks = []
        for ref in self.sample_batch(k):
            for tries in range(SKIP_TRIES + 1):
                try:
                    tasks.append(regenerate(ref))
                    break
                except TaskError:
                    if tries == SKIP_TRIES or self._next[ref.dataset] >= dataset_size(ref.dataset):
                        raise
                    self.skipped += 1
                    ref = dataclasses.replace(ref, index=self._next[ref.dataset])
                    self._next[ref.dataset] += 1
        return tasks

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state (rng and per-domain counters) for an exact resume."""
        version, internal, gauss = self._rng.getstate()
        return {
            "seed": self.seed,
            "next_index": dict(self._next),
            "rng": [version, list(internal), gauss],
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        try:
            seed, counters, (version, internal, gauss) = d["seed"], d["next_index"], d["rng"]
            rng = random.Random()
            rng.setstate((version, tuple(internal), gauss))
            counters = {str(n): int(i) for n, i in counters.items()}
        except Exception as e:
            raise TaskError(
                f"task sampler state is malformed ({type(e).__name__}: {e}); pass what state_dict() returned."
            ) from None
        if seed != self.seed:
            raise TaskError(
                f"task sampler state was saved with seed {seed}, this sampler has seed {self.seed}; resume with the same seed."
            )
        if any(i < 0 for i in counters.values()):
            raise TaskError(
                "task sampler state has a negative question counter; pass what state_dict() returned."
            )
        self._rng = rng
        self._next = {name: counters.get(name, 0) for name in self.weights}  # new domains: 0
