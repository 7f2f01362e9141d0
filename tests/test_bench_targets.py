"""bench/vs_trl.py's verdicts (issue 33): against TRL tuned only at the same dtype, and memory as
peak RSS above each process's resting floor; against TRL default the turn-1 targets stay."""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import vs_trl  # noqa: E402
from workers import Spec  # noqa: E402


def _row(round_s, peak, rest):
    return {
        "round_s": round_s,
        "gen_tok_s": 10.0,
        "step_s": round_s / 2,
        "peak_rss_mb": peak,
        "rest_rss_mb": rest,
        "above_rest_mb": peak - rest,
        "gen_tokens": 100,
        "informative_groups": 4,
        "reward_mean": 0.5,
    }


def _render(summary: dict) -> str:
    args = argparse.Namespace(logs=Path("logs"), scaling_only=False, rounds=1)
    raw = {c: [{}, {"informative_groups": 4, "trained_rows": 32}] for c in summary}
    return vs_trl.render(args, Spec(model_dir="m"), summary, raw, [], 60.0)


def test_tuned_is_compared_at_the_same_dtype_and_by_memory_above_rest():
    text = _render(
        {
            "trl": _row(200.0, 17000.0, 1000.0),
            "trl-tuned": _row(200.0, 1600.0, 1000.0),  # 600 MB above its resting floor
            "trl-tuned-bf16": _row(100.0, 1000.0, 600.0),  # 400 MB above
            "sapo": _row(80.0, 1400.0, 1000.0),  # 400 above: 0.67x TRL tuned's 600 -> missed
            "sapo-bf16": _row(40.0, 700.0, 600.0),  # 100 above: 0.25x TRL tuned bf16's 400 -> met
        }
    )
    rows = [
        ln
        for ln in text.splitlines()
        if ln.startswith(("| sapo-edge float32 /", "| sapo-edge bfloat16 /"))
    ]
    ratios = {ln.split("|")[1].strip(): ln for ln in rows}
    assert set(ratios) == {
        "sapo-edge float32 / TRL default",
        "sapo-edge bfloat16 / TRL default",
        "sapo-edge float32 / TRL tuned",
        "sapo-edge bfloat16 / TRL tuned bfloat16",
    }  # never float32 against TRL tuned bfloat16 or the reverse
    assert "0.67 (target <= 0.5: missed)" in ratios["sapo-edge float32 / TRL tuned"]
    assert "0.40 (target <= 0.5: met)" in ratios["sapo-edge float32 / TRL tuned"]  # seconds
    assert "0.25 (target <= 0.5: met)" in ratios["sapo-edge bfloat16 / TRL tuned bfloat16"]
    assert "0.08 (target <= 0.3: met)" in ratios["sapo-edge float32 / TRL default"]  # raw peak
    assert "| rounds' peak RSS above resting (MB) | 16,000 | 600 | 400 | 400 | 100 |" in text
    missed = next(ln for ln in text.splitlines() if ln.startswith("Targets missed: "))
    assert missed == (
        "Targets missed: sapo-edge float32 / TRL default: seconds per round; "
        "sapo-edge float32 / TRL tuned: rounds' peak RSS above resting."
    )
