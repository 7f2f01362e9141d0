"""`+alone` (issue 56): the control for the second-order spread. A split such as 4/4+alone runs
as 4/4 while the hinted nodes share (--hint-rounds H), then, resumed from the checkpoint of
round H, every node trains alone on its own groups (I + J own, J = 0) to the end: the same seeds
as 4/4 with node 0 stopping after H, so the two differ only in whether the unhinted nodes go on
sharing with each other from round H + 1."""

from __future__ import annotations

import dataclasses

ALONE = "+alone"


def phases(cfg, suffixes: set[str]) -> list:
    """The sims a cell runs one after the other: the cell's own; with +alone, its first
    hint_rounds rounds, then the rest alone (the second resumes where the first saved)."""
    if ALONE not in suffixes:
        return [cfg]
    if not 0 < cfg.hint_rounds < cfg.rounds:
        raise SystemExit(
            f"{ALONE} starts when the hinted nodes stop: give --hint-rounds between 1 and "
            f"{cfg.rounds - 1} (the rounds - 1)."
        )
    alone = {"local_samples": cfg.local_samples + cfg.external_samples, "external_samples": 0}
    return [
        dataclasses.replace(cfg, rounds=cfg.hint_rounds),
        dataclasses.replace(cfg, resume=True, **alone),
    ]
