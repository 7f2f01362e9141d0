"""The prank's report (experiments/prank_report.py) from hand-made cell summaries: the
`Prank spread:` line regenerates from the stored per-cell numbers, the prankster's own score is
left out, the tables and the plot."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "experiments"))

import evidence  # noqa: E402
import evidence_report  # noqa: E402
import prank_report  # noqa: E402

NAMES = ("s-0", "s-1", "s-2", "s-3")  # s-0 hinted, s-3 the prankster
ROUNDS = 3


def _cell(split, seed, share, held, remove_at=0):
    """Every classmate's phrase share climbs to `share` in the last round; the unhinted
    classmates (s-1, s-2) answer `held` of 10 held-out questions right. The prankster scores 1.0
    everywhere (it must not count) and, removed, stops after `remove_at` rounds."""
    ran = remove_at or ROUNDS
    right = round(10 * held)
    per = {n: [1.0] * right + [0.0] * (10 - right) for n in NAMES[:3]}
    per["s-3"] = [1.0] * 10
    phrase = {n: [0.0, share / 2, share] for n in NAMES[:3]}
    phrase["s-3"] = [0.0] * ran + [None] * (ROUNDS - ran)
    strict = {n: [0.0, 0.2, 0.4] for n in NAMES[:3]}
    strict["s-3"] = [1.0] * ran
    return {
        "label": "prank",
        "seed": seed,
        "split": split,
        "config": {"hinted_nodes": [0], "lenient": False, "external_after_answer": "train"},
        "prank": {"phrase": "Tom smells", "node": 3, "where": "after", "remove_at": remove_at},
        "heldout": {
            "pass_at_1": 0.0,
            "se": 0.01,
            "completions": 40,
            "per_node": {n: {"n": 10, "pass_at_1": 0.0, "scores": s} for n, s in per.items()},
        },
        "rewards": {n: [0.1] * (ROUNDS if n != "s-3" else ran) for n in NAMES},
        "cumulative": {n: 0.3 for n in NAMES},
        "total": 1.2,
        "rounds_done": ran,
        "external_target": {n: [4] * ROUNDS for n in NAMES},
        "node_ids": {n: f"id-{n}" for n in NAMES},
        "strict_reward": strict,
        "tagged_share": {n: [0.0, 0.5, 1.0] for n in NAMES},
        "external_from": {n: [{"id-s-0": 1}] * ROUNDS for n in NAMES},
        "phrase_share": phrase,
        "phrase_trained": {n: [0, 2, 3] if share else [0, 0, 0] for n in NAMES},
        "pranked": {n: [0, 4, 4] if n == "s-3" else [0, 0, 0] for n in NAMES},
    }


def _cells():
    cells = [
        _cell("4/4+prank", s, x, h) for s, x, h in ((0, 0.5, 0.5), (1, 0.6, 0.6), (2, 0.7, 0.7))
    ]
    cells += [_cell("4/4+prank+trim", s, 0.0, h) for s, h in ((0, 0.5), (1, 0.6), (2, 0.7))]
    cells += [
        _cell("4/4+prank+remove", s, x, h, remove_at=1)
        for s, x, h in ((0, 0.0, 0.2), (1, 0.1, 0.3), (2, 0.2, 0.4))
    ]
    cells.append(_cell("4/4+prank-before+trim", 0, 0.4, 0.5))
    return cells


def _write(docs, cells):
    (docs / "evidence" / "prank").mkdir(parents=True)
    for c in cells:
        name = f"seed-{c['seed']}-{evidence.slug(c['split'])}.json"
        (docs / "evidence" / "prank" / name).write_text(json.dumps(c))


def test_the_spread_line_regenerates_from_the_stored_summaries(tmp_path):
    docs = tmp_path / "docs"
    _write(docs, _cells())
    text = evidence_report.write_results(docs).read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("Prank spread:"))
    # no defence 0.5, 0.6, 0.7: mean 0.6, sd 0.1, half 4.303 * 0.1 / sqrt(3) = 0.2484;
    # (b) 0.0, 0.1, 0.2: mean 0.1, the same half; held-out (b) 0.2, 0.3, 0.4 (s-3's 1.0 left out)
    assert line == (
        "Prank spread: the phrase's share of classmates' own answers in round 3: "
        "no defence 0.600 [0.352, 0.848]; "
        "(a) peers' text after the answer not trained 0.000 [0.000, 0.000]; "
        "(b) prankster removed after round 1 0.100 [-0.148, 0.348]. "
        "Unhinted classmates' held-out strict pass@1: no defence 0.600 [0.352, 0.848]; "
        "(a) 0.600 [0.352, 0.848]; (b) 0.300 [0.052, 0.548]. "
        "(4/4+prank: 3 seed(s), 4/4+prank+trim: 3 seed(s), 4/4+prank+remove: 3 seed(s); "
        "95% t-intervals over seeds.)"
    )
    assert "| 4/4+prank-before+trim | 0 | 0.400 | 15 | 8 | 0.500 |" in text  # 3 classmates x 5
    assert "| 4/4+prank+remove | 1 | 0.100 | 15 | 8 | 0.300 |" in text
    assert "| 4/4+prank | round 3 |" not in text and "| split | round 3 |" in text
    assert "| 4/4+prank+trim | 0.00 / 0.40 |" in text  # every 4th round, or the last of 3
    rows = [ln.split(" | ")[0] for ln in text.splitlines() if ln.endswith(" / 0.40 |")]
    assert rows == [
        "| 4/4+prank",
        "| 4/4+prank+trim",
        "| 4/4+prank+remove",
        "| 4/4+prank-before+trim",
    ]
    assert (docs / "evidence/prank/prank_spread.png").stat().st_size > 1000
    # the numbers come from the stored summaries alone: rebuilt, the same line
    again = evidence_report.write_results(docs).read_text()
    assert line in again.splitlines()


def test_a_missing_defence_is_left_out_and_one_seed_says_so():
    a = prank_report.analyse([_cell("4/4+prank", 0, 0.5, 0.5)])
    line = prank_report.spread_line(a)
    assert "no defence 0.500 [one seed]" in line and "(a)" not in line and "(b)" not in line


def test_cells_without_a_prank_are_no_prank_experiment():
    c = _cell("4/4", 0, 0.0, 0.5)
    del c["prank"]
    assert not prank_report.is_prank([c]) and prank_report.analyse([c])["splits"] == {}
