"""A few trials of the kill harness (bench/chaos_kill.py runs 100+): a real node process on the
tiny model is SIGKILLed inside generation, training and a checkpoint write, restarted with
--resume, and ends with the adapter of an uninterrupted run; a disk filling up during a
checkpoint write keeps the previous checkpoint and tells the user (root only: a tmpfs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import chaos_kill  # noqa: E402


def _harness(call: str, model: Path, work: Path) -> dict:
    """Run `chaos_kill.<call>` in a fresh interpreter with one OpenMP thread: the harness forks
    node processes from itself, and a fork of this pytest process, whose torch has already run
    multi-threaded ops, crashes in the child (SIGSEGV, seen on a clean CI clone)."""
    code = (
        (
            "import json, sys; sys.path[:0] = ['bench', 'tests']; from pathlib import Path; "
            f"import chaos_kill; r = chaos_kill.{call}; print('RESULT ' + json.dumps(r))"
        )
        .replace("MODEL", repr(str(model)))
        .replace("WORK", repr(str(work)))
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=240,
    )  # fmt: skip
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert p.returncode == 0 and lines, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    return json.loads(lines[-1].removeprefix("RESULT "))


def test_a_kill_before_the_first_checkpoint_leaves_no_round_recorded_twice(tmp_path):
    """Found by the harness: rounds recorded before a kill that came before any checkpoint
    were kept, so the resumed run recorded them twice."""
    from scripted import make_cfg, make_node

    from sapo_edge.rl.metrics import read_rewards
    from sapo_edge.swarm.transport import NullTransport

    node = make_node(make_cfg(tmp_path), "a", NullTransport())
    node.run_round()
    node.run_round()  # killed now: 2 rounds recorded, no checkpoint
    again = make_node(make_cfg(tmp_path, resume=True), "a", NullTransport())
    assert again.resume() is False and again.round == 0
    assert read_rewards(again.metrics_path) == []
    again.run_round()
    assert len(read_rewards(again.metrics_path)) == 1


@pytest.mark.slow
@pytest.mark.long  # `make test-long`; test_training_integrity.py resumes at every phase in-process
def test_killed_anywhere_a_node_resumes_to_the_uninterrupted_adapter(tiny_qwen, tmp_path):
    call = "run_kills(Path(MODEL), Path(WORK), trials=4, rounds=3, seed=1, log=lambda _m: None)"
    result = _harness(call, tiny_qwen, tmp_path)
    s = result["summary"]
    assert s["tried"] + s["not_killed"] == 4 and s["tried"] >= 3, result["trials"]
    assert s["survived"] == s["tried"], result["trials"]
    assert s["checkpoints_lost"] == 0 and s["max_rounds_lost"] <= 1
    assert s["same_adapter"] == 4


@pytest.mark.slow
def test_disk_full_during_a_checkpoint_keeps_the_previous_one_and_says_so(tiny_qwen, tmp_path):
    why = chaos_kill.can_mount()
    if why:
        pytest.skip(why)
    got = _harness("disk_full_trial(Path(MODEL), Path(WORK))", tiny_qwen, tmp_path)
    assert got["ok"], repr(got)
