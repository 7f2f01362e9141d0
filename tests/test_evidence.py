"""Evidence v2 (experiments/evidence.py, evidence_report.py, stats.py): the statistics by hand,
the report from hand-made summaries, and the pipeline end to end on the tiny model: every cell
summarised, finished cells skipped on a re-run, each summary committed."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "experiments"))

import evidence  # noqa: E402
import evidence_report  # noqa: E402
from stats import interval, paired, samples_for_se, standard_error, t_critical  # noqa: E402
from tiny_sweep import evidence_argv  # noqa: E402


def test_t_table_and_a_conservative_row_between_entries():
    assert t_critical(1) == 12.706 and t_critical(2) == 4.303 and t_critical(3) == 3.182
    assert t_critical(35) == t_critical(30) == 2.042  # df 35: the df 30 row, a wider interval
    assert t_critical(10**6) == 1.960
    with pytest.raises(ValueError, match="at least 2 values"):
        t_critical(0)


def test_t_table_matches_scipy_where_it_is_installed():
    st = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 4, 5, 10, 20, 30, 60, 120):
        assert t_critical(df) == pytest.approx(st.t.ppf(0.975, df), abs=6e-4)


def test_interval_by_hand():
    # [1, 2, 3, 4]: mean 2.5, sd sqrt(5/3) = 1.290994, se 0.645497, t(3) 3.182 -> +- 2.053972
    iv = interval([1.0, 2.0, 3.0, 4.0])
    assert iv.mean == 2.5 and iv.sd == pytest.approx(1.290994, abs=1e-6)
    assert (iv.low, iv.high) == (
        pytest.approx(0.446028, abs=1e-6),
        pytest.approx(4.553972, abs=1e-6),
    )
    assert iv.text() == "2.50 [0.45, 4.55]" and not iv.excludes(1.0) and iv.excludes(5.0)
    one = interval([3.0])
    assert one.low is None and one.text() == "3.00 (one seed: no interval)" and not one.excludes(0)
    diffs, d = paired({0: 12.0, 1: 14.0, 2: 13.0, 3: 9.0}, {0: 10.0, 1: 11.0, 2: 12.0})
    assert diffs == {0: 2.0, 1: 3.0, 2: 1.0}  # seed 3 has no partner
    # mean 2, sd 1, t(2) 4.303 / sqrt(3) = 2.484339
    assert d.text() == "2.00 [-0.48, 4.48]"


def test_samples_for_a_standard_error_below_0_015():
    # a reward in [0, 1] has variance <= 1/4: n > 0.25 / 0.015^2 = 1111.1
    assert samples_for_se(0.015) == 1112 and math.sqrt(0.25 / 1112) < 0.015 <= math.sqrt(
        0.25 / 1111
    )
    assert evidence.heldout_per_node(4) == 278  # 4 nodes x 278 = 1112 completions per cell
    assert standard_error([0.0, 1.0, 0.0, 1.0]) == pytest.approx(math.sqrt(1 / 3) / 2)


def test_the_plan_runs_base_then_seed_by_seed():
    assert evidence.plan([0, 1], ["8/0", "4/4"], ["2/6"]) == [
        (None, "base"),
        (0, "8/0"),
        (0, "4/4"),
        (0, "2/6"),
        (1, "8/0"),
        (1, "4/4"),
    ]
    with pytest.raises(SystemExit, match="write I/J"):
        evidence.check_split("4-4")


def test_targeted_splits_name_their_external_sampling(tmp_path):
    args = evidence.parser().parse_args(
        ["--out", str(tmp_path), "--splits", "8/0,4/4+targeted,adaptive+targeted"]
    )
    assert args.splits == ["8/0", "4/4+targeted", "adaptive+targeted"]
    four = evidence.cell_config(args, 1, "4/4+targeted")
    assert (four.mix, four.external_sampling, four.local_samples, four.external_samples) == (
        "fixed",
        "targeted",
        4,
        4,
    )
    ad = evidence.cell_config(args, 1, "adaptive+targeted")
    assert (ad.mix, ad.external_sampling) == ("adaptive", "targeted")
    assert evidence.cell_config(args, 1, "4/4").external_sampling == "uniform"
    assert ad.out_dir.endswith("seed-1/adaptive-targeted")
    with pytest.raises(SystemExit, match="J = 0 samples no peer groups"):
        evidence.check_split("8/0+targeted")
    with pytest.raises(SystemExit, match="write I/J"):
        evidence.check_split("4/4+smart")


def test_no_negatives_splits_leave_the_peers_wrong_answers_out(tmp_path):
    args = evidence.parser().parse_args(
        ["--out", str(tmp_path), "--splits", "4/4+no-negatives,4/4+targeted+no-negatives"]
    )
    nn = evidence.cell_config(args, 2, "4/4+no-negatives")
    assert (nn.external_negatives, nn.external_sampling, nn.local_samples, nn.external_samples) == (
        False,
        "uniform",
        4,
        4,
    )
    assert nn.out_dir.endswith("seed-2/4-4-no-negatives")
    both = evidence.cell_config(args, 2, "4/4+targeted+no-negatives")
    assert (both.external_negatives, both.external_sampling) == (False, "targeted")
    assert evidence.cell_config(args, 2, "4/4+targeted").external_negatives is True
    assert evidence.cell_config(args, 2, "8/0").external_negatives is True
    with pytest.raises(SystemExit, match="J = 0 samples no peer groups; drop \\+no-negatives"):
        evidence.check_split("8/0+no-negatives")
    with pytest.raises(SystemExit, match="write I/J"):
        evidence.check_split("4/4+no-negatives+targeted")  # the suffixes' order is fixed


def test_checkpoint_every_overrides_the_config_only_when_given(tmp_path):
    """A lane stopped between sessions resumes from its newest checkpoint: --checkpoint-every 1
    makes that the last round; without it the config's own interval stays."""
    plain = evidence.parser().parse_args(["--out", str(tmp_path)])
    often = evidence.parser().parse_args(["--out", str(tmp_path), "--checkpoint-every", "1"])
    assert evidence.cell_config(plain, 0, "8/0").checkpoint_every == 6  # sweep.toml's
    assert evidence.cell_config(often, 0, "8/0").checkpoint_every == 1


def _cell(split, seed, total, pass_at_1=0.3, js=(4, 4)):
    half = total / 2
    return {
        "label": "t",
        "seed": seed,
        "split": split,
        "heldout": {"pass_at_1": pass_at_1, "se": 0.01, "completions": 1112, "per_node": {}},
        "rewards": {"n-0": [half / 2, half / 2], "n-1": [half / 2, half / 2]},
        "cumulative": {"n-0": half, "n-1": half},
        "total": total,
        "rounds_done": 2,
        "external_target": {"n-0": list(js), "n-1": list(js)},
    }


def test_report_from_hand_made_summaries(tmp_path):
    docs = tmp_path / "docs"
    (docs / "evidence" / "main").mkdir(parents=True)
    cells = [_cell("8/0", s, t) for s, t in ((0, 10.0), (1, 11.0), (2, 12.0))]
    cells += [_cell("4/4", s, t) for s, t in ((0, 12.0), (1, 14.0), (2, 13.0))]
    cells += [_cell("adaptive", 0, 9.0, js=(0, 6))]
    cells += [_cell("adaptive+targeted", 0, 15.0, js=(2, 2))]
    for c in cells:
        name = f"seed-{c['seed']}-{evidence.slug(c['split'])}.json"
        (docs / "evidence" / "main" / name).write_text(json.dumps(c))
    (docs / "evidence" / "main" / "seed-9-x.json").write_text("{not json")
    (docs / "results.md").write_text("old text\n" + evidence_report.NOTES + "\nmy notes\n")
    text = evidence_report.write_results(docs).read_text()
    # 8/0: mean 11, sd 1 -> 11 +- 4.303 / sqrt(3) = 2.484
    assert "| 8/0 | 0,1,2 | 11.00 [8.52, 13.48] |" in text
    assert "| 4/4 - 8/0 | 0: +2.00, 1: +3.00, 2: +1.00 | 2.00 [-0.48, 4.48] |" in text
    # ratios 1.2, 1.272727, 1.083333: mean 1.185354
    assert "0: 1.200, 1: 1.273, 2: 1.083 | 1.185 [" in text
    assert "the interval includes 0, so these seeds do not show a difference" in text
    assert "4/4 : 8/0 cumulative reward ratio 1.19 [" in text
    assert "the goal (>= 1.5x with the interval excluding 1x) is not met" in text
    # the goal is checked for every split against 8/0, not 4/4 alone
    assert "adaptive : 8/0 cumulative reward ratio 0.90 (one seed: no interval): the goal" in text
    assert "adaptive - 8/0: one paired seed (-1.00); no interval yet." in text
    assert "J chosen over all node-rounds: J=0: 50%, J=6: 50%" in text
    assert "below it" in text  # adaptive 9.0 vs 4/4's 13.0
    assert "seed-9-x.json" in text and "could not be read" in text
    assert text.endswith(evidence_report.NOTES + "\nmy notes\n") and "old text" not in text
    assert "Baseline 8/0: the same nodes, seeds and questions" in text  # main's, by hand
    assert (docs / "evidence/main/cumulative_reward.png").stat().st_size > 1000
    assert (docs / "evidence/main/adaptive_j.png").stat().st_size > 1000
    assert "adaptive+targeted - 8/0: one paired seed (+5.00); no interval yet." in text
    assert "adaptive+targeted: J chosen over all node-rounds: J=2: 100%" in text
    assert (docs / "evidence/main/adaptive-targeted_j.png").stat().st_size > 1000


def test_goal_lines_only_under_the_experiments_they_were_set_for(tmp_path):
    """Issue 56: the 1.5x goal and the fair target were set for main, long, v3 and v4; under any
    other experiment (aha, a new one) the report checks neither, and says its baseline."""
    docs = tmp_path / "docs"
    for label in ("v4", "aha-new"):
        (docs / "evidence" / label).mkdir(parents=True)
        for c in [_cell("8/0", s, 10.0 + s) for s in (0, 1, 2)]:
            c["rewards"] = {n: [v / 12] * 12 for n, v in c["cumulative"].items()}
            (docs / "evidence" / label / f"seed-{c['seed']}-8-0.json").write_text(json.dumps(c))
        for c in [_cell("4/4", s, 20.0 + s) for s in (0, 1, 2)]:
            c["rewards"] = {n: [v / 12] * 12 for n, v in c["cumulative"].items()}
            (docs / "evidence" / label / f"seed-{c['seed']}-4-4.json").write_text(json.dumps(c))
    text = evidence_report.write_results(docs).read_text()
    new, v4 = text.split("## Experiment `aha-new`")[1].split("## Experiment `v4`")  # by name
    assert "the goal (>= 1.5x" in v4 and "the fair target (>= 1.1x" in v4
    assert "the goal (>= 1.5x" not in new and "fair target" not in new
    assert "4/4 earned more cumulative reward than 8/0" in new  # the reading itself stays
    assert "Baseline: not described for this experiment yet." in new


def test_held_out_intervals_stay_inside_0_and_1(tmp_path):
    """Two seeds far apart gave a t-interval of 0.387 [-0.356, 1.130] (v3's 4/4+targeted); the
    interval over seeds is now taken on the logit scale."""
    docs = tmp_path / "docs"
    (docs / "evidence" / "t").mkdir(parents=True)
    for seed, p in ((0, 0.02), (1, 0.98)):
        c = _cell("8/0", seed, 10.0, pass_at_1=p)
        (docs / "evidence" / "t" / f"seed-{seed}-8-0.json").write_text(json.dumps(c))
    text = evidence_report.write_results(docs).read_text()
    row = next(ln for ln in text.splitlines() if ln.startswith("| 8/0 | 0,1 |"))
    low, high = (float(x) for x in row.split("|")[4].split("[")[1].split("]")[0].split(","))
    assert 0.0 <= low < 0.02 and 0.98 < high <= 1.0


def test_splits_with_no_seed_in_common_get_no_comparison_row(tmp_path):
    docs = tmp_path / "docs"
    (docs / "evidence" / "t").mkdir(parents=True)
    cells = [_cell("8/0", 1, 10.0), _cell("4/4", 0, 12.0), _cell("adaptive", 1, 11.0)]
    for c in cells:
        name = f"seed-{c['seed']}-{evidence.slug(c['split'])}.json"
        (docs / "evidence" / "t" / name).write_text(json.dumps(c))
    text = evidence_report.write_results(docs).read_text()
    assert "| adaptive - 8/0 | 1: +1.00 |" in text
    assert "4/4 - 8/0" not in text and "adaptive - 4/4" not in text and "| - |" not in text


def test_a_split_the_report_does_not_list_is_still_compared_and_plotted(tmp_path, monkeypatch):
    axes = pytest.importorskip("matplotlib.axes")
    docs = tmp_path / "docs"
    (docs / "evidence" / "t").mkdir(parents=True)
    odd = "4/4+targeted+no-negatives"
    assert odd not in evidence_report.ORDER
    cells = [_cell("8/0", 0, 10.0), _cell("4/4", 0, 12.0), _cell(odd, 0, 13.0)]
    for c in cells:
        name = f"seed-{c['seed']}-{evidence.slug(c['split'])}.json"
        (docs / "evidence" / "t" / name).write_text(json.dumps(c))
    a = evidence_report.analyse(cells)
    assert (odd, "8/0") in a["comparisons"] and (odd, "4/4") in a["comparisons"]
    text = evidence_report.write_results(docs).read_text()
    assert f"| {odd} | 0 |" in text
    assert f"{odd} - 8/0: one paired seed (+3.00)" in text
    assert f"{odd} - 4/4: one paired seed (+1.00)" in text
    plotted = []
    orig = axes.Axes.plot

    def spy(self, *args, label=None, **kw):
        plotted.append(label)
        return orig(self, *args, label=label, **kw)

    monkeypatch.setattr(axes.Axes, "plot", spy)
    evidence_report.write_results(docs)
    assert f"{odd} (1 seed(s))" in plotted


def _rounds_cell(split, seed, per_node):
    """Two nodes that each earn per_node[i] in round i: the swarm earns twice that."""
    c = _cell(split, seed, 2 * sum(per_node))
    c.update(rewards={"n-0": list(per_node), "n-1": list(per_node)}, rounds_done=len(per_node))
    return c


def test_the_gap_by_half_of_the_run(tmp_path):
    """5 rounds: the halves are rounds 1-2 and 4-5 (the middle one is left out, so a constant
    gap reads as constant); the values are per round."""
    docs = tmp_path / "docs"
    (docs / "evidence" / "t").mkdir(parents=True)
    cells = [
        _rounds_cell("8/0", 0, [0.1, 0.1, 0.1, 0.1, 0.1]),
        _rounds_cell("4/4", 0, [0.1, 0.2, 0.3, 0.4, 0.5]),  # swarm gap 0, .2, .4, .6, .8
        _rounds_cell("8/0", 1, [0.5, 0.5, 0.2, 0.2, 0.2]),
        _rounds_cell("4/4", 1, [0.6, 0.6, 0.2, 0.2, 0.1]),  # swarm gap .2, .2, 0, 0, -.2
    ]
    for c in cells:
        name = f"seed-{c['seed']}-{c['split'].replace('/', '-')}.json"
        (docs / "evidence" / "t" / name).write_text(json.dumps(c))
    text = evidence_report.write_results(docs).read_text()
    row = "| 4/4 - 8/0 | 0: rounds 1-2 +0.100, 4-5 +0.700; 1: rounds 1-2 +0.200, 4-5 -0.100 |"
    assert row in text
    # early (0.1 + 0.2) / 2, late (0.7 - 0.1) / 2
    assert (
        "4/4 - 8/0 per round (mean over 2 seed(s)): +0.150 in rounds 1-2, +0.300 in rounds 4-5: "
        "4/4 gained on 8/0 by 0.150 a round as training went on." in text
    )


@pytest.mark.parametrize(
    "a, b, expect",
    [
        ([0.2] * 5, [0.1] * 5, (2, 5, 0.2, 0.2)),  # a constant gap: the same in both halves
        ([0.1, 0.1, 0.1, 0.1], [0.1, 0.2, 0.3, 0.4], (2, 4, -0.1, -0.5)),  # a growing deficit
        ([0.3, 0.3, 0.3], [0.1, 0.1], (1, 2, 0.4, 0.4)),  # only the rounds both ran
        ([0.3], [0.1], None),  # one round has no halves
        ([], [], None),
    ],
)
def test_halves_by_hand(a, b, expect):
    got = evidence_report.halves(_rounds_cell("4/4", 0, a), _rounds_cell("8/0", 0, b))
    if expect is None:
        assert got is None
    else:
        assert got[:2] == expect[:2] and got[2:] == pytest.approx(expect[2:])


def test_the_reading_of_halves_names_who_gained():
    def reading(per_seed):
        c = {"interval": None, "diffs": {}, "ratio_interval": None, "halves": per_seed}
        a = {"comparisons": {("4/4", "8/0"): c}}
        a["splits"] = {}
        return [t for t in evidence_report.reading(a) if "per round" in t]

    (deficit,) = reading({0: (2, 4, -0.2, -1.0)})
    assert (
        "-0.200 in rounds 1-2, -1.000 in rounds 3-4: 8/0 gained on 4/4 by 0.800 a round" in deficit
    )
    (same,) = reading({0: (2, 5, 0.2, 0.2)})
    assert "neither gained on the other" in same
    (mixed,) = reading({0: (6, 12, 0.1, 0.3), 1: (2, 4, 0.1, 0.1)})
    assert "in the first half" in mixed and "in the second half" in mixed
    assert reading({}) == []


@pytest.mark.parametrize(
    "a, b, expect",
    [
        ([0.6] * 12, [0.5] * 12, 1.2),  # every round counts
        ([0.6] * 11 + [9.0] * 4, [0.5] * 11 + [0.0] * 4, (0.6 * 11 + 9) / (0.5 * 11)),  # 12 only
        ([0.6] * 11, [0.5] * 12, None),  # a cell short of a lesson has no lesson ratio
        ([0.6] * 12, [0.0] * 12, None),  # nothing earned: no ratio
    ],
)
def test_a_lesson_s_ratio_by_hand(a, b, expect):
    got = evidence_report.lesson_ratio(_rounds_cell("4/4", 0, a), _rounds_cell("8/0", 0, b))
    assert got == (None if expect is None else pytest.approx(expect))


def _lesson_docs(tmp_path, ratios, heldout):
    """8/0 earns 0.5 a node-round; 4/4+targeted ratios[seed] times that over the first 12
    rounds (then the same), and held-out pass@1 heldout[seed] against 8/0's 0.5."""
    docs = tmp_path / "docs"
    (docs / "evidence" / "main").mkdir(parents=True)
    for seed, r in enumerate(ratios):
        ref = _rounds_cell("8/0", seed, [0.5] * 16)
        ref["heldout"]["pass_at_1"] = 0.5
        pol = _rounds_cell("4/4+targeted", seed, [0.5 * r] * 12 + [0.5] * 4)
        pol["heldout"]["pass_at_1"] = heldout[seed]
        for c in (ref, pol):
            name = f"seed-{seed}-{evidence.slug(c['split'])}.json"
            (docs / "evidence" / "main" / name).write_text(json.dumps(c))
    return evidence_report.write_results(docs).read_text()


def test_the_report_says_whether_a_lesson_meets_the_fair_target(tmp_path):
    """>= 1.1x 8/0 over the first 12 rounds with the paired interval above 1x, and held-out
    pass@1 not below 8/0's: met only when all three hold."""
    text = _lesson_docs(tmp_path / "a", [1.15, 1.2, 1.17], [0.52, 0.5, 0.49])
    assert "| 4/4+targeted : 8/0 | 0: 1.150, 1: 1.200, 2: 1.170 | 1.173 [" in text
    assert "0: +0.020, 1: +0.000, 2: -0.010 |" in text
    assert "4/4+targeted : 8/0 over rounds 1-12 (one lesson)" in text
    assert "held-out not below 8/0's) is met." in text
    # the same ratios with held-out below 8/0's on average: not met
    text = _lesson_docs(tmp_path / "b", [1.15, 1.2, 1.17], [0.45, 0.5, 0.49])
    assert "held-out not below 8/0's) is not met." in text
    # an interval reaching below 1x: not met
    text = _lesson_docs(tmp_path / "c", [0.9, 1.5, 1.0], [0.6, 0.6, 0.6])
    assert "held-out not below 8/0's) is not met." in text
    # one seed has no interval: not met, whatever its ratio
    text = _lesson_docs(tmp_path / "d", [1.5], [0.6])
    assert "1.500 (one seed: no interval)" in text and "is not met." in text


def test_the_report_counts_targeted_picks_and_names_a_ceiling(tmp_path):
    """A +targeted split that never picked a wanted group is said to have run as its uniform
    split; 8/0 sitting at its top reward gives the bound any split could reach."""
    docs = tmp_path / "docs"
    (docs / "evidence" / "t").mkdir(parents=True)
    solo = _rounds_cell("8/0", 0, [0.1, 0.2, 0.3, 0.4] + [0.5] * 4)  # at 0.5 from round 4
    never = _rounds_cell("4/4+targeted", 0, [0.1, 0.4, 0.5, 0.4])
    never.update(
        external_targeted={"n-0": [0] * 4, "n-1": [0] * 4},
        external_used={"n-0": [4] * 4, "n-1": [3] * 4},
    )
    picked = _rounds_cell("adaptive+targeted", 0, [0.1, 0.2, 0.3, 0.4])
    picked.update(
        external_targeted={"n-0": [1, 0, 2, 0], "n-1": [0] * 4},
        external_used={"n-0": [2] * 4, "n-1": [2] * 4},
        external_target={"n-0": [2] * 4, "n-1": [2] * 4},
    )
    for c in (solo, never, picked):
        name = f"seed-{c['seed']}-{evidence.slug(c['split'])}.json"
        (docs / "evidence" / "t" / name).write_text(json.dumps(c))
    text = evidence_report.write_results(docs).read_text()
    assert "4/4+targeted: 0 of the 28 peer groups trained were picked for being wanted" in text
    assert "adaptive+targeted: 3 of the 16 peer groups trained were picked" in text
    assert "4/4+targeted never picked a peer group for being wanted" in text
    assert "adaptive+targeted never picked" not in text
    # 8/0 earned 2 x 3.0 = 6.0; at 0.5 from round 1: 2 x (0.1 + 7 x 0.5) = 7.2, 1.20x
    assert "no node's mean reward in a round went above 0.500" in text
    assert "would have earned 1.20x 8/0's cumulative reward" in text

    def top(per_round):
        return evidence_report.ceiling({"8/0": {0: _rounds_cell("8/0", 0, per_round)}})

    assert top([0.1, 0.2, 0.3, 0.4, 0.5, 0.5, 0.48, 0.5])["top"] == 0.5  # flat at the top
    assert top([0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5]) is None  # still climbing to its top
    assert top([0.1, 0.2, 0.3, 0.4, 0.5, 0.2, 0.3, 0.3]) is None  # fell back below its top
    assert top([0.1, 0.3, 0.5, 0.5]) is None  # too few rounds to tell


def test_the_report_says_what_a_node_cpu_minute_bought(tmp_path):
    docs = tmp_path / "docs"
    (docs / "evidence" / "t").mkdir(parents=True)
    solo = _rounds_cell("8/0", 0, [0.1, 0.3])  # 2 nodes x 2 rounds: reward 0.8 in all
    solo["round_cpu_seconds"] = {"n-0": [10.0, 20.0], "n-1": [30.0, 20.0]}  # 80 s
    shared = _rounds_cell("4/4", 0, [0.2, 0.4])
    shared["round_cpu_seconds"] = {"n-0": [10.0, None], "n-1": [10.0, 10.0]}  # not every round
    old = _rounds_cell("8/0", 1, [0.2, 0.2])  # a summary from before CPU seconds were recorded
    for c in (solo, shared, old):
        name = f"seed-{c['seed']}-{evidence.slug(c['split'])}.json"
        (docs / "evidence" / "t" / name).write_text(json.dumps(c))
    text = evidence_report.write_results(docs).read_text()
    # 0.8 reward over 4 node-rounds and 80 CPU seconds: 0.2 a round, 20 s a round, 0.6 a minute
    assert "| 8/0 | 1 of 2 | 0.200 | 20.0 | 0.600 |" in text
    assert "| 4/4 | " not in text.split("What a node's CPU time bought")[1].split("\n\n")[1]


def test_an_experiment_with_only_the_base_model_says_no_trained_cell_finished(tmp_path):
    docs = tmp_path / "docs"
    (docs / "evidence" / "t").mkdir(parents=True)
    base = {"label": "t", "seed": None, "split": "base"}
    base["heldout"] = {"pass_at_1": 0.25, "se": 0.01, "completions": 1112, "per_node": {}}
    (docs / "evidence" / "t" / "base.json").write_text(json.dumps(base))
    text = evidence_report.write_results(docs).read_text()
    assert "No trained cell has finished yet." in text and "| split | seeds |" not in text
    assert "Base model, held-out pass@1: 0.250" in text


def test_no_summaries_says_not_run(tmp_path):
    text = evidence_report.write_results(tmp_path).read_text()
    assert "has not been run" in text and "| split |" not in text


@pytest.mark.slow
def test_pipeline_end_to_end_on_the_tiny_model_skips_finished_cells_and_commits(
    tiny_qwen, tmp_path
):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    for k, v in (("user.email", "t@t"), ("user.name", "t")):
        subprocess.run(["git", "-C", str(tmp_path), "config", k, v], check=True)
    argv = [*evidence_argv(tiny_qwen, tmp_path, "0,1", "8/0,4/4,adaptive"), "--commit"]
    assert evidence.main(argv) == 0
    done = sorted(p.name for p in (tmp_path / "docs/evidence/main").glob("*.json"))
    assert done == sorted(
        ["base.json"] + [f"seed-{s}-{x}.json" for s in (0, 1) for x in ("8-0", "4-4", "adaptive")]
    )
    log = subprocess.run(
        ["git", "-C", str(tmp_path), "log", "--format=%s"], capture_output=True, text=True
    ).stdout.splitlines()
    assert len(log) == 7 and "evidence main: seed-1-adaptive finished" in log
    ad = json.loads((tmp_path / "docs/evidence/main/seed-0-adaptive.json").read_text())
    assert ad["config"]["mix"] == "adaptive" and ad["rounds_done"] == 2
    assert ad["external_zeroed"] == {"sweep-0": [0, 0], "sweep-1": [0, 0]}  # negatives kept
    assert all(x > 0 for v in ad["round_cpu_seconds"].values() for x in v)  # each round's cost
    assert [len(v) for v in ad["round_seconds"].values()] == [2, 2]
    assert all(j in (0, 2, 4, 6) for js in ad["external_target"].values() for j in js)
    assert ad["heldout"]["completions"] == 4 and ad["code"]
    assert ad["config"]["dtype"] == "float32"  # pinned, not the machine's auto choice
    text = (tmp_path / "docs/results.md").read_text()
    assert "| 8/0 | 0,1 |" in text and "| adaptive | 0,1 |" in text and "| 4/4 - 8/0 |" in text
    node_cfg = json.loads((tmp_path / "runs/main/seed-1/4-4/sweep-0/config.json").read_text())
    assert (node_cfg["seed"], node_cfg["local_samples"], node_cfg["external_samples"]) == (1, 4, 4)
    assert node_cfg["dtype"] == "float32"
    # a re-run skips every finished cell; a removed summary is made again from the kept run
    kept = (tmp_path / "docs/evidence/main/seed-0-8-0.json").read_text()
    first = json.loads((tmp_path / "docs/evidence/main/seed-1-4-4.json").read_text())
    metrics = tmp_path / "runs/main/seed-1/4-4/sweep-1/metrics.jsonl"
    trained = metrics.read_text()
    (tmp_path / "docs/evidence/main/seed-1-4-4.json").unlink()
    assert evidence.main(argv) == 0
    assert (tmp_path / "docs/evidence/main/seed-0-8-0.json").read_text() == kept
    again = json.loads((tmp_path / "docs/evidence/main/seed-1-4-4.json").read_text())
    assert metrics.read_text() == trained  # resumed at its end: no round trained again
    assert again["rewards"] == first["rewards"] and again["heldout"] == first["heldout"]
    # its sim minutes are this run's, which trained nothing, and its table says so
    assert (first["sim_first_round"], again["sim_first_round"]) == (0, 2)
    md = (tmp_path / "docs/evidence/main/seed-1-4-4.md").read_text()
    assert "no round trained in this run" in md
    assert "earlier runs" not in (tmp_path / "docs/evidence/main/seed-1-8-0.md").read_text()
    log = subprocess.run(
        ["git", "-C", str(tmp_path), "log", "--format=%s"], capture_output=True, text=True
    ).stdout.splitlines()
    assert len(log) == 8 and log[0] == "evidence main: seed-1-4-4 finished"


@pytest.mark.parametrize(
    "first, done, says",
    [
        (0, 48, ""),
        (30, 48, " (rounds 30-47: earlier runs trained the rest)"),
        (48, 48, " (no round trained in this run: earlier runs did them all)"),
    ],
)
def test_a_resumed_cell_says_which_rounds_its_sim_minutes_cover(first, done, says):
    assert evidence._resumed({"sim_first_round": first, "rounds_done": done}) == says
    assert evidence._resumed({"rounds_done": done}) == ""  # summaries written before it existed


def test_the_report_says_what_task_the_cells_ran(tmp_path):
    docs = tmp_path / "docs"
    (docs / "evidence" / "t").mkdir(parents=True)
    config = {
        "domains": {"basic_arithmetic": 1.0, "chain_sum": 1.0},
        "domain_configs": {"basic_arithmetic": {"max_digits": 1, "operators": ["+", "-"]}},
        "lenient": True,
        "lenient_credit": 0.5,
        "format_example": True,
    }
    for split in ("8/0", "4/4"):
        (docs / "evidence" / "t" / f"seed-0-{evidence.slug(split)}.json").write_text(
            json.dumps({**_cell(split, 0, 10.0), "config": config})
        )
    text = evidence_report.write_results(docs).read_text()
    assert (
        "Task: basic_arithmetic (max_digits 1, operators + -); chain_sum. A right answer "
        "earns 1.0 in <answer> tags, 0.5 untagged. Each prompt shows one worked example"
    ) in text
    config.update(lenient=False, format_example=False)  # older summaries: no such keys at all
    assert evidence_report.task_line(config) == (
        "Task: basic_arithmetic (max_digits 1, operators + -); chain_sum."
    )


def test_a_lane_skips_the_cells_whose_summary_exists(tmp_path, monkeypatch, capsys):
    """A lane's list names cells a checkout may hold already (committed summaries): those are
    skipped, as the plan's are, not run again from scratch in a fresh checkout."""
    from types import SimpleNamespace

    args = evidence.parser().parse_args(
        ["--label", "x", "--docs", str(tmp_path), "--lane", json.dumps([[0, "8/0"], [1, "8/0"]])]
    )
    done = evidence.summary_path(tmp_path, "x", 0, "8/0")
    done.parent.mkdir(parents=True)
    done.write_text("{}")
    ran = []
    monkeypatch.setattr(
        evidence, "run_cell", lambda a, seed, split: ran.append((seed, split)) or {}
    )
    monkeypatch.setattr(evidence, "write_summary", lambda *a, **k: [])
    torch = SimpleNamespace(set_num_threads=lambda n: None)  # the lane sets its threads
    monkeypatch.setitem(sys.modules, "torch", torch)
    evidence.lane_worker(args)
    assert ran == [(1, "8/0")]
    assert "cell done before" in capsys.readouterr().out
