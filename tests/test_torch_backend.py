"""Torch backend on the tiny random Qwen2: batched generation, the GRPO step's direction, save/load."""

from pathlib import Path

import pytest

from sapo_edge.backends.base import Sample
from sapo_edge.backends.torch_backend import TorchBackend
from sapo_edge.config.settings import Config

MSGS = [{"role": "user", "content": "Calculate 2 + 3."}]


def _backend(tiny_qwen: Path, adapter: str, **kw) -> TorchBackend:
    cfg = Config(model=str(tiny_qwen), max_new_tokens=16, lora_r=4, learning_rate=1e-3, **kw)
    return TorchBackend(tiny_qwen, cfg, adapter=adapter, device="cpu", log=lambda m: None)


def _sample(b, messages, text: str, adv: float, finished: bool = True) -> Sample:
    c = b.encode_completion(text, finished=finished, max_new_tokens=b.cfg.max_new_tokens)
    return Sample(messages, c, adv)


def _good_bad(b) -> list[Sample]:
    return [_sample(b, MSGS, "<answer>5</answer>", 1.0), _sample(b, MSGS, "the answer is 7", -1.0)]


def _total(b: TorchBackend, samples: list[Sample]) -> list[float]:
    return [sum(t) for t in b.logprobs(samples)]


def test_generate_returns_n_completions_per_prompt(tiny_qwen):
    b = _backend(tiny_qwen, "gen")
    out = b.generate(
        [MSGS, [{"role": "user", "content": "Calculate 9 + 1."}]],
        3,
        max_new_tokens=8,
        temperature=1.0,
        top_p=1.0,
        seed=7,
    )
    assert [len(g) for g in out] == [3, 3]
    assert all(1 <= g.tokens <= 8 for grp in out for g in grp)
    again = b.generate(
        [MSGS, [{"role": "user", "content": "Calculate 9 + 1."}]],
        3,
        max_new_tokens=8,
        temperature=1.0,
        top_p=1.0,
        seed=7,
    )
    assert [[g.text for g in grp] for grp in out] == [[g.text for g in grp] for grp in again]


def test_grpo_step_raises_positive_and_lowers_negative(tiny_qwen):
    b = _backend(tiny_qwen, "step")
    before = _total(b, _good_bad(b))
    stats = b.train_step(_good_bad(b))
    after = _total(b, _good_bad(b))
    assert stats.sequences == 2 and stats.tokens > 0 and stats.grad_norm > 0
    assert after[0] > before[0]
    assert after[1] < before[1]


def test_micro_batching_gives_the_same_update(tiny_qwen, tmp_path):
    one = _backend(tiny_qwen, "mb_all", micro_batch_size=8)
    split = _backend(tiny_qwen, "mb_one", micro_batch_size=1)
    samples = _good_bad(one) + [
        _sample(one, MSGS, "5", 0.5),
        _sample(one, MSGS, "<answer>6</answer> no", -0.5),
    ]
    one.save(tmp_path)
    split.load(tmp_path)  # same starting LoRA weights (each adapter starts from its own random A)
    one.train_step(samples)
    split.train_step(samples)
    for a, b in zip(_total(one, samples), _total(split, samples), strict=True):
        assert a == pytest.approx(b, abs=1e-4)


def test_adapters_of_two_nodes_are_independent_and_save_load_restores(tiny_qwen, tmp_path):
    a = _backend(tiny_qwen, "node_a")
    b = _backend(tiny_qwen, "node_b")
    good_bad = _good_bad(a)
    base = _total(b, good_bad[:1])
    a.train_step(good_bad)
    assert _total(b, good_bad[:1]) == pytest.approx(base)  # training a did not move b
    assert _total(a, good_bad[:1]) != pytest.approx(base)
    a.save(tmp_path)
    b.load(tmp_path)
    assert _total(b, good_bad) == pytest.approx(_total(a, good_bad), abs=1e-5)


def test_load_rejects_a_checkpoint_of_another_lora_shape(tiny_qwen, tmp_path):
    _backend(tiny_qwen, "r4").save(tmp_path)
    cfg = Config(model=str(tiny_qwen), lora_r=8)
    r8 = TorchBackend(tiny_qwen, cfg, adapter="r8", device="cpu", log=lambda m: None)
    with pytest.raises(ValueError, match="does not fit"):
        r8.load(tmp_path)


def test_unknown_lora_targets_get_a_clear_error(tiny_qwen):
    with pytest.raises(ValueError, match="lora_targets"):
        _backend(tiny_qwen, "bad_targets", lora_targets=["no_such_proj"])


def test_logprobs_with_prefix_sharing_match_a_plain_forward_pass(tiny_qwen):
    import torch

    b = _backend(tiny_qwen, "parity", micro_batch_size=3)
    long_q = [{"role": "user", "content": "Calculate 2 + 3 and then explain every step in detail."}]
    texts = [
        (MSGS, "<answer>5</answer>", True),
        (MSGS, "the answer is 7", True),
        (MSGS, "7", False),
        (long_q, "<answer>5</answer>", True),
        (long_q, "five", True),
    ]
    samples = [_sample(b, m, t, 1.0, f) for m, t, f in texts]
    got = b.logprobs(samples)
    im_end = b.tok.convert_tokens_to_ids("<|im_end|>")  # the reference's own end of turn
    for (msgs, text, finished), lp in zip(texts, got, strict=True):
        prompt = b.tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
        prompt = list(prompt if isinstance(prompt, list) else prompt["input_ids"])
        comp = b.tok(text, add_special_tokens=False)["input_ids"] + ([im_end] if finished else [])
        with torch.no_grad():
            logits = b.model(input_ids=torch.tensor([prompt + comp])).logits[0].float()
        ref = torch.log_softmax(logits[len(prompt) - 1 : -1], -1).gather(
            -1, torch.tensor(comp)[:, None]
        )[:, 0]
        assert lp == pytest.approx(ref.tolist(), abs=1e-4)


def test_prefix_shared_generation_matches_transformers_generate(tiny_qwen):
    """Near-zero temperature makes sampling greedy: the shared-prefix decode loop (left padding,
    one prefill per prompt, finished rows leaving the batch) must pick what generate() picks."""
    import torch

    b = _backend(tiny_qwen, "greedy")
    prompts = [MSGS, [{"role": "user", "content": "Calculate 9 + 1 and explain it at length."}]]
    got = b.generate(prompts, 2, max_new_tokens=12, temperature=1e-6, top_p=1.0, seed=0)
    ids, mask = b._left_pad([b._prompt_ids(m) for m in prompts])
    with torch.no_grad():
        ref = b.model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=False,
            max_new_tokens=12,
            eos_token_id=b.eos_ids,
            pad_token_id=b.tok.pad_token_id,
        )[:, ids.shape[1] :]
    for grp, row in zip(got, ref.tolist(), strict=True):
        end = next((j for j, t in enumerate(row) if t in b.eos_ids), len(row))
        want = b.tok.decode(row[:end], skip_special_tokens=True)
        assert [g.text for g in grp] == [want, want]


def test_configure_takes_run_time_settings_and_refuses_load_time_ones(tiny_qwen, tmp_path):
    import dataclasses

    b = _backend(tiny_qwen, "conf")
    samples = _good_bad(b)
    before = _total(b, samples)
    b.configure(dataclasses.replace(b.cfg, temperature=0.5, learning_rate=2e-3))
    assert [g["lr"] for g in b.optimizer.param_groups] == [2e-3]
    assert _total(b, samples) != pytest.approx(before)  # log-probs at the new temperature
    with pytest.raises(ValueError, match="lora_r.*restart"):
        b.configure(dataclasses.replace(b.cfg, lora_r=8))
    b.train_step(samples)
    b.save(tmp_path)
    b.configure(dataclasses.replace(b.cfg, learning_rate=1e-4))
    b.load(tmp_path)  # the saved optimizer's lr (2e-3) does not override this run's setting
    assert [g["lr"] for g in b.optimizer.param_groups] == [1e-4]


def test_lora_dropout_masks_come_from_the_seed_and_step_so_a_resume_repeats_them(
    tiny_qwen, tmp_path
):
    import torch

    a, b = (
        _backend(tiny_qwen, "drop_a", lora_dropout=0.5),
        _backend(tiny_qwen, "drop_b", lora_dropout=0.5),
    )
    a.reset(4)
    b.reset(4)
    samples = _good_bad(a)
    a.train_step(samples)
    a.save(tmp_path)  # b resumes from a's checkpoint after a's first step
    b.load(tmp_path)
    torch.manual_seed(123)  # the global stream differs: the masks must not depend on it
    a.train_step(samples)
    torch.manual_seed(456)
    b.train_step(samples)
    assert _total(a, samples) == _total(b, samples)


def test_the_kv_cache_goes_by_the_keyword_the_installed_transformers_takes(tiny_qwen):
    """transformers 5.24 renamed `past_key_values` to `cache` (a FutureWarning on every decode
    step, the old name dropped in 5.40): generation, log-probs and the step warn about neither."""
    import warnings

    b = _backend(tiny_qwen, "cachekw")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        b.generate([MSGS], 2, max_new_tokens=4, temperature=1.0, top_p=1.0, seed=1)
        b.logprobs(_good_bad(b))
        b.train_step(_good_bad(b))
    about_cache = [str(w.message) for w in seen if "past_key_values" in str(w.message)]
    assert about_cache == []


def test_the_cache_keyword_follows_the_forward_signature():
    from torch import nn

    from sapo_edge.backends.torch_decode import kv_cache

    class Old(nn.Module):
        def forward(self, input_ids=None, past_key_values=None, use_cache=None): ...

    class New(nn.Module):
        def forward(self, input_ids=None, cache=None, use_cache=None, **kwargs): ...

    marker = object()
    assert kv_cache(Old(), marker) == {"past_key_values": marker, "use_cache": True}
    assert kv_cache(New(), marker) == {"cache": marker, "use_cache": True}
