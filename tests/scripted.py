"""A scripted policy for tests above the backend: it answers "Calculate a + b." with a fixed
pattern of right and wrong tagged answers, so every reward and advantage is known in advance.

It keeps the Backend contract the trainer relies on: one character is one token (id ord+1, the
end of turn is id 0), a completion that does not fit max_new_tokens is cut there and unfinished,
temperature near 0 is greedy (every completion of a group is the same), peer text is encoded
with encode_completion like a real backend, and "weights" are a digest of every step trained.
"""

import hashlib
import json
import re
from pathlib import Path

from task_configs import ONE_DIGIT_ADD

from sapo_edge.backends.base import Completion, StepStats
from sapo_edge.config.settings import Config
from sapo_edge.rl.trainer import Node

END = 0  # the scripted end-of-turn token
GREEDY = 0.05  # at or below this temperature the scripted policy always says its first answer


def encode(text: str) -> list[int]:
    return [ord(ch) + 1 for ch in text]


def decode(ids) -> str:
    return "".join(chr(i - 1) for i in ids)


def cut(ids: list[int], finished: bool, max_new_tokens: int) -> Completion:
    """A completion as the scripted model emits it (or a peer's text as it is trained here)."""
    if len(ids) > (max_new_tokens - 1 if finished else max_new_tokens):
        ids, finished = ids[:max_new_tokens], False
    return Completion(decode(ids), tuple(ids), END if finished else None)


class ScriptedBackend:
    """Right answers for the first `right` completions of each group, wrong ones after; a wrong
    answer comes after `ramble` words of reasoning (so a low max_new_tokens cuts it). Every
    generate() call is kept in `calls`."""

    name, device, dtype = "scripted", "cpu", "float32"

    def __init__(self, right: int = 1, ramble: int = 0):
        self.right, self.ramble = right, ramble
        self.steps: list[list] = []
        self.calls: list[dict] = []
        self.weights = ""
        self.configured: list[Config] = []
        self.untagged = False

    def generate(self, prompts, n, *, max_new_tokens, temperature, top_p, seed, progress=None):
        self.calls.append(
            dict(
                n=n,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                top_p=top_p,
                seed=seed,
                prompts=[list(m) for m in prompts],
            )
        )
        for step in range(1, 6):  # five "decode steps", each reported like a real backend's
            if progress is not None:
                progress(step, step * n * len(prompts))
        out = []
        for messages in prompts:
            a, b = map(int, re.findall(r"\d+", messages[-1]["content"])[:2])
            group = []
            for i in range(n):
                wrong = (0 if temperature <= GREEDY else i) >= self.right
                text = "so " * (self.ramble * wrong) + f"<answer>{a + b + wrong}</answer>"
                if self.untagged:  # the answer as a bare number (lenient scoring's case)
                    text = text.replace("<answer>", " ").replace("</answer>", "")
                group.append(cut(encode(text), True, max_new_tokens))
            out.append(group)
        return out

    def encode_completion(self, text, *, finished, max_new_tokens):
        return cut(encode(text), finished, max_new_tokens)

    def train_step(self, samples, progress=None):
        if progress is not None:
            progress(0, 1)
        self.steps.append(list(samples))
        trained = [(s.messages, s.completion.trained_ids, s.advantage) for s in samples]
        self.weights = hashlib.sha256((self.weights + repr(trained)).encode()).hexdigest()
        tokens = sum(len(t) for _, t, _ in trained)
        return StepStats(0.0, len(samples), tokens, 0.0, 1.0, 0.0)

    def logprobs(self, samples):
        return [[0.0] * len(s.completion.trained_ids) for s in samples]

    def reset(self, seed: int) -> None:
        self.weights = hashlib.sha256(f"seed {seed}".encode()).hexdigest()

    def configure(self, cfg: Config) -> None:
        self.configured.append(cfg)

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


def stop_at_check(k: int):
    """A node stop check that says stop at its k-th call: before generating (1), scoring (2),
    sharing (3) or training (4)."""
    calls = iter(range(1, 1_000))
    return lambda: next(calls) == k


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
    cfg: Config, name: str, transport, right: int = 1, tmp_path: Path | None = None, ramble: int = 0
) -> Node:
    return Node(
        cfg,
        ScriptedBackend(right, ramble),
        transport,
        node_id=f"id-{name}",
        name=name,
        model_id="scripted",
        out_dir=Path(cfg.out_dir) / name,
        callback=Quiet(),
    )
