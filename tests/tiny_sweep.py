"""experiments/sweep.toml shrunk for the tiny model (2 nodes, 2 rounds, 6 new tokens), and the
evidence.py arguments that run it in tmp_path: the end-to-end tests of the experiment scripts."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tiny_sweep(tiny_qwen: str, tmp_path: Path) -> Path:
    cfg = (ROOT / "experiments/sweep.toml").read_text()
    cfg = cfg.replace('model = "smollm2-135m"', f'model = "{tiny_qwen}"')
    for key, value in (("rounds", 2), ("max_new_tokens", 6), ("nodes", 2)):
        cfg = "\n".join(
            f"{key} = {value}" if ln.startswith(f"{key} =") else ln for ln in cfg.splitlines()
        )
    path = tmp_path / "tiny.toml"
    path.write_text(cfg)
    return path


def evidence_argv(tiny_qwen: str, tmp_path: Path, seeds: str, splits: str) -> list[str]:
    """One lane, two held-out questions per node, outputs under tmp_path."""
    return [
        "--config",
        str(tiny_sweep(tiny_qwen, tmp_path)),
        "--out",
        str(tmp_path / "runs"),
        "--docs",
        str(tmp_path / "docs"),
        "--seeds",
        seeds,
        "--splits",
        splits,
        "--single-seed-splits",
        "",
        "--heldout-per-node",
        "2",
        "--lanes",
        "1",
    ]
