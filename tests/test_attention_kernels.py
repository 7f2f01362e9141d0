"""On a CUDA device the torch backend samples, trains and scores without cuDNN's attention, which
builds a plan for every new shape (backends/attention_kernels.py); the CPU's kernel flags stay,
and on the CPU the kernel gets grouped key/value heads, not copies of them, with the same result."""

import pytest
import torch

from sapo_edge.backends import attention_kernels as ak
from sapo_edge.backends import torch_backend, torch_loss
from sapo_edge.backends.base import Sample
from sapo_edge.backends.torch_backend import TorchBackend
from sapo_edge.config.settings import Config
from sapo_edge.rl.prompts import build_messages


def _flags() -> tuple[bool, bool, bool, bool]:
    c = torch.backends.cuda
    return (
        c.cudnn_sdp_enabled(),
        c.flash_sdp_enabled(),
        c.mem_efficient_sdp_enabled(),
        c.math_sdp_enabled(),
    )


def test_cuda_turns_cudnn_attention_off_for_the_duration_only():
    before = _flags()
    assert before[0]  # torch's default: cuDNN allowed
    with ak.attention_kernels("cuda:0"):
        assert _flags() == (False, True, True, True)
    assert _flags() == before
    with ak.attention_kernels("cpu"):
        assert _flags() == before


def test_generate_train_and_logprobs_run_inside_it(tiny_qwen, monkeypatch):
    seen = []

    def recorder(device):
        seen.append(device)
        return ak.attention_kernels(device)

    monkeypatch.setattr(torch_backend, "attention_kernels", recorder)
    monkeypatch.setattr(torch_loss, "attention_kernels", recorder)
    cfg = Config(model=str(tiny_qwen), dtype="float32", group_size=2, max_new_tokens=4)
    b = TorchBackend(tiny_qwen, cfg, adapter="attn", device="cpu", log=lambda m: None)
    try:
        msgs = build_messages("Calculate 1 + 1.")
        groups = b.generate([msgs], 2, max_new_tokens=4, temperature=1.0, top_p=1.0, seed=0)
        samples = [Sample(msgs, c, a) for c, a in zip(groups[0], (1.0, -1.0), strict=True)]
        b.train_step(samples)
        b.logprobs(samples)
    finally:
        b.close()
    assert seen == ["cpu", "cpu", "cpu"]


def _run(tiny_qwen):
    """Tokens sampled, log-probs scored, and the LoRA gradients of one step."""
    cfg = Config(model=str(tiny_qwen), dtype="float32", group_size=3, max_new_tokens=6)
    b = TorchBackend(tiny_qwen, cfg, adapter="gqa", device="cpu", log=lambda m: None)
    try:
        b.reset(7)  # the same LoRA weights in both runs
        msgs = [build_messages("Calculate 1 + 1."), build_messages("Calculate 12 + 30.")]
        groups = b.generate(msgs, 3, max_new_tokens=6, temperature=1.0, top_p=1.0, seed=3)
        samples = [
            Sample(m, c, a)
            for m, g in zip(msgs, groups, strict=True)
            for c, a in zip(g, (1.0, -1.0, 0.5), strict=True)
        ]
        logps = b.logprobs(samples)
        grads = []
        b.optimizer.step = lambda: grads.extend(p.grad.clone() for p in b.params)
        b.train_step(samples)
    finally:
        b.close()
    return [[c.ids for c in g] for g in groups], logps, grads


def test_cpu_attention_groups_the_heads_in_the_kernel_with_the_same_result(tiny_qwen, monkeypatch):
    import inspect

    import torch.nn.functional as F
    from transformers.integrations import sdpa_attention

    if ak.GQA_SWITCH not in inspect.getsource(sdpa_attention):
        pytest.skip("this transformers has no switch for grouped heads in the kernel")

    sdpa, seen = F.scaled_dot_product_attention, []

    def recorded(q, k, v, *args, **kwargs):
        seen.append((q.shape[1], k.shape[1], bool(kwargs.get("enable_gqa")), q.shape[2]))
        return sdpa(q, k, v, *args, **kwargs)

    monkeypatch.setenv(ak.GQA_SWITCH, "0")  # transformers copies the heads: the reference
    ids0, logps0, state0 = _run(tiny_qwen)
    monkeypatch.delenv(ak.GQA_SWITCH)  # the backend's own choice
    monkeypatch.setattr(F, "scaled_dot_product_attention", recorded)
    ids1, logps1, state1 = _run(tiny_qwen)
    # the tiny Qwen has 4 query heads and 2 key/value heads: the kernel got 2, grouped, for
    # several positions a row (prefill, scoring, training); a decode step's 4 query heads were
    # folded onto the 2 key/value heads, 2 query positions each (cpu_sdpa)
    many = {(q, kv, gqa) for q, kv, gqa, n in seen if n > 1 and n != 2}
    assert many == {(4, 2, True)}
    assert {(q, kv, gqa) for q, kv, gqa, n in seen if n == 2 and q == kv} == {(2, 2, False)}
    assert ids1 == ids0
    assert logps1 == logps0  # bit for bit
    assert len(state1) == len(state0) > 0 and any(g.abs().max() > 0 for g in state0)
    for g1, g0 in zip(state1, state0, strict=True):  # the grouped heads' gradients add up in
        torch.testing.assert_close(g1, g0, rtol=1e-5, atol=1e-7)  # another order


def test_the_switch_is_on_while_a_cpu_backend_works_and_a_user_choice_is_kept(monkeypatch):
    monkeypatch.delenv(ak.GQA_SWITCH, raising=False)
    with ak.attention_kernels("cpu"):
        with ak.attention_kernels("cpu"):  # another node, on another thread
            assert ak.os.environ[ak.GQA_SWITCH] == "1"
        assert ak.os.environ[ak.GQA_SWITCH] == "1"  # still one at work
    assert ak.GQA_SWITCH not in ak.os.environ  # a CUDA model after it is not affected
    with ak.attention_kernels("cuda:0"):
        assert ak.GQA_SWITCH not in ak.os.environ
    monkeypatch.setenv(ak.GQA_SWITCH, "0")
    with ak.attention_kernels("cpu"):
        assert ak.os.environ[ak.GQA_SWITCH] == "0"
    assert ak.os.environ[ak.GQA_SWITCH] == "0"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("masked", [False, True])
def test_a_folded_decode_step_is_attention_over_each_key_value_head(dtype, masked):
    """cpu_sdpa against attention written out by hand with each key/value head copied
    for its query heads (transformers' eager arithmetic), with and without a padding mask."""
    from types import SimpleNamespace

    g = torch.Generator().manual_seed(0)
    b, h, kv, d, n = 3, 6, 2, 8, 5
    q = torch.randn(b, h, 1, d, generator=g).to(dtype)
    k, v = (torch.randn(b, kv, n, d, generator=g).to(dtype) for _ in range(2))
    keep = torch.ones(b, 1, 1, n, dtype=torch.bool)
    keep[1, ..., :2] = False  # row 1's first two positions are padding
    module = SimpleNamespace(num_key_value_groups=h // kv, training=False)
    out, _ = ak.cpu_sdpa(module, q, k, v, keep if masked else None, dropout=0.0, scaling=d**-0.5)
    kr, vr = (t.float().repeat_interleave(h // kv, 1) for t in (k, v))
    scores = q.float() @ kr.transpose(-1, -2) * d**-0.5
    if masked:
        scores = scores.masked_fill(~keep, float("-inf"))
    want = (scores.softmax(-1) @ vr).transpose(1, 2)  # [b, 1, h, d], as transformers returns
    assert out.shape == (b, 1, h, d) and out.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.float(), want, rtol=tol, atol=tol)


def test_the_fold_is_left_to_transformers_where_it_does_not_apply(monkeypatch):
    """Several query positions, a head-wise mask or one key/value head per query head: the call
    goes to transformers' own attention unchanged."""
    from types import SimpleNamespace

    with ak.attention_kernels("cpu"):
        pass  # registers the fold
    calls = []
    monkeypatch.setattr(ak, "_SDPA", [lambda *a, **k: calls.append(a[1].shape) or ("own", None)])
    grouped = SimpleNamespace(num_key_value_groups=2, training=False)
    plain = SimpleNamespace(num_key_value_groups=1, training=False)
    k = torch.zeros(1, 2, 3, 4)
    assert ak.cpu_sdpa(grouped, torch.zeros(1, 4, 2, 4), k, k, None)[0] == "own"
    head_mask = torch.ones(1, 4, 1, 3, dtype=torch.bool)
    assert ak.cpu_sdpa(grouped, torch.zeros(1, 4, 1, 4), k, k, head_mask)[0] == "own"
    assert ak.cpu_sdpa(plain, torch.zeros(1, 2, 1, 4), k, k, None)[0] == "own"
    assert len(calls) == 3
    assert ak.cpu_sdpa(grouped, torch.zeros(1, 4, 1, 4), k, k, None)[0] != "own"


def test_half_precision_attention_over_several_positions_runs_in_float32(monkeypatch):
    """torch's bfloat16 CPU attention kept a kernel for every new sequence length (+1.4 GB over
    400 lengths) and was slower than float32: a call over several positions is computed in
    float32 and rounded back once; a decode step stays in bfloat16."""
    from types import SimpleNamespace

    import torch.nn.functional as F

    with ak.attention_kernels("cpu"):
        pass  # registers the CPU attention
    sdpa, seen = F.scaled_dot_product_attention, []

    def recorded(q, k, v, *args, **kwargs):
        seen.append((q.dtype, k.dtype, q.shape[2]))
        return sdpa(q, k, v, *args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", recorded)
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, 5, 8, generator=g).to(torch.bfloat16)
    k, v = (torch.randn(2, 2, 5, 8, generator=g).to(torch.bfloat16) for _ in range(2))
    module = SimpleNamespace(num_key_value_groups=2, training=False, is_causal=True)
    out, _ = ak.cpu_sdpa(module, q, k, v, None, dropout=0.0, scaling=8**-0.5)
    assert out.dtype == torch.bfloat16 and seen[-1][:2] == (torch.float32, torch.float32)
    want = sdpa(q.float(), k.float(), v.float(), is_causal=True, enable_gqa=True, scale=8**-0.5)
    assert torch.equal(out, want.transpose(1, 2).to(torch.bfloat16))
    ak.cpu_sdpa(module, q[:, :, :1], k, v, None, dropout=0.0, scaling=8**-0.5)
    assert seen[-1][0] == torch.bfloat16  # a decode step: bfloat16, heads folded
