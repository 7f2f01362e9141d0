"""How often the untrained model writes its answer in <answer> tags under an experiment's prompts.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python experiments/base_rate.py \
        --config experiments/aha_speedup.toml --questions 128

Asks the base model the held-out questions of seed 0 (the ones node 0 of every cell is scored
on: experiments/evidence.py), one completion each, with the prompt an unhinted node of the
config sees (no worked example; the instruction in the user's turn when format_instruction is
on), and prints the share of answers in tags and the strict pass@1 (right and tagged), each
with its exact binomial 95% interval. A base rate of a few percent, not zero, is what lets an
unhinted node learn the format alone, slowly (issue 56).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from stats import exact_binomial  # noqa: E402


def measure(config: Path, questions: int, instruction: bool | None, text: str = "") -> dict:
    import torch

    from sapo_edge.backends import load_backend, select_backend
    from sapo_edge.config.settings import Config
    from sapo_edge.models.resolve import resolve_model
    from sapo_edge.rl import prompts
    from sapo_edge.rl.prompts import extract_tagged, node_messages
    from sapo_edge.rl.rewards import RewardConfig, score_completion
    from sapo_edge.run.evaluate import HELDOUT_SEED, heldout_tasks

    torch.set_num_threads(1)
    if text:  # a wording tried before it is written into prompts.INSTRUCTION
        prompts.INSTRUCTION = text
    cfg = Config.load(config, {"dtype": "float32"})
    cfg = dataclasses.replace(cfg, format_example=False)  # what an unhinted node sees
    if instruction is not None:
        cfg = dataclasses.replace(cfg, format_instruction=instruction)
    tasks = heldout_tasks(cfg, questions, seed=0)
    kind, device = select_backend(cfg.backend, log=lambda _: None)
    model = resolve_model(cfg.model, progress=lambda _: None)
    quiet = {"log": lambda _: None}
    backend = load_backend(model.path, cfg, adapter="base-rate", device=device, kind=kind, **quiet)
    t0, c0 = time.time(), time.process_time()
    try:
        gens = backend.generate(
            [node_messages(t.question, cfg) for t in tasks],
            1,
            max_new_tokens=cfg.max_new_tokens,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            seed=HELDOUT_SEED % 2**31,
        )
    finally:
        backend.close()
    texts = [g[0].text for g in gens]
    tagged = sum(extract_tagged(t) is not None for t in texts)
    right = sum(
        score_completion(t, x, RewardConfig()) > 0 for t, x in zip(tasks, texts, strict=True)
    )
    n = len(texts)
    return {
        "config": str(config),
        "format_instruction": cfg.format_instruction,
        "instruction": prompts.INSTRUCTION if cfg.format_instruction else None,
        "completions": n,
        "tagged": tagged,
        "tagged_share": tagged / n,
        "tagged_exact_95": exact_binomial(tagged, n),
        "strict_right": right,
        "strict_pass_at_1": right / n,
        "strict_exact_95": exact_binomial(right, n),
        "seconds": round(time.time() - t0, 1),
        "cpu_seconds": round(time.process_time() - c0, 1),
        "examples": texts[:3],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=HERE / "aha_speedup.toml")
    ap.add_argument("--questions", type=int, default=128, help="held-out questions (seed 0)")
    ap.add_argument(
        "--instruction",
        choices=("config", "on", "off"),
        default="config",
        help="the instruction in the user's turn: as the config says, or on/off",
    )
    ap.add_argument("--text", default="", help="try another wording of the instruction")
    a = ap.parse_args()
    if a.questions < 1:
        raise SystemExit("--questions must be 1 or more.")
    on = {"config": None, "on": True, "off": False}[a.instruction]
    print(json.dumps(measure(a.config, a.questions, on, a.text), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
