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
        seen.append((q.shape[1], k.shape[1], bool(kwargs.get("enable_gqa"))))
        return sdpa(q, k, v, *args, **kwargs)

    monkeypatch.setenv(ak.GQA_SWITCH, "0")  # transformers copies the heads: the reference
    ids0, logps0, state0 = _run(tiny_qwen)
    monkeypatch.delenv(ak.GQA_SWITCH)  # the backend's own choice
    monkeypatch.setattr(F, "scaled_dot_product_attention", recorded)
    ids1, logps1, state1 = _run(tiny_qwen)
    # the tiny Qwen has 4 query heads and 2 key/value heads: the kernel got 2, grouped
    assert seen and set(seen) == {(4, 2, True)}
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
