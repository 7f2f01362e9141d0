"""MLX backend on the tiny random Qwen2 (mlx[cpu] on Linux): parity with torch, the GRPO step, save/load.

Parity: the torch adapter after one step (non-zero LoRA B) is loaded into MLX from torch's
adapter.safetensors; per-token log-probs, the loss (with the KL term) and the gradient norm agree.
"""

from pathlib import Path

import pytest

pytest.importorskip("mlx.core", reason="mlx is not installed (pip install 'sapo-edge[mlx]')")
pytest.importorskip("mlx_lm", reason="mlx-lm is not installed (pip install 'sapo-edge[mlx]')")

from sapo_edge.backends import load_backend, select_backend  # noqa: E402
from sapo_edge.backends.base import Sample  # noqa: E402
from sapo_edge.backends.mlx_backend import MlxBackend  # noqa: E402
from sapo_edge.backends.torch_backend import TorchBackend  # noqa: E402
from sapo_edge.config.settings import Config  # noqa: E402

MSGS = [{"role": "user", "content": "Calculate 2 + 3."}]
LONG = [{"role": "user", "content": "What is 12 times 4? Think step by step, then answer."}]
TEXTS = [
    (MSGS, "<answer>5</answer>", 1.0, True),
    (MSGS, "the answer is 7", -1.0, True),
    (LONG, "12 times 4 = 48 so <answer>48</answer>", 0.5, False),
]
QUIET = {"log": lambda m: None}


def _samples(b, texts=TEXTS) -> list[Sample]:
    """Samples with each text encoded as this backend trains a peer's text (both backends agree)."""
    return [
        Sample(m, b.encode_completion(t, finished=f, max_new_tokens=b.cfg.max_new_tokens), a)
        for m, t, a, f in texts
    ]


def _cfg(tiny_qwen: Path, **kw) -> Config:
    base = dict(model=str(tiny_qwen), max_new_tokens=16, lora_r=4, learning_rate=1e-3)
    return Config(**{**base, "dtype": "float32", **kw})


def _mlx(tiny_qwen: Path, adapter: str, compile_step: bool = False, **kw) -> MlxBackend:
    cfg = _cfg(tiny_qwen, **kw)
    return MlxBackend(tiny_qwen, cfg, adapter=adapter, compile_step=compile_step, **QUIET)


def _total(b, samples: list[Sample]) -> list[float]:
    return [sum(t) for t in b.logprobs(samples)]


def test_select_and_load_backend_build_mlx(tiny_qwen):
    kind, device = select_backend("mlx", **QUIET)
    assert kind == "mlx" and device in ("cpu", "gpu")
    b = load_backend(tiny_qwen, _cfg(tiny_qwen), "sel", device, kind=kind, **QUIET)
    assert isinstance(b, MlxBackend) and b.name == "mlx" and b.dtype == "float32"
    assert b.trainable_parameters() > 0
    b.close()


def test_parity_with_torch_logprobs_loss_and_gradient(tiny_qwen, tmp_path):
    # the KL term makes the loss depend on the weights; T != 1: both divide the logits by it
    cfg = _cfg(tiny_qwen, beta=0.1, temperature=0.7)
    t = TorchBackend(tiny_qwen, cfg, adapter="par_t", device="cpu", **QUIET)
    SAMPLES = _samples(t)
    t.train_step(SAMPLES)  # LoRA B becomes non-zero: the adapter changes the outputs
    t.save(tmp_path)
    m = MlxBackend(tiny_qwen, cfg, adapter="par_m", **QUIET)
    assert _samples(m) == SAMPLES  # the same ids, end tokens and texts on both backends
    m.load_adapter(tmp_path / "adapter.safetensors")
    lt, lm = t.logprobs(SAMPLES), m.logprobs(SAMPLES)
    assert [len(r) for r in lt] == [len(r) for r in lm]
    assert lt[2][-1] != pytest.approx(lt[1][-1])  # unfinished: no EOS appended, still per token
    for rt, rm in zip(lt, lm, strict=True):
        assert rm == pytest.approx(rt, abs=1e-4)
    st, sm = t.train_step(SAMPLES), m.train_step(SAMPLES)
    assert (sm.sequences, sm.tokens) == (st.sequences, st.tokens)
    assert sm.loss == pytest.approx(st.loss, abs=1e-5)
    surrogate = -sum(s.advantage * len(r) for s, r in zip(SAMPLES, lt, strict=True)) / st.tokens
    assert st.loss > surrogate + 1e-6  # the k3 KL to the adapter-less base contributed
    assert sm.grad_norm == pytest.approx(st.grad_norm, rel=1e-4)
    t.close()
    m.close()


def test_grpo_step_raises_positive_and_lowers_negative(tiny_qwen):
    m = _mlx(tiny_qwen, "step")
    good_bad = _samples(m)[:2]
    before = _total(m, good_bad)
    stats = m.train_step(good_bad)
    after = _total(m, good_bad)
    assert stats.sequences == 2 and stats.tokens > 0 and stats.grad_norm > 0
    assert after[0] > before[0]
    assert after[1] < before[1]


def test_micro_batching_and_the_compiled_step_give_the_same_update(tiny_qwen, tmp_path):
    one = _mlx(tiny_qwen, "mb_all", micro_batch_size=8, beta=0.1)
    split = _mlx(tiny_qwen, "mb_one", micro_batch_size=1, compile_step=True, beta=0.1)
    SAMPLES = _samples(one)
    one.save(tmp_path)
    split.load(tmp_path)
    one.train_step(SAMPLES)
    split.train_step(SAMPLES)
    for a, b in zip(_total(one, SAMPLES), _total(split, SAMPLES), strict=True):
        assert a == pytest.approx(b, abs=1e-4)


def test_generate_returns_n_completions_per_prompt_and_is_seeded(tiny_qwen):
    m = _mlx(tiny_qwen, "gen")
    kw = dict(max_new_tokens=8, temperature=1.0, top_p=0.9, seed=7)
    out = m.generate([MSGS, LONG], 3, **kw)
    assert [len(g) for g in out] == [3, 3]
    assert all(1 <= g.tokens <= 8 for grp in out for g in grp)
    assert all(g.finished or g.tokens == 8 for grp in out for g in grp)
    again = m.generate([MSGS, LONG], 3, **kw)
    assert [[g.text for g in grp] for grp in out] == [[g.text for g in grp] for grp in again]
    other = m.generate([MSGS, LONG], 3, **{**kw, "seed": 8})
    assert [[g.text for g in grp] for grp in out] != [[g.text for g in grp] for grp in other]


def test_two_nodes_have_independent_adapters_and_save_load_restores_the_optimizer(
    tiny_qwen, tmp_path
):
    a, b = _mlx(tiny_qwen, "node_a"), _mlx(tiny_qwen, "node_b")
    good_bad = _samples(a)[:2]
    base = _total(b, good_bad[:1])
    a.train_step(good_bad)
    assert _total(b, good_bad[:1]) == pytest.approx(base)  # training a did not move b
    assert _total(a, good_bad[:1]) != pytest.approx(base)
    a.save(tmp_path)
    b.load(tmp_path)
    assert _total(b, good_bad) == pytest.approx(_total(a, good_bad), abs=1e-6)
    a.train_step(good_bad)  # same Adam moments and step count: the same second step
    b.train_step(good_bad)
    assert _total(b, good_bad) == pytest.approx(_total(a, good_bad), abs=1e-5)


def test_load_rejects_other_lora_shapes_and_torch_checkpoints(tiny_qwen, tmp_path):
    (tmp_path / "r4").mkdir()
    _mlx(tiny_qwen, "r4").save(tmp_path / "r4")
    with pytest.raises(ValueError, match="does not fit"):
        _mlx(tiny_qwen, "r8", lora_r=8).load(tmp_path / "r4")
    (tmp_path / "t").mkdir()
    TorchBackend(tiny_qwen, _cfg(tiny_qwen), adapter="t_ck", device="cpu", **QUIET).save(
        tmp_path / "t"
    )
    with pytest.raises(ValueError, match="torch backend"):
        _mlx(tiny_qwen, "from_torch").load(tmp_path / "t")


def test_unknown_lora_targets_get_a_clear_error(tiny_qwen):
    with pytest.raises(ValueError, match="lora_targets"):
        _mlx(tiny_qwen, "bad_targets", lora_targets=["no_such_proj"])


def test_near_greedy_generation_matches_torch_token_for_token(tiny_qwen, tmp_path):
    """Left padding, the batched KV cache and finished rows leaving the batch, against torch."""
    cfg = _cfg(tiny_qwen, learning_rate=1e-2)
    t = TorchBackend(tiny_qwen, cfg, adapter="greedy_t", device="cpu", **QUIET)
    t.reset(0)  # the LoRA A init, so the trained model below is always the same
    for _ in range(6):  # a random model's greedy text is one repeated token; a trained one varies
        t.train_step(_samples(t))
    t.save(tmp_path)
    m = MlxBackend(tiny_qwen, cfg, adapter="greedy_m", **QUIET)
    m.load_adapter(tmp_path / "adapter.safetensors")
    kw = dict(max_new_tokens=12, temperature=1e-4, top_p=1.0, seed=3)
    gt, gm = t.generate([MSGS, LONG], 2, **kw), m.generate([MSGS, LONG], 2, **kw)
    assert gm == gt  # the same sampled ids, end tokens and texts
    # a token only the second prompt's rollout emits becomes the stop token: those rows finish
    # early and leave the batch while the others run on
    ids = [grp[0].ids for grp in gm]
    t.eos_ids = m.eos_ids = [next(i for i in ids[1][1:] if i not in ids[0])]
    gt, gm = t.generate([MSGS, LONG], 2, **kw), m.generate([MSGS, LONG], 2, **kw)
    assert [g.finished for grp in gm for g in grp] == [False, False, True, True]
    assert [g.end_id for grp in gm for g in grp][2:] == t.eos_ids * 2
    assert gm == gt
    t.close()
    m.close()


def test_configure_takes_run_time_settings_even_in_the_compiled_step(tiny_qwen, tmp_path):
    import dataclasses

    a = _mlx(tiny_qwen, "conf_a", compile_step=True)
    b = _mlx(tiny_qwen, "conf_b", compile_step=True)
    a.reset(3)
    b.reset(3)
    samples = _samples(a)
    a.train_step(samples)  # a's step is compiled with clip 0.2 / 0.28 and beta 0
    b.train_step(samples)
    new = dataclasses.replace(a.cfg, beta=0.5, learning_rate=3e-3)
    a.configure(new)
    assert a.optimizer.learning_rate.item() == pytest.approx(3e-3)
    fresh = MlxBackend(tiny_qwen, new, adapter="conf_c", compile_step=True, **QUIET)
    a.save(tmp_path)
    fresh.load(tmp_path)
    sa, sf = a.train_step(samples), fresh.train_step(samples)  # the KL term is in both losses
    assert sa.loss == pytest.approx(sf.loss, abs=1e-6) and sa.loss != pytest.approx(
        b.train_step(samples).loss, abs=1e-6
    )
    with pytest.raises(ValueError, match="lora_r.*restart"):
        a.configure(dataclasses.replace(new, lora_r=8))
    for m in (a, b, fresh):
        m.close()


def test_prefix_sharing_samples_what_a_prefill_per_completion_samples(tiny_qwen):
    """One prefill per prompt, its cache rows repeated: the same draws as n prefills (left padding
    and the repeated rows' cache included), both near-greedy and at temperature 1."""
    m = _mlx(tiny_qwen, "share", learning_rate=1e-2)
    for _ in range(4):  # a trained adapter, so the two prompts' rollouts differ
        m.train_step(_samples(m))
    for temperature in (1e-4, 1.0):
        kw = dict(max_new_tokens=10, temperature=temperature, top_p=1.0, seed=11)
        m.share_prefix = False
        plain = m.generate([MSGS, LONG], 3, **kw)
        m.share_prefix = True
        shared = m.generate([MSGS, LONG], 3, **kw)
        assert shared == plain
    assert len({g.ids for grp in shared for g in grp}) > 1
    m.close()


def test_an_adapter_trained_by_mlx_loads_in_torch_and_gives_the_same_logprobs(tiny_qwen, tmp_path):
    """The README's other direction: MLX trains (LoRA B non-zero), saves in peft's layout, and
    the torch backend loads that adapter; per-token log-probs agree as in the parity test. The
    optimizer state does not cross: torch refuses an MLX checkpoint with what to do."""
    cfg = _cfg(tiny_qwen, temperature=0.7)
    m = MlxBackend(tiny_qwen, cfg, adapter="m2t_m", **QUIET)
    samples = _samples(m)
    for _ in range(2):
        m.train_step(samples)
    m.save(tmp_path)
    t = TorchBackend(tiny_qwen, cfg, adapter="m2t_t", device="cpu", **QUIET)
    assert _samples(t) == samples
    fresh = _total(t, samples)
    t.load_adapter(tmp_path / "adapter.safetensors")
    loaded = t.logprobs(samples)
    assert _total(t, samples) != pytest.approx(fresh, abs=1e-3)  # the adapter changed torch
    for a, b in zip(loaded, m.logprobs(samples), strict=True):
        assert len(a) == len(b)
        assert a == pytest.approx(b, abs=1e-4)
    with pytest.raises(
        ValueError, match="written by the mlx backend: resume it with --backend mlx"
    ):
        TorchBackend(tiny_qwen, cfg, adapter="m2t_r", device="cpu", **QUIET).load(tmp_path)
    (tmp_path / "r8").mkdir()
    _mlx(tiny_qwen, "m2t_r8", lora_r=8).save(tmp_path / "r8")
    with pytest.raises(ValueError, match="does not fit this model"):
        t.load_adapter(tmp_path / "r8" / "adapter.safetensors")
    with pytest.raises(ValueError, match="cannot be read"):
        t.load_adapter(tmp_path / "missing.safetensors")
    t.close()
    m.close()
