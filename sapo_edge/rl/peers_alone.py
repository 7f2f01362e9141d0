"""When a round may train its peers' groups alone, with none of its own beside them.

SampleSelf drops an own group whose completions all scored alike (no advantage), so a round in
which every own group scored alike trains only the peers' J groups. That is the Aha path: a node
that got every question it drew wrong has no answer of its own to learn from, and a peer's right
answer is what teaches it (aha.py, targeting.py). But own groups also all score alike when the
node got them all *right*, or some all right and the rest all wrong. Then a step of peers' groups
alone is text sampled by other models, under their prompts, trained with nothing of the node's
own to hold what already works: at the preset's learning rate every such AdamW step is as large
as one with own groups in it. Issue 57: the teacher's laptop in the Aha lesson (hinted, 88% of its
answers in tags, its own groups all alike) trained two rounds of 0+4 on students' groups,
re-encoded on its hinted prompt, and its tagged share went 88% -> 44% -> 0%.

So on a laptop that sees the worked example (format_example: the teacher's, a hinted student)
a round trains peers' groups alone only when every own completion scored 0 (or less); one that
answered any of its questions right in every completion and none with mixed results takes no
peers' groups that round (they stay in the pool for a later round), unless it was told to train
on peers only (local_samples = 0). Every other node keeps SAPO's rule (the paper's, and every
experiment's): a node that solved one question and failed another learns the failed one's kind
from its peers, which is what the swarm is for; no evidence here says that harms it.
"""

from __future__ import annotations

from typing import Any

from .advantages import is_informative
from .sampling import ScoredGroup


def all_failed(own: list[ScoredGroup]) -> bool:
    """Did every own completion of the round score 0 (or less)? The Aha case."""
    return all(r <= 0 for g in own for r in g.rewards)


def external_target(own: list[ScoredGroup], cfg: Any, n_external: int) -> int:
    """This round's J: n_external, or 0 on a laptop that sees the worked example (the node's
    settings now, `cfg`) when the step would hold peers' groups alone (no own group with
    differing rewards) although it did not fail every question it drew; a node told to train
    on peers only (local_samples = 0) is never held back."""
    if not cfg.format_example or cfg.local_samples == 0:
        return n_external
    if any(is_informative(g.rewards) for g in own) or all_failed(own):
        return n_external
    return 0
