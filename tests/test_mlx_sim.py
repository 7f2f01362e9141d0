"""MLX above the backend: a torch node and an MLX node in one sim, and kill/resume of an MLX run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mlx.core", reason="mlx is not installed (pip install 'sapo-edge[mlx]')")
pytest.importorskip("mlx_lm", reason="mlx-lm is not installed (pip install 'sapo-edge[mlx]')")

from scripted import Quiet, ScriptedBackend  # noqa: E402
from task_configs import ONE_DIGIT_ADD  # noqa: E402
from test_sim import FAST  # noqa: E402

from sapo_edge.backends.base import Sample  # noqa: E402
from sapo_edge.cli import main  # noqa: E402
from sapo_edge.config.settings import Config  # noqa: E402
from sapo_edge.run.build import build_nodes  # noqa: E402
from sapo_edge.swarm.transport import InProcessHub  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


class ScriptedGenerations:
    """A real backend whose rollouts are scripted (1 right, the rest wrong: rewards differ),
    their ids those of the real tokenizer, as if the model had sampled them."""

    def __init__(self, real):
        self.real, self.script = real, ScriptedBackend(right=1)

    def generate(self, *args, **kw):
        return [
            [
                self.real.encode_completion(
                    g.text, finished=g.finished, max_new_tokens=kw["max_new_tokens"]
                )
                for g in group
            ]
            for group in self.script.generate(*args, **kw)
        ]

    def __getattr__(self, name):
        return getattr(self.real, name)


def _metrics(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_torch_node_and_mlx_node_exchange_rollouts_and_both_train(tiny_qwen, tmp_path):
    cfg = Config(
        model=str(tiny_qwen),
        node_backends=["torch", "mlx"],
        domains={"basic_arithmetic": 1.0},
        domain_configs={"basic_arithmetic": ONE_DIGIT_ADD},
        questions_per_round=2,
        group_size=3,
        max_new_tokens=24,  # room for the scripted answers in the real tokenizer's tokens
        local_samples=1,
        external_samples=1,
        lora_r=4,
        learning_rate=1e-3,
        out_dir=str(tmp_path),
    )
    nodes = build_nodes(cfg, ["mix-0", "mix-1"], InProcessHub().connect, Quiet(), lambda m: None)
    assert [n.backend.name for n in nodes] == ["torch", "mlx"]
    answer = nodes[0].backend.encode_completion(
        "<answer>5</answer>", finished=True, max_new_tokens=24
    )
    probe = [Sample([{"role": "user", "content": "Calculate 2 + 3."}], answer, 1.0)]
    before = [n.backend.logprobs(probe)[0] for n in nodes]
    for n in nodes:
        n.backend = ScriptedGenerations(n.backend)
    reports = {n.name: [] for n in nodes}
    for _ in range(2):
        for n in nodes:
            reports[n.name].append(n.run_round())
    t, m = reports["mix-0"], reports["mix-1"]
    assert m[0].received == 2 and t[1].received == 2  # each got the other's round-0 groups
    assert m[0].external_from and t[1].external_from  # ...and trained on them
    assert all(r.train_tokens > 0 for r in t + m)
    for n, old in zip(nodes, before, strict=True):
        assert n.backend.logprobs(probe)[0] != pytest.approx(old, abs=1e-6)
        n.backend.close()


@pytest.mark.slow
def test_cli_sim_with_node_backends_torch_and_mlx(tiny_qwen, tmp_path, capsys):
    out = tmp_path / "sim"
    args = ["sim", "--model", str(tiny_qwen), "--nodes", "2", "--rounds", "2"]
    rc = main([*args, "--node-backends", "torch,mlx", "--out-dir", str(out), *FAST])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "node-0: backend torch" in printed and "node-1: backend mlx" in printed
    m0, m1 = _metrics(out / "node-0" / "metrics.jsonl"), _metrics(out / "node-1" / "metrics.jsonl")
    assert [m["round"] for m in m1] == [0, 1] and m1[0]["received"] == 2 and m0[1]["received"] == 2
    assert list((out / "node-1" / "checkpoints").glob("round-*/optimizer.safetensors"))


@pytest.mark.slow
def test_mlx_run_killed_mid_run_resumes_from_its_last_checkpoint(tiny_qwen, tmp_path, capsys):
    out = tmp_path / "run"
    common = ["run", "--headless", "--backend", "mlx", "--model", str(tiny_qwen)]
    common += ["--out-dir", str(out), "--name", "solo", *FAST]
    code = "import sys; from sapo_edge.cli import main; sys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *common, "--rounds", "30", "--checkpoint-every", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    seen = []
    for line in proc.stdout:  # a round-2 line means the checkpoint after round 1 is complete
        seen.append(line)
        if "solo round    3" in line:
            proc.kill()
            break
    proc.wait(timeout=60)
    proc.stdout.close()
    assert any("backend: mlx" in s for s in seen), "".join(seen)
    assert proc.returncode != 0, "the run finished before it could be killed"
    assert main([*common, "--rounds", "6", "--resume"]) == 0
    printed = capsys.readouterr().out
    resumed = [s for s in printed.splitlines() if "resumed from round-" in s]
    assert resumed, printed
    next_round = int(resumed[0].rsplit(" ", 1)[1])
    assert next_round >= 2
    rounds = [m["round"] for m in _metrics(out / "solo" / "metrics.jsonl")]
    assert rounds == list(range(6))  # rounds after the checkpoint were dropped and run again
