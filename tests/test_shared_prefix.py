"""shared_prefix.py in bfloat16: the micro-batches' shares of the prompt's gradient add up in
float32 (not in the model's bfloat16), and that float32 sum goes through the prompt's graph once.

test_training_integrity.py checks the whole step's gradient against a full-sequence reference in
float32; in bfloat16 a reference computed in bfloat16 is too noisy to tell a bfloat16 sum from a
float32 one, so this checks the mechanism directly, with known gradients."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from sapo_edge.backends.base import Sample  # noqa: E402
from sapo_edge.backends.shared_prefix import SharedPrefix  # noqa: E402
from sapo_edge.backends.torch_backend import TorchBackend  # noqa: E402
from sapo_edge.config.settings import Config  # noqa: E402

MSGS = [{"role": "user", "content": "Calculate 2 + 3."}]
SHARES = 48  # micro-batches on one prefix: G=8 is typical; more makes bfloat16's drift plain


@pytest.fixture(scope="module")
def bf16(tiny_qwen):
    cfg = Config(model=str(tiny_qwen), dtype="bfloat16", lora_r=4, learning_rate=1e-3)
    b = TorchBackend(tiny_qwen, cfg, adapter="prefix_bf16", device="cpu", log=lambda m: None)
    b.reset(3)
    # one step so that LoRA B is non-zero and the prefix's keys depend on every LoRA weight
    comp = b.encode_completion("<answer>5</answer>", finished=True, max_new_tokens=16)
    b.train_step([Sample(MSGS, comp, 1.0)])
    b.model.train()
    yield b
    b.close()


def _prompt(b) -> list[int]:
    return b._prompt_ids(MSGS)


def _shares(prefix: SharedPrefix, seed: int) -> list[list[torch.Tensor]]:
    """SHARES micro-batches, each a loss whose gradient on every cached key/value is a fixed
    random tensor (rounded to bfloat16 on its way into the bfloat16 cache): returns them."""
    gen = torch.Generator().manual_seed(seed)
    given = []
    for _ in range(SHARES):
        cache = prefix.cache(1)
        tensors = [t for layer in cache.layers for t in (layer.keys, layer.values)]
        weights = [torch.randn(t.shape, generator=gen) for t in tensors]
        loss = sum((t.float() * w).sum() for t, w in zip(tensors, weights, strict=True))
        loss.backward()
        given.append([w.to(torch.bfloat16) for w in weights])
    return given


def test_bfloat16_prefix_leaves_are_float32_and_their_shares_sum_in_float32(bf16):
    prefix = bf16._prefix(_prompt(bf16))
    assert prefix.shared and prefix.dtype == torch.bfloat16
    assert all(leaf.dtype == torch.float32 for leaf in prefix._leaves)
    given = _shares(prefix, seed=1)
    for i, leaf in enumerate(prefix._leaves):
        exact = sum(g[i].double() for g in given)  # the shares, summed without rounding
        err = (leaf.grad.double() - exact).abs().max().item()
        scale = exact.abs().max().item()
        # float32 sums: ~1e-7 relative; a bfloat16 sum of 48 shares is off by ~1e-2
        assert err <= 1e-5 * scale, (i, err, scale)
    prefix.backward()


def test_the_summed_gradient_goes_through_the_prompt_once(bf16):
    """After backward(), the LoRA weights' gradient is the prompt graph's vector-Jacobian
    product with the float32 sum (cast once to bfloat16), computed here by plain autograd on a
    fresh run of the prompt."""
    prompt = _prompt(bf16)
    for p in bf16.params:
        p.grad = None
    prefix = bf16._prefix(prompt)
    given = _shares(prefix, seed=2)
    summed = [sum(g[i].float() for g in given) for i in range(len(given[0]))]
    for p in bf16.params:  # the shares reach no LoRA weight before backward(): leaves stop them
        assert p.grad is None
    prefix.backward()
    assert prefix._leaves == []  # let go
    got = [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in bf16.params]

    for p in bf16.params:
        p.grad = None
    from transformers import DynamicCache

    from sapo_edge.backends.torch_decode import kv_cache

    decoder = bf16.lm.get_decoder()
    cache = DynamicCache(config=bf16.model.config)
    decoder(input_ids=torch.tensor([prompt[:-1]]), **kv_cache(decoder, cache))
    outputs = [t for layer in cache.layers for t in (layer.keys, layer.values)]
    torch.autograd.backward(outputs, [s.to(torch.bfloat16) for s in summed])
    moved = 0
    for g, p in zip(got, bf16.params, strict=True):
        want = p.grad if p.grad is not None else torch.zeros_like(g)
        assert torch.equal(g, want)
        moved += bool(want.abs().sum() > 0)
    # the last layer's o/gate/up/down do not reach its keys and values; all else does
    assert moved >= len(got) // 2


@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_the_prompt_s_gradient_is_one_run_with_the_graph_s(tiny_qwen, dropout):
    """Without dropout the prompt's first run keeps no graph (no tensor saved for a backward)
    and backward() runs it again; with dropout (masks a second run would not redraw) the first
    run keeps its graph. Either way the LoRA gradient is the one a single run with the graph
    gives, bit for bit."""
    from transformers import DynamicCache

    from sapo_edge.backends.torch_decode import kv_cache

    cfg = Config(model=str(tiny_qwen), dtype="float32", lora_r=4, lora_dropout=dropout)
    name = f"prefix_drop{int(dropout * 10)}"
    b = TorchBackend(tiny_qwen, cfg, adapter=name, device="cpu", log=lambda m: None)
    try:
        b.reset(3)
        comp = b.encode_completion("<answer>5</answer>", finished=True, max_new_tokens=16)
        b.train_step([Sample(MSGS, comp, 1.0)])  # LoRA B non-zero: dropout changes the keys
        b.model.train()
        prompt, decoder = _prompt(b), b.lm.get_decoder()

        def gradient(way: str, seed: int) -> list[torch.Tensor]:
            for p in b.params:
                p.grad = None
            torch.manual_seed(seed)
            if way == "shared":
                saved = []
                with torch.autograd.graph.saved_tensors_hooks(
                    lambda t: saved.append(t) or t, lambda t: t
                ):
                    prefix = b._prefix(prompt)
                assert bool(saved) == (dropout > 0)
                torch.manual_seed(99)  # the micro-batches draw on
                cache = prefix.cache(1)
            else:  # one run with the graph
                cache = DynamicCache(config=b.model.config)
                decoder(input_ids=torch.tensor([prompt[:-1]]), **kv_cache(decoder, cache))
            tensors = [t for layer in cache.layers for t in (layer.keys, layer.values)]
            gen = torch.Generator().manual_seed(5)
            sum((t * torch.randn(t.shape, generator=gen)).sum() for t in tensors).backward()
            if way == "shared":
                prefix.backward()
            return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in b.params]

        shared, reference = gradient("shared", 11), gradient("reference", 11)
        assert any(bool(r.abs().max() > 0) for r in reference)
        assert all(torch.equal(s, r) for s, r in zip(shared, reference, strict=True))
        if dropout:  # other masks, another gradient: the masks matter
            other = gradient("reference", 12)
            assert not all(torch.equal(o, r) for o, r in zip(other, reference, strict=True))
    finally:
        b.close()
