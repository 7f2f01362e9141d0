"""The Aha report (experiments/aha_report.py) from hand-made cells: the `Aha spread:` line, the
goal, the mechanism per unhinted node, the plot; issue 56's `Aha speed-up:` and `Second-order
spread:` lines and the +alone arm behind the second."""

import json
import sys
from pathlib import Path

import pytest

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


def _write(docs, cells, label="aha"):
    (docs / "evidence" / label).mkdir(parents=True)
    for c in cells:
        name = f"seed-{c['seed']}-{evidence.slug(c['split'])}.json"
        (docs / "evidence" / label / name).write_text(json.dumps(c))


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
    # 8/0 unhinted: 0, 2, 0 right of 20: empirical logits log(0.5/20.5) = -3.714 (twice) and
    # log(2.5/18.5) = -2.001: mean -3.143, sd 0.989, half 4.303 * 0.989 / sqrt(3) = 2.457 ->
    # expit(-5.600, -0.686) = [0.004, 0.335] (wider than the pooled 2 of 60's exact interval)
    # 4/4: 10, 12, 14 of 20. The hinted node: 8 of 10 on every seed: no spread over seeds, so
    # the pooled exact interval of 24 of 30 stands, [0.614, 0.923], not [0.800, 0.800]
    assert line.startswith(
        "Aha spread: unhinted nodes' held-out strict pass@1: 8/0 0.033 [0.004, 0.335]; "
        "4/4 0.600 [0.354, 0.801]. Hinted node: 8/0 0.800 [0.614, 0.923]; 4/4 0.800"
    )
    assert "| 8/0 | 1 | 2 of 20: 0.100 [0.012, 0.317] | 8 of 10: 0.800 [0.444, 0.975] |" in text
    assert "| 4/4 - 8/0 | 0: +0.500, 1: +0.500, 2: +0.700 |" in text  # paired, unhinted only
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
    shared = [_cell("4/4", s, u) for s, u in ((0, 0.7), (1, 0.8), (2, 0.7))]
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


def _half_at(h, rounds=6):
    """A node's tagged share per round, first at half in round h (from 1); None: never."""
    if h is None:
        return [0.1] * rounds
    return [0.0] * (h - 1) + [0.5] + [1.0] * (rounds - h)


def _speedup(split, seed, right, halves):
    c = _cell(split, seed, right)
    c["config"]["format_instruction"] = True
    c["tagged_share"] = {"s-0": [1.0] * 6, "s-1": _half_at(halves[0]), "s-2": _half_at(halves[1])}
    return c


def test_the_speed_up_line_from_stored_summaries(tmp_path):
    """Issue 56, item 1: for 8/0 then 4/4, the unhinted nodes' round to half tagged and their
    held-out strict pass@1, each mean [low, high] over seeds, and the seeds."""
    cells = [
        _speedup("8/0", s, u, h)
        for s, u, h in ((0, 0.0, (5, None)), (1, 0.1, (4, 6)), (2, 0.0, (6, None)))
    ]
    cells += [
        _speedup("4/4", s, u, h)
        for s, u, h in ((0, 0.5, (2, 3)), (1, 0.6, (2, 2)), (2, 0.7, (3, 3)))
    ]
    docs = tmp_path / "docs"
    _write(docs, cells, "aha-speedup")
    text = evidence_report.write_results(docs).read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("Aha speed-up:"))
    # 8/0 per seed (a node never at half counts as round 7): (5 + 7) / 2 = 6, (4 + 6) / 2 = 5,
    # (6 + 7) / 2 = 6.5: mean 5.83, sd 0.764, half 4.303 * 0.764 / sqrt(3) = 1.90 -> [3.94,
    # 7.73], cut at round 7. 4/4: 2.5, 2, 3: mean 2.5, sd 0.5, half 1.24 -> [1.26, 3.74]
    assert line.startswith(
        "Aha speed-up: unhinted nodes under 8/0 rounds to half tagged 5.8 [3.9, 7.0], held-out "
        "strict pass@1 0.033 [0.004, 0.335]; under 4/4 rounds to half tagged 2.5 [1.3, 3.7], "
        "held-out strict pass@1 0.600 [0.354, 0.801]. 3 seed(s) paired in both (8/0: 3, 4/4: 3). "
        "Never half tagged, counted as round 7: 8/0: 2 of 6 node-runs; 4/4: 0 of 6 node-runs."
    )
    assert "Goal (" not in text  # issue 45's goal was set for `aha` alone
    # the aha experiment (no instruction) has no speed-up line; under its own label, its goal
    for c in cells:
        c["config"]["format_instruction"] = False
    _write(docs, cells)
    text = evidence_report.write_results(docs).read_text()
    aha = text.split("## Experiment `aha`")[1].split("## Experiment")[0]
    assert "Aha speed-up:" not in aha and "Goal (unhinted nodes" in aha


def test_the_second_order_spread_line_and_what_the_nodes_had_when_the_source_stopped(tmp_path):
    """Issue 56, item 2: node 0 stops after round H; 4/4 goes on sharing, 4/4+alone trains each
    node alone: both arms' held-out strict pass@1 and sharing - alone paired by seed."""
    cells = []
    for split, rights in (("4/4", (0.6, 0.7, 0.5)), ("4/4+alone", (0.3, 0.5, 0.4))):
        for seed, u in enumerate(rights):
            c = _cell(split, seed, u)
            c["config"]["hint_rounds"] = 2
            cells.append(c)
    docs = tmp_path / "docs"
    _write(docs, cells)
    text = evidence_report.write_results(docs).read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("Second-order spread:"))
    # differences 0.3, 0.2, 0.1: mean 0.2, sd 0.1, half 4.303 * 0.1 / sqrt(3) = 0.248
    assert line.startswith(
        "Second-order spread: unhinted nodes' held-out strict pass@1 after round 3 (node 0 "
        "stopped after round 2): sharing (4/4) 0.600 ["
    )
    assert "; alone (4/4+alone) 0.400 [" in line
    assert (
        "sharing - alone 0.200 [-0.048, 0.448] (per seed 0: +0.300, 1: +0.200, 2: +0.100); " in line
    )
    assert "3 seed(s) paired." in line
    # s-1 of 4/4 seed 0: half tagged in round 2 (H), no strict reward by then, nothing trained
    # from anyone after H, all tagged at the end, strict 0, 0, 0.5 over the last rounds
    assert "| 4/4 | 0 | s-1 | 0.50 | 0.000 | 0 | 0 | 1.00 | 0.167 | 0.600 |" in text
    assert "| 4/4 | 0 | s-0 |" not in text  # the hinted node has no row


def test_the_alone_arm_runs_shared_rounds_then_the_rest_alone(tmp_path):
    import alone

    args = evidence.parser().parse_args(["--out", str(tmp_path), "--hint-rounds", "8"])
    args.config = ROOT / "experiments" / "aha.toml"
    cfg = evidence.cell_config(args, 0, evidence.check_split("4/4+alone"))
    assert cfg.local_samples == 4 and cfg.external_samples == 4 and cfg.rounds == 24
    shared, solo = alone.phases(cfg, evidence.parse_split("4/4+alone")[1])
    assert (shared.rounds, shared.local_samples, shared.external_samples) == (8, 4, 4)
    assert (solo.rounds, solo.local_samples, solo.external_samples, solo.resume) == (24, 8, 0, True)
    assert alone.phases(cfg, evidence.parse_split("4/4")[1]) == [cfg]
    args.hint_rounds = 0
    with pytest.raises(SystemExit, match="give --hint-rounds"):
        alone.phases(evidence.cell_config(args, 0, "4/4+alone"), {alone.ALONE})
    argv = ["--config", str(args.config), "--splits", "4/4+alone", "--out", str(tmp_path)]
    with pytest.raises(SystemExit, match="give --hint-rounds"):  # before any cell starts
        evidence.main([*argv, "--docs", str(tmp_path / "docs"), "--single-seed-splits", ""])
    assert not (tmp_path / "docs").exists()


@pytest.mark.slow
def test_the_alone_arm_end_to_end_on_the_tiny_model(tiny_qwen, tmp_path):
    """4/4 and 4/4+alone, node 0 hinted and stopping after round 1 of 3: both arms train the
    same first round; from round 2 the alone arm's node trains no peer group, the shared one
    does; the report's `Second-order spread:` line pairs them."""
    from tiny_sweep import evidence_argv

    argv = evidence_argv(tiny_qwen, tmp_path, "0", "4/4,4/4+alone")
    config = Path(argv[argv.index("--config") + 1])
    config.write_text(config.read_text().replace("seed = 0", "seed = 0\nhinted_nodes = [0]"))
    assert evidence.main([*argv, "--rounds", "3", "--hint-rounds", "1"]) == 0
    shared, alone = (
        json.loads((tmp_path / f"docs/evidence/main/seed-0-{x}.json").read_text())
        for x in ("4-4", "4-4-alone")
    )
    assert alone["external_target"]["sweep-1"][1:] == [0, 0]  # alone from round 2
    assert shared["external_target"]["sweep-1"] == [4, 4, 4]
    assert alone["rewards"]["sweep-1"][0] == shared["rewards"]["sweep-1"][0]  # one first round
    assert len(alone["rewards"]["sweep-0"]) == 1 and len(alone["rewards"]["sweep-1"]) == 3
    text = (tmp_path / "docs/results.md").read_text()
    assert "Second-order spread: unhinted nodes' held-out strict pass@1 after round 3 " in text


def test_a_cells_summary_keeps_every_setting_the_reports_read() -> None:
    """The reports read a cell's settings from its summary's `config`; one they read that the
    summary did not keep (format_instruction) silently left the `Aha speed-up:` line out of the
    report of real cells (the synthetic summaries of the tests above set it by hand)."""
    import re

    read = set()
    for name in ("aha_lines.py", "aha_report.py", "prank_report.py", "evidence_report.py"):
        text = (ROOT / "experiments" / name).read_text(encoding="utf-8")
        read |= set(re.findall(r'\["config"\]\.get\("([a-z_]+)"', text))
    assert {"format_instruction", "hinted_nodes", "hint_rounds"} <= read  # the scan sees them
    assert read <= set(evidence.SUMMARY_CONFIG_KEYS), read - set(evidence.SUMMARY_CONFIG_KEYS)
