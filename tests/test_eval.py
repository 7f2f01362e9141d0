"""`sapo-edge eval`: held-out pass@1 on questions no node trains on, base model or checkpoint."""

import dataclasses

import pytest
from task_configs import ONE_DIGIT_ADD

from sapo_edge.cli import main
from sapo_edge.config.settings import Config
from sapo_edge.data.seeds import node_seeds
from sapo_edge.data.task_sampler import TaskSampler, node_seed
from sapo_edge.run.evaluate import HELDOUT_SEED, heldout_tasks

ADD = [
    "--domains",
    "basic_arithmetic",
    "--domain-configs",
    '{"basic_arithmetic": {"max_digits": 2}}',
]


def test_heldout_questions_are_fixed_and_outside_every_node_stream():
    cfg = Config(
        domains={"basic_arithmetic": 1.0}, domain_configs={"basic_arithmetic": ONE_DIGIT_ADD}
    )
    first, again = heldout_tasks(cfg, 8), heldout_tasks(cfg, 8)
    assert [t.question for t in first] == [t.question for t in again]
    assert all(t.ref.seed >= HELDOUT_SEED for t in first)
    node = TaskSampler(cfg.domains, cfg.domain_configs, node_seeds("node-0").questions)
    trained = {r.key for _ in range(50) for r in node.sample_batch(1)}
    assert trained.isdisjoint(t.ref.key for t in first)
    assert [t.question for t in heldout_tasks(cfg, 8, seed=1)] != [t.question for t in first]


def test_heldout_seeds_lie_past_every_seed_a_node_can_use():
    """Node seeds are 31-bit (a sha256 prefix mod 2**31, whatever the node id and base seed);
    the held-out stream's seed, for any eval --seed a user passes, must lie past all of them.
    Checked against the literal 2**31, not against the constant under test."""
    cfg = Config(
        domains={"basic_arithmetic": 1.0}, domain_configs={"basic_arithmetic": ONE_DIGIT_ADD}
    )
    assert all(0 <= node_seed(f"node-{i}", base) < 2**31 for i in range(200) for base in (0, 7))
    streams = [dataclasses.astuple(node_seeds(f"node-{i}", b)) for i in range(200) for b in (0, 7)]
    assert all(0 <= s < 2**31 for seeds in streams for s in seeds)
    for seed in (0, 1, 12345, 2**31 - 1):
        assert all(t.ref.seed >= 2**31 for t in heldout_tasks(cfg, 2, seed=seed))


@pytest.mark.slow
def test_eval_of_the_base_model_and_of_a_checkpoint(tiny_qwen, tmp_path, capsys):
    common = ["--model", str(tiny_qwen), *ADD, "--max-new-tokens", "6", "--lenient"]
    assert main(["eval", *common, "--questions", "3", "--samples", "2"]) == 0
    out = capsys.readouterr().out
    assert "3 held-out questions x 2 samples, base model" in out and "basic_arithmetic" in out
    run = [
        "run",
        "--headless",
        "--solo",
        "--rounds",
        "1",
        "--out-dir",
        str(tmp_path),
        "--name",
        "n",
        "--questions-per-round",
        "1",
        "--group-size",
        "2",
        "--local-samples",
        "1",
        *common,
    ]
    assert main(run) == 0
    capsys.readouterr()
    assert (
        main(
            [
                "eval",
                *common,
                "--questions",
                "2",
                "--samples",
                "2",
                "--checkpoint",
                str(tmp_path / "n"),
            ]
        )
        == 0
    )
    assert (
        f"checkpoint {tmp_path / 'n' / 'checkpoints' / 'round-000001'}" in capsys.readouterr().out
    )


@pytest.mark.slow
def test_eval_without_a_checkpoint_there_says_so(tiny_qwen, tmp_path, capsys):
    rc = main(
        [
            "eval",
            "--model",
            str(tiny_qwen),
            *ADD,
            "--questions",
            "1",
            "--samples",
            "1",
            "--max-new-tokens",
            "2",
            "--checkpoint",
            str(tmp_path),
        ]
    )
    assert rc == 2
    assert "no complete checkpoint under" in capsys.readouterr().err
