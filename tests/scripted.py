"""A scripted policy for tests above the backend: it answers "Calculate a + b." with a fixed
pattern of right and wrong tagged answers, so every reward and advantage is known in advance.
"""

import json
import re
from pathlib import Path

from task_configs import ONE_DIGIT_ADD

from sapo_edge.backends.base import Generation, Sample, StepStats
from sapo_edge.config import Config
from sapo_edge.trainer import Node


class ScriptedBackend:
    """Right answers for the first `right` completions of each group, wrong ones after."""

    name, device, dtype = "scripted", "cpu", "float32"

    def __init__(self, right: int = 1):
        self.right = right
        self.steps: list[list[Sample]] = []
        self.weights = 0.0

    def generate(self, prompts, n, *, max_new_tokens, temperature, top_p, seed, progress=None):
        for step in range(1, 6):  # five "decode steps", each reported like a real backend's
            if progress is not None:
                progress(step, step * n * len(prompts))
        out = []
        for messages in prompts:
            a, b = map(int, re.findall(r"\d+", messages[-1]["content"])[:2])
            out.append(
                [
                    Generation(f"<answer>{a + b + (i >= self.right)}</answer>", 5, True)
                    for i in range(n)
                ]
            )
        return out

    def train_step(self, samples, progress=None):
        if progress is not None:
            progress(0, 1)
        self.steps.append(list(samples))
        self.weights += 1
        return StepStats(0.0, len(samples), 5 * len(samples), 0.0, 1.0, 0.0)

    def logprobs(self, samples):
        return [[0.0] for _ in samples]

    def save(self, directory: Path) -> None:
        (directory / "weights.json").write_text(json.dumps(self.weights))

    def load(self, directory: Path) -> None:
        self.weights = json.loads((directory / "weights.json").read_text())

    def trainable_parameters(self) -> int:
        return 1

    def memory_report(self):
        return {"peak_rss_mb": 1.0}

    def close(self) -> None:
        pass


class Quiet:
    def __init__(self):
        self.reports, self.messages = [], []

    def on_round(self, r):
        self.reports.append(r)

    def on_message(self, node, text):
        self.messages.append(text)


def make_cfg(tmp_path: Path, **kw) -> Config:
    base = dict(
        model="scripted",
        domains={"basic_arithmetic": 1.0},
        domain_configs={"basic_arithmetic": ONE_DIGIT_ADD},
        questions_per_round=2,
        group_size=4,
        local_samples=2,
        external_samples=2,
        out_dir=str(tmp_path),
        checkpoint_every=0,
    )
    base.update(kw)
    return Config(**base)


def make_node(
    cfg: Config, name: str, transport, right: int = 1, tmp_path: Path | None = None
) -> Node:
    return Node(
        cfg,
        ScriptedBackend(right),
        transport,
        node_id=f"id-{name}",
        name=name,
        model_id="scripted",
        out_dir=Path(cfg.out_dir) / name,
        callback=Quiet(),
    )
