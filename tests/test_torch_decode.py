"""The torch decode loop's fast paths (torch_decode.py) against the plain ones they replace:
LoRA folded into the weights, the in-place KV cache, inverse-CDF sampling."""

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from sapo_edge.backends.torch_backend import TorchBackend  # noqa: E402
from sapo_edge.backends.torch_decode import (  # noqa: E402
    BLOCK,
    blocked_inverse_cdf,
    growing_cache,
    inverse_cdf,
    kv_cache,
    merged_lora,
    sample,
)
from sapo_edge.config.settings import Config  # noqa: E402

PROMPTS = [
    [{"role": "user", "content": "Calculate 2 + 3."}],
    [{"role": "user", "content": "Calculate 9 + 1 and explain it at length, step by step."}],
]


def _backend(tiny_qwen: Path, adapter: str, dtype: str = "float32") -> TorchBackend:
    cfg = Config(model=str(tiny_qwen), max_new_tokens=16, lora_r=4, dtype=dtype)
    b = TorchBackend(tiny_qwen, cfg, adapter=adapter, device="cpu", log=lambda m: None)
    torch.manual_seed(1)
    with torch.no_grad():  # a trained-looking adapter: B != 0, so LoRA changes the logits
        for p in b.params:
            p.normal_(0.0, 0.2)
    return b


def _state(model) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_merged_lora_gives_the_unmerged_logits_and_leaves_the_weights_untouched(tiny_qwen):
    b = _backend(tiny_qwen, "merge")
    ids = torch.tensor([b._prompt_ids(PROMPTS[1])])
    before = _state(b.model)
    b._activate()  # the shared model may hold other tests' adapters: this one is active
    with torch.no_grad():
        plain = b.model(input_ids=ids).logits
        with b.model.disable_adapter():
            base = b.model(input_ids=ids).logits
        b._activate()
        with merged_lora(b.model, b.adapter):
            assert not any("lora_A" in n for n, _ in b.model.named_parameters())
            fused = b.model(input_ids=ids).logits
    assert (plain - base).abs().max() > 1e-2  # the adapter matters here
    lp_fused, lp_plain = fused.log_softmax(-1), plain.log_softmax(-1)
    assert (lp_fused - lp_plain).abs().max() < 1e-4  # float rounding, nothing more
    after = _state(b.model)
    assert after.keys() == before.keys()
    assert all(torch.equal(after[k], before[k]) for k in before)  # bit for bit
    b.close()


def test_lean_bfloat16_lora_is_as_close_to_float32_as_peft_and_leaves_the_weights(tiny_qwen):
    """In bfloat16 the LoRA layers run lean while sampling: their log-probs are as close to the
    float32 model's (the same LoRA weights) as peft's own bfloat16 path is."""
    ref = _backend(tiny_qwen, "ref32")
    b = _backend(tiny_qwen, "lean", dtype="bfloat16")  # the same seeded LoRA weights
    ids = torch.tensor([b._prompt_ids(PROMPTS[1])])
    before = _state(b.model)
    with torch.no_grad():
        ref._activate()
        truth = ref.model(input_ids=ids).logits.log_softmax(-1)
        b._activate()
        peft = b.model(input_ids=ids).logits.float().log_softmax(-1)
        with merged_lora(b.model, b.adapter):
            lean = b.model(input_ids=ids).logits.float().log_softmax(-1)
        with b.model.disable_adapter():
            base = b.model(input_ids=ids).logits.float().log_softmax(-1)
    assert (truth - base).abs().mean() > 0.1  # the adapter matters here
    err_peft, err_lean = (truth - peft).abs(), (truth - lean).abs()
    assert err_lean.mean() <= 1.5 * err_peft.mean() + 1e-3
    assert err_lean.max() <= 1.5 * err_peft.max() + 1e-2
    assert torch.equal(lean, peft)  # peft's own arithmetic (float32 A and B), to the bit
    after = _state(b.model)
    assert all(torch.equal(after[k], before[k]) for k in before)
    b.close()
    ref.close()


def test_fused_generation_picks_the_unfused_tokens(tiny_qwen):
    """Near-zero temperature makes sampling greedy: folding LoRA in, or running it lean in
    float32, must not change a token."""
    b = _backend(tiny_qwen, "fused")
    runs = {}
    for mode in ("merged", "lean", "peft"):
        b.fuse_lora, b.lean_lora = mode != "peft", mode == "lean"
        runs[mode] = b.generate(PROMPTS, 3, max_new_tokens=12, temperature=1e-6, top_p=1.0, seed=0)
    ids = {mode: [c.trained_ids for grp in runs[mode] for c in grp] for mode in runs}
    assert ids["merged"] == ids["lean"] == ids["peft"]
    assert len({tuple(i) for i in ids["merged"]}) > 1  # the two prompts decode differently
    # the same tokens either way, so count what each mode swaps in: every LoRA layer of the
    # adapter (2 layers x the config's targets), all merged or all lean
    b._activate()
    kinds = {}
    for lean in (False, True):
        with merged_lora(b.model, b.adapter, True, lean):
            names = [type(m).__name__ for m in b.model.modules()]
        kinds[lean] = {k: names.count(k) for k in ("_MergedLinear", "LeanLora")}
    layers = kinds[False]["_MergedLinear"]
    assert layers == 2 * len(b.cfg.lora_targets) and kinds[False]["LeanLora"] == 0
    assert kinds[True] == {"_MergedLinear": 0, "LeanLora": layers}

    b.close()


def test_growing_cache_matches_dynamic_cache_even_when_it_outgrows_its_plan(tiny_qwen):
    from transformers import DynamicCache

    b = _backend(tiny_qwen, "cache")
    model = b.model
    ids = torch.tensor([b._prompt_ids(PROMPTS[1])] * 2)
    out = {}
    with torch.no_grad():
        for name, cache in (
            ("dynamic", DynamicCache(config=model.config)),
            ("growing", growing_cache(model.config, capacity=4)),  # too small: it must grow
            ("planned", growing_cache(model.config, capacity=1000)),  # room for long completions
        ):
            logits = [model(input_ids=ids[:, :-3], **kv_cache(model, cache)).logits]
            cache.batch_repeat_interleave(2)
            cache.batch_select_indices(torch.tensor([0, 3]))
            for j in range(3, 0, -1):
                step = ids[:, -j:][:, :1]
                logits.append(model(input_ids=step, **kv_cache(model, cache)).logits)
            out[name] = torch.cat([t[:, -1] for t in logits])
            if name == "planned":  # the buffers hold what is filled and a margin, not the plan
                layer = cache.layers[0]
                prefilled = ids.shape[1] - 3
                assert layer._k.shape[0] == 2 and layer.length == prefilled + 3
                assert layer._k.shape[2] == prefilled + max(16, prefilled // 4)
    assert type(growing_cache(model.config, 4).layers[0]).__name__ == "_GrowingLayer"
    assert torch.allclose(out["growing"], out["dynamic"], atol=1e-5)
    assert torch.equal(out["planned"], out["growing"])
    b.close()


def test_inverse_cdf_sampling_follows_the_distribution_and_never_picks_a_zero():
    gen = torch.Generator().manual_seed(0)
    probs = torch.tensor([0.5, 0.0, 0.3, 0.0, 0.2])
    logits = probs.log().expand(20000, -1).contiguous()  # -inf for the zeros
    picks = sample(logits, 1.0, gen)
    freq = torch.bincount(picks, minlength=5).float() / len(picks)
    assert freq[1] == 0 and freq[3] == 0
    assert torch.allclose(freq, probs, atol=0.015)
    nucleus = torch.bincount(sample(logits, 0.6, gen), minlength=5)  # {0.5, 0.3} reach 0.6
    assert nucleus[4] == 0 and nucleus[0] > nucleus[2] > 0
    cold = torch.tensor([[1.0, 3.0, 2.0], [5.0, 0.0, 4.9]]) / 1e-6
    assert sample(cold, 1.0, gen).tolist() == [1, 0]  # near-zero temperature: the argmax


def test_blocked_inverse_cdf_draws_what_the_one_level_inverse_cdf_draws():
    """The two-level draw picks, for the same uniforms, the token the plain cumulative sum over
    the whole vocabulary picks: vocabularies that are not a whole number of blocks, empty
    blocks, zeros at block edges, one-hot rows, peaked and flat rows."""
    torch.manual_seed(3)
    for vocab in (BLOCK * 3, BLOCK * 4 + 37, 5, 49152):
        logits = torch.randn(64, vocab) * torch.tensor([0.5, 3.0, 12.0, 40.0]).repeat(16)[:, None]
        if vocab > BLOCK:
            logits[::3, :BLOCK] = float("-inf")  # a whole empty block
        logits[1::3, BLOCK - 1 :: BLOCK] = float("-inf")  # zeros at every block's edge
        logits[2, :] = float("-inf")
        logits[2, vocab - 1] = 0.0  # one-hot on the very last token
        probs = (logits - logits.amax(-1, keepdim=True)).exp()
        for seed in range(20):
            want = inverse_cdf(probs, torch.Generator().manual_seed(seed))
            got = blocked_inverse_cdf(probs, torch.Generator().manual_seed(seed))
            assert torch.equal(got, want), (vocab, seed)
            assert (probs.gather(1, got[:, None]) > 0).all()  # never a zero-probability token


def test_the_growing_cache_keeps_a_margin_and_grows_by_it_past_its_plan():
    """A prompt of 20 tokens, then 80 one-token steps against a plan of 60: the buffer holds the
    filled part plus a quarter (at least 16), never past the plan until the call outgrows it,
    and its view is always the keys written, in order."""
    from sapo_edge.backends.torch_decode import _GrowingLayer

    layer = _GrowingLayer(capacity=60)
    gen = torch.Generator().manual_seed(0)
    written = [torch.randn(2, 3, 20, 4, generator=gen)]
    layer.update(written[0], written[0].clone())
    lengths = [layer._k.shape[2]]
    for _ in range(80):
        step = torch.randn(2, 3, 1, 4, generator=gen)
        written.append(step)
        keys, _ = layer.update(step, step.clone())
        assert torch.equal(keys, torch.cat(written, 2))
        lengths.append(layer._k.shape[2])
    # 20 + 16; 37 + 16; 54 + 16 capped at the plan; then past it 61 + 16, 78 + 19, 98 + 24:
    # a copy per margin, not per token
    assert sorted(set(lengths)) == [36, 53, 60, 77, 97, 122]
