"""Smoke runs of the benchmark (bench/vs_trl.py) and the sweep (experiments/) on the tiny model.

The real runs take minutes to an hour on SmolLM2-135M; these check that the scripts run end to
end and write what the docs quote. TRL is not installed in CI, so the benchmark runs --no-trl.
"""

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.slow, pytest.mark.long]  # `make test-long`


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def test_benchmark_smoke_writes_the_tables(tiny_qwen, tmp_path):
    out = tmp_path / "benchmarks.md"
    _run(
        [
            str(ROOT / "bench/vs_trl.py"),
            "--model",
            str(tiny_qwen),
            "--smoke",
            "--rounds",
            "1",
            "--no-trl",
            "--out",
            str(out),
            "--logs",
            str(tmp_path / "logs"),
        ],
        tmp_path,
    )
    text = out.read_text()
    assert "| metric | sapo-edge float32 | sapo-edge bfloat16 |" in text
    assert "| seconds per round |" in text
    assert "Completions trained by sapo-edge per measured round: sapo-edge float32 " in text
    # every column says how many groups had something to train on (one measured round each)
    assert re.search(r"\| groups with a non-zero advantage \(of 2 per round\) \| \d \| \d \|", text)
    assert "Task: one-digit addition" in text
    for column in ("float32", "bfloat16"):  # generation's GEMM floor was measured in both
        # (the train step's only when some completion had a non-zero advantage)
        assert re.search(rf"\| sapo-edge {column} \| generation \|.*\*\*[0-9.]+x\*\* \|", text)
    rows = [ln for ln in text.splitlines() if ln.startswith("| 2 | 8 |")]
    assert len(rows) == 2  # the smoke scaling table: 0 and 4 external groups
    assert rows[1].split("|")[3].strip() == "4"


def test_benchmark_qwen_shape_smoke_trains_every_row_with_floors(tiny_qwen, tmp_path):
    """--model qwen2.5-0.5b-shape: a random model at Qwen's vocabulary (2 layers under --smoke),
    stand-in rewards so that every completion trains, both floors measured; the model is built
    once in LOGS and reused by the next run."""
    out, logs = tmp_path / "qwen.md", tmp_path / "logs"
    args = [str(ROOT / "bench/vs_trl.py"), "--model", "qwen2.5-0.5b-shape", "--smoke"]
    args += ["--rounds", "1", "--no-trl", "--columns", "sapo", "--tokenizer", str(tiny_qwen)]
    _run([*args, "--out", str(out), "--logs", str(logs)], tmp_path)
    text = out.read_text()
    assert "Model: Qwen2.5-0.5B-shaped, random weights" in text
    assert "Stand-in rewards" in text
    assert "sapo-edge float32 4 (of 4)" in text  # every completion trained
    for phase in ("train step", "generation"):
        assert re.search(rf"\| sapo-edge float32 \| {phase} \|.*\*\*[0-9.]+x\*\* \|", text)
    config = json.loads((logs / "qwen2.5-0.5b-shape-smoke" / "config.json").read_text())
    assert config["vocab_size"] == 151936 and config["tie_word_embeddings"] is True
    assert config["model_type"] == "qwen2" and config["num_key_value_heads"] == 1
    assert "## Scaling" not in text


@pytest.mark.skipif(
    not os.access("/proc/self/clear_refs", os.W_OK), reason="needs Linux's /proc/self/clear_refs"
)
def test_rss_phases_smoke_reports_each_phase_peak(tiny_qwen, tmp_path):
    args = [str(ROOT / "bench/rss_phases.py"), "--model", str(tiny_qwen), "--smoke"]
    out = _run([*args, "--rounds", "2", "--trim"], tmp_path).stdout
    phases = re.findall(r"^round (\d) (generation|step|trimmed)[^:]*: (\{.*\})$", out, re.M)
    assert [(r, p) for r, p, _ in phases] == [
        (r, p) for r in "01" for p in ("generation", "trimmed", "step", "trimmed")
    ], out
    for _, _, mb in phases:
        mb = ast.literal_eval(mb)  # {'VmHWM': 1234, 'VmRSS': 1200}
        assert 50 < mb["VmRSS"] <= mb["VmHWM"] < 24_000
    assert re.search(r"round 1 step [0-9.]+ s, \d+ rows, \d+ tokens", out)
    merged = _run([*args, "--rounds", "1", "--merged", "--micro-batch", "2"], tmp_path).stdout
    assert "round 0 step" in merged


def test_step_memory_smoke_measures_both_mlps(tiny_qwen, tmp_path):
    args = [str(ROOT / "bench/step_memory.py"), "--model", str(tiny_qwen)]
    out = _run([*args, "--rows", "2", "--tokens", "8", "--pairs", "1"], tmp_path).stdout
    runs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [r["mode"] for r in runs] == ["gated", "plain"], out
    assert all(r["rest_mb"] > 50 and r["above_rest_mb"] >= 0 and r["step_s"] > 0 for r in runs)
    assert re.search(r"^\| gated \| [\d,]+ \| [\d.]+ \| 1 \|$", out, re.M), out


def test_sweep_smoke_runs_every_split_and_reports(tiny_qwen, tmp_path):
    cfg = (ROOT / "experiments/sweep.toml").read_text()
    cfg = cfg.replace('model = "smollm2-135m"', f'model = "{tiny_qwen}"')
    for key, value in (("rounds", 2), ("max_new_tokens", 8), ("nodes", 2)):
        cfg = "\n".join(
            f"{key} = {value}" if ln.startswith(f"{key} =") else ln for ln in cfg.splitlines()
        )
    (tmp_path / "tiny.toml").write_text(cfg)
    _run(
        [
            str(ROOT / "experiments/sweep.py"),
            "--config",
            "tiny.toml",
            "--out",
            "out",
            "--eval-questions",
            "2",
            "--docs",
            "docs",
        ],
        tmp_path,
    )
    data = json.loads((tmp_path / "docs/sweep/summary.json").read_text())
    assert list(data["splits"]) == ["8/0", "6/2", "4/4", "2/6"]
    for split in data["splits"].values():
        assert split["rounds"] == 2 and len(split["heldout_after"]) == 2
    assert data["base_pass_at_1"] is not None
    assert (tmp_path / "docs/sweep/reward_per_round.png").stat().st_size > 1000
    # each split ran with its own I/J and nothing else changed
    for split, (i, j) in {"8-0": (8, 0), "2-6": (2, 6)}.items():
        node_cfg = json.loads((tmp_path / f"out/{split}/sweep-1/config.json").read_text())
        assert (node_cfg["local_samples"], node_cfg["external_samples"]) == (i, j)
        assert node_cfg["rounds"] == 2 and node_cfg["seed"] == 0
