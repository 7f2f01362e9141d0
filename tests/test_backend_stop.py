"""The progress/stop hook of both backends on the tiny random Qwen2: generate() reports every
decode step and is abandoned at the step its hook raises; train_step() reports every
micro-batch, and a step abandoned half-way leaves no trace in the next one."""

import importlib.util
from pathlib import Path

import pytest

from sapo_edge.backends.base import Sample
from sapo_edge.config.settings import Config

pytestmark = pytest.mark.slow

MSGS = [{"role": "user", "content": "Calculate 2 + 3."}]
OTHER = [{"role": "user", "content": "What is 12 times 4? Think step by step."}]
TEXTS = [
    (MSGS, "<answer>5</answer>", 1.0),
    (MSGS, "the answer is 7", -1.0),
    (OTHER, "12 times 4 = 48 so <answer>48</answer>", 0.5),
]


def _samples(backend) -> list[Sample]:
    """The texts as finished completions, encoded the way this backend trains a peer's text."""
    return [
        Sample(m, backend.encode_completion(t, finished=True, max_new_tokens=64), adv)
        for m, t, adv in TEXTS
    ]


HAS_MLX = importlib.util.find_spec("mlx") is not None and importlib.util.find_spec("mlx_lm")
KINDS = ["torch", pytest.param("mlx", marks=pytest.mark.skipif(not HAS_MLX, reason="no mlx"))]


class Stop(Exception):
    pass


def _backend(kind: str, tiny_qwen: Path, adapter: str, **kw):
    cfg = Config(
        model=str(tiny_qwen), lora_r=4, learning_rate=1e-2, dtype="float32", micro_batch_size=1
    )
    cfg = Config(**{**cfg.to_dict(), **kw})
    if kind == "torch":
        from sapo_edge.backends.torch_backend import TorchBackend

        return TorchBackend(tiny_qwen, cfg, adapter=adapter, device="cpu", log=lambda m: None)
    from sapo_edge.backends.mlx_backend import MlxBackend

    return MlxBackend(tiny_qwen, cfg, adapter=adapter, log=lambda m: None)


@pytest.mark.parametrize("kind", KINDS)
def test_generate_reports_each_step_and_stops_where_the_hook_raises(kind, tiny_qwen):
    b = _backend(kind, tiny_qwen, f"gen_stop_{kind}")
    seen: list[tuple[int, int]] = []

    def hook(step: int, tokens: int) -> None:
        seen.append((step, tokens))
        if step == 3:
            raise Stop

    # a budget the random model would take minutes to fill: only the stop ends this call
    with pytest.raises(Stop):
        b.generate([MSGS, OTHER], 2, max_new_tokens=1800, temperature=1.0, top_p=1.0, seed=1,
                   progress=hook)  # fmt: skip
    assert [s for s, _ in seen] == [1, 2, 3]
    tokens = [t for _, t in seen]
    assert tokens[0] == 4  # 2 prompts x 2 completions, one token each
    assert all(0 < b2 - b1 <= 4 for b1, b2 in zip(tokens, tokens[1:], strict=False))
    # the backend is usable afterwards, and a normal call reports its last step's token count
    last: list[tuple[int, int]] = []
    groups = b.generate([MSGS], 2, max_new_tokens=5, temperature=1.0, top_p=1.0, seed=2,
                        progress=lambda s, t: last.append((s, t)))  # fmt: skip
    assert last[-1][1] == sum(g.tokens for g in groups[0])
    b.close()


@pytest.mark.parametrize("kind", KINDS)
def test_an_abandoned_train_step_leaves_no_trace(kind, tiny_qwen, tmp_path):
    a = _backend(kind, tiny_qwen, f"abandon_{kind}")
    fresh = _backend(kind, tiny_qwen, f"fresh_{kind}")
    a.save(tmp_path)
    fresh.load(tmp_path)  # both start from the same LoRA weights
    calls: list[tuple[int, int]] = []
    SAMPLES = _samples(a)

    def stop_at_second(done: int, total: int) -> None:
        calls.append((done, total))
        if done == 1:
            raise Stop  # after the first micro-batch's forward/backward

    with pytest.raises(Stop):
        a.train_step(SAMPLES, stop_at_second)
    assert calls == [(0, 3), (1, 3)]  # micro_batch_size 1: one micro-batch per sample
    stats = a.train_step(SAMPLES)
    ref = fresh.train_step(SAMPLES)
    assert stats.loss == pytest.approx(ref.loss, rel=1e-5, abs=1e-7)
    assert stats.grad_norm == pytest.approx(ref.grad_norm, rel=1e-4)
    for x, y in zip(a.logprobs(SAMPLES), fresh.logprobs(SAMPLES), strict=True):
        assert x == pytest.approx(y, abs=1e-5)
    a.close()
    fresh.close()
