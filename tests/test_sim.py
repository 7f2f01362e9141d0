"""End to end on the tiny random Qwen2: `sapo-edge sim` and `sapo-edge run --headless` through the CLI."""

import json

import pytest

from sapo_edge.cli import main

FAST = [
    "--domains",
    "basic_arithmetic",
    "--questions-per-round",
    "2",
    "--group-size",
    "3",
    "--max-new-tokens",
    "8",
    "--local-samples",
    "1",
    "--external-samples",
    "1",
    "--format-reward",
    "0.1",
    "--lenient",
]


def _metrics(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_two_node_sim_exchanges_rollouts_and_prints_the_table(tiny_qwen, tmp_path, capsys):
    out = tmp_path / "sim"
    rc = main(
        [
            "sim",
            "--model",
            str(tiny_qwen),
            "--nodes",
            "2",
            "--rounds",
            "2",
            "--out-dir",
            str(out),
            *FAST,
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "cumulative reward" in printed and "total" in printed
    m0, m1 = _metrics(out / "node-0" / "metrics.jsonl"), _metrics(out / "node-1" / "metrics.jsonl")
    assert [m["round"] for m in m0] == [0, 1] and [m["round"] for m in m1] == [0, 1]
    # rollouts crossed: node-1 received node-0's round-0 groups, node-0 then received node-1's round-0 groups
    assert m1[0]["received"] == 2 and m0[0]["received"] == 0 and m0[1]["received"] == 2
    assert m1[0]["pool"]["added"] == 2
    for node in ("node-0", "node-1"):
        assert (out / node / "config.json").exists()
        assert list((out / node / "checkpoints").glob("round-*/COMPLETE"))


@pytest.mark.slow
def test_headless_run_resumes_from_its_checkpoint(tiny_qwen, tmp_path, capsys):
    out = tmp_path / "run"
    common = [
        "run",
        "--headless",
        "--model",
        str(tiny_qwen),
        "--out-dir",
        str(out),
        "--name",
        "solo",
        "--no-mdns",  # network on loopback only, on a free port
        "--listen",
        "127.0.0.1:0",
        *FAST,
    ]
    assert main([*common, "--rounds", "2", "--checkpoint-every", "1"]) == 0
    assert main([*common, "--rounds", "3", "--resume"]) == 0
    printed = capsys.readouterr().out
    assert "resumed from round-000002: next round 2" in printed
    assert [m["round"] for m in _metrics(out / "solo" / "metrics.jsonl")] == [0, 1, 2]


def test_sim_with_an_unknown_domain_fails_before_loading_the_model(tmp_path, capsys):
    rc = main(
        [
            "sim",
            "--model",
            "smollm2-135m",
            "--domains",
            "basic_arithmetc",
            "--out-dir",
            str(tmp_path),
        ]
    )
    assert rc == 2
    err = capsys.readouterr().err
    assert "basic_arithmetc" in err and "basic_arithmetic" in err
    assert not (tmp_path / "node-0").exists()
