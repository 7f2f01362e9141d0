"""The Aha report (experiments/aha_report.py) from hand-made cells: the `Aha spread:` line, the
goal, the mechanism per unhinted node, the plot."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "experiments"))

import aha_report  # noqa: E402
import evidence  # noqa: E402
import evidence_report  # noqa: E402

NAMES = ("s-0", "s-1", "s-2")


def _cell(split, seed, unhinted, hinted=0.8, trained_from_hint=(3, 0), first=(2, None)):
    """Three nodes, s-0 hinted. Each unhinted node answers 10 held-out questions, `unhinted` of
    them right (a share); its strict reward is 0 until round `first`, then 0.5."""
    right = round(10 * unhinted)
    per = {"s-0": [1.0] * round(10 * hinted) + [0.0] * (10 - round(10 * hinted))}
    for n in NAMES[1:]:
        per[n] = [1.0] * right + [0.0] * (10 - right)
    strict = {"s-0": [0.5, 0.6, 0.7]}
    for n, f in zip(NAMES[1:], first, strict=True):
        strict[n] = [0.0 if f is None or r < f else 0.5 for r in range(3)]
    ids = {n: f"id-{n}" for n in NAMES}
    return {
        "label": "aha",
        "seed": seed,
        "split": split,
        "config": {"hinted_nodes": [0], "lenient": False},
        "heldout": {
            "pass_at_1": 0.0,
            "se": 0.01,
            "completions": 30,
            "per_node": {n: {"n": 10, "pass_at_1": 0.0, "scores": s} for n, s in per.items()},
        },
        "rewards": {n: [0.1, 0.1, 0.1] for n in NAMES},
        "cumulative": {n: 0.3 for n in NAMES},
        "total": 0.9,
        "rounds_done": 3,
        "external_target": {n: [4, 4, 4] for n in NAMES},
        "node_ids": ids,
        "strict_reward": strict,
        "tagged_share": {n: [0.0, 0.5, 1.0] for n in NAMES},
        "external_from": {
            "s-0": [{}, {}, {}],
            "s-1": [{"id-s-0": trained_from_hint[0]}, {"id-s-2": 2}, {}],
            "s-2": [{"id-s-0": trained_from_hint[1]}, {}, {}],
        },
    }


def _write(docs, cells):
    (docs / "evidence" / "aha").mkdir(parents=True)
    for c in cells:
        name = f"seed-{c['seed']}-{evidence.slug(c['split'])}.json"
        (docs / "evidence" / "aha" / name).write_text(json.dumps(c))


def test_the_spread_line_the_goal_and_the_mechanism(tmp_path):
    docs = tmp_path / "docs"
    cells = [
        _cell("8/0", s, u, trained_from_hint=(0, 0), first=(None, None))
        for s, u in ((0, 0.0), (1, 0.1), (2, 0.0))
    ]
    cells += [_cell("4/4", s, u) for s, u in ((0, 0.5), (1, 0.6), (2, 0.7))]
    _write(docs, cells)
    text = evidence_report.write_results(docs).read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("Aha spread:"))
    # 8/0 unhinted: 0.0, 0.1, 0.0 -> mean 0.0333, sd 0.0577, half 4.303 * 0.0577 / sqrt(3) = 0.1434
    # 4/4: 0.5, 0.6, 0.7 -> mean 0.6, sd 0.1, half 0.2484
    assert line.startswith(
        "Aha spread: unhinted nodes' held-out strict pass@1: 8/0 0.033 [-0.110, 0.177]; "
        "4/4 0.600 [0.352, 0.848]. Hinted node: 8/0 0.800 [0.800, 0.800]; 4/4 0.800"
    )
    assert "**met**" in text and "Best split 4/4: 0.600 against 0.033 (18.0x, +0.567" in text
    assert "| 4/4 | 0 | s-1: 3, 2, 1.00; s-2: 0, -, 1.00 |" in text  # only the hinted id counts
    assert "| 8/0 | 1 | s-1: 0, -, 1.00; s-2: 0, -, 1.00 |" in text
    assert (docs / "evidence/aha/aha_spread.png").stat().st_size > 1000


def test_the_goal_is_not_met_when_the_intervals_touch_or_seeds_are_few(tmp_path):
    solo = [_cell("8/0", s, u) for s, u in ((0, 0.0), (1, 0.3), (2, 0.0))]
    close = [_cell("4/4", s, u) for s, u in ((0, 0.2), (1, 0.5), (2, 0.3))]
    g = aha_report.analyse(solo + close)["goal"]
    assert g["enough"] and not g["apart"] and not g["met"]  # 8/0 high 0.53 > 4/4 low
    few = aha_report.analyse(solo[:2] + close[:2])["goal"]
    assert not few["enough"] and not few["met"]
    text = "\n".join(aha_report.render(aha_report.analyse(solo[:2] + close[:2])))
    assert "**not decided yet** (fewer than 3 seeds" in text


def test_a_cell_without_hinted_nodes_is_no_aha_experiment():
    c = _cell("8/0", 0, 0.0)
    assert aha_report.is_aha([c])
    c["config"]["hinted_nodes"] = []
    assert not aha_report.is_aha([c])


def test_a_split_on_one_seed_does_not_unsettle_the_goal_three_seeds_decided():
    """4/4+targeted run on one seed scores above 4/4 (three seeds): the goal is still decided by
    4/4, the best split with three seeds, not left 'not decided yet'."""
    solo = [_cell("8/0", s, 0.0) for s in (0, 1, 2)]
    shared = [_cell("4/4", s, u) for s, u in ((0, 0.5), (1, 0.6), (2, 0.5))]
    one = [_cell("4/4+targeted", 0, 0.9)]
    g = aha_report.analyse(solo + shared + one)["goal"]
    assert g["best"] == "4/4" and g["enough"] and g["met"]
    alone = aha_report.analyse(solo + one)["goal"]  # no split has three seeds: it decides nothing
    assert alone["best"] == "4/4+targeted" and not alone["enough"] and not alone["met"]


def test_a_hinted_node_that_stopped_early_does_not_cut_the_others_rounds():
    """With hint_rounds the hinted node stops (8 of 24 rounds here); the swarm's reward per round
    and the experiment's round count go on with the others."""
    import evidence_report

    c = _cell("4/4", 0, 0.5)
    c["rewards"] = {"s-0": [1.0] * 2, "s-1": [0.5] * 6, "s-2": [0.25] * 6}
    c["rounds_done"] = 2  # what evidence.py writes: the shortest node's
    assert evidence_report.rounds_of(c) == 6
    assert evidence_report.swarm_per_round(c) == [1.75, 1.75] + [0.75] * 4
