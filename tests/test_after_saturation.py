"""experiments/after_saturation.py on the tiny model: both arms start from a finished 8/0 cell's
newest checkpoints, run the added rounds with their own mix, write a summary per arm, and a
larger --rounds goes on from where an arm stopped."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

import after_saturation  # noqa: E402
import evidence  # noqa: E402
from tiny_sweep import evidence_argv  # noqa: E402


@pytest.mark.slow
@pytest.mark.long  # `make test-long`: an end-to-end script run of 15 s or more
def test_arms_start_from_the_finished_cell_and_go_on(tiny_qwen, tmp_path):
    assert evidence.main(evidence_argv(tiny_qwen, tmp_path, "1", "8/0")) == 0
    source = tmp_path / "runs/main/seed-1/8-0"
    argv = ["--out", str(tmp_path / "runs"), "--docs", str(tmp_path / "docs")]
    argv += ["--from", str(source), "--heldout-per-node", "2"]
    after_saturation.main([*argv, "--rounds", "1"])
    after_saturation.main([*argv, "--rounds", "2"])
    for arm, negatives in (("4-4", True), ("4-4-no-negatives", False)):
        one = json.loads((tmp_path / f"docs/after-saturation/{arm}-1-rounds.json").read_text())
        two = json.loads((tmp_path / f"docs/after-saturation/{arm}-2-rounds.json").read_text())
        assert one["start_round"] == two["start_round"] == 2
        assert all(len(r) == 1 for r in one["rewards"].values())
        assert all(len(r) == 2 for r in two["rewards"].values())
        assert [r[0] for r in two["rewards"].values()] == [r[0] for r in one["rewards"].values()]
        assert two["config"]["external_negatives"] is negatives
        assert two["config"]["seed"] == 1  # the cell's settings, not sweep.toml's
        assert two["heldout"]["completions"] == 4 and one["heldout"]["completions"] == 4
        node = tmp_path / "runs/after-saturation" / arm / "sweep-0"
        assert json.loads((node / "config.json").read_text())["external_samples"] == 4
        rounds = [
            json.loads(ln)["round"] for ln in (node / "metrics.jsonl").read_text().splitlines()
        ]
        assert rounds == [0, 1, 2, 3]  # the cell's two, then the arm's
    assert not (source / "sweep-0/checkpoints/round-000003").exists()  # the cell is untouched
    # fewer rounds than an arm already ran: refused, not evaluated under the wrong round
    (tmp_path / "docs/after-saturation/4-4-1-rounds.json").unlink()
    with pytest.raises(SystemExit, match="1 arm"):
        after_saturation.main([*argv, "--rounds", "1", "--arms", "4-4"])
    log = (tmp_path / "runs/after-saturation/4-4.log").read_text()
    assert "--rounds is smaller than what this arm already ran" in log
