"""On a CUDA device the torch backend samples, trains and scores without cuDNN's attention, which
builds a plan for every new shape (backends/attention_kernels.py); the CPU's settings stay."""

import torch

from sapo_edge.backends import attention_kernels as ak
from sapo_edge.backends import torch_backend, torch_loss
from sapo_edge.backends.base import Sample
from sapo_edge.backends.torch_backend import TorchBackend
from sapo_edge.config import Config
from sapo_edge.prompts import build_messages


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
