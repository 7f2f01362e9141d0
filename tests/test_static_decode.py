"""The static-cache decoder a GPU replays as CUDA graphs (static_decode.py), run eagerly on the
CPU against the growing cache the CPU decodes with: the same tokens for the same seed, finished
rows dropped from what is sampled (so the random stream is the same), left padding handled."""

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from sapo_edge.backends.static_decode import StaticDecoder  # noqa: E402
from sapo_edge.backends.torch_backend import TorchBackend  # noqa: E402
from sapo_edge.backends.torch_decode import GrowingDecoder  # noqa: E402
from sapo_edge.config.settings import Config  # noqa: E402

PROMPTS = [
    [{"role": "user", "content": "Calculate 2 + 3."}],  # shorter: left-padded
    [{"role": "user", "content": "Calculate 9 + 1 and explain it at length, step by step."}],
]


def _backend(tiny_qwen: Path, adapter: str) -> TorchBackend:
    cfg = Config(model=str(tiny_qwen), max_new_tokens=16, lora_r=4, dtype="float32")
    b = TorchBackend(tiny_qwen, cfg, adapter=adapter, device="cpu", log=lambda m: None)
    torch.manual_seed(1)
    with torch.no_grad():  # a trained-looking adapter: B != 0, so LoRA changes the logits
        for p in b.params:
            p.normal_(0.0, 0.2)
    return b


def _ids(b, **kw):
    # the tiny random model rarely says its end id: call one token in ten an end, so rows end
    # at different steps and the running batch shrinks
    b.eos_ids = list(range(3, len(b.tok), 10))
    groups = b.generate(PROMPTS, 3, max_new_tokens=14, top_p=1.0, **kw)
    return [c.trained_ids for grp in groups for c in grp], [
        c.finished for grp in groups for c in grp
    ]


@pytest.mark.parametrize(("temperature", "seed"), [(1.0, 0), (1.0, 5), (0.7, 3)])
def test_the_static_cache_samples_the_growing_cache_s_tokens(tiny_qwen, temperature, seed):
    b = _backend(tiny_qwen, f"static{seed}")
    b.static_decode = False
    grown, grown_done = _ids(b, temperature=temperature, seed=seed)
    b.static_decode = True
    static, static_done = _ids(b, temperature=temperature, seed=seed)
    assert static == grown and static_done == grown_done
    # the case that matters: some rows finished early while others ran on
    assert any(grown_done) and len({len(i) for i in grown}) > 1
    b.close()


def test_each_step_s_logits_match_while_rows_finish(tiny_qwen):
    """Step by step, the same input tokens: the static decoder's logits for the running rows are
    the growing decoder's, after rows are dropped too."""
    b = _backend(tiny_qwen, "steps")
    b._activate()
    ids, mask = b._left_pad([b._prompt_ids(m) for m in PROMPTS])
    assert (mask == 0).any()  # one prompt is left-padded
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        grow = GrowingDecoder(b.model, b.lm, ids, mask, pos, 2, 8)
        stat = StaticDecoder(b.model, b.lm, ids, mask, pos, 2, 8)
        gen = torch.Generator().manual_seed(0)
        for step in range(8):
            a, s = grow.run(), stat.run()
            torch.testing.assert_close(s, a, rtol=1e-5, atol=1e-5)
            tok = torch.randint(0, a.shape[1], (len(a),), generator=gen)
            if step == 3:  # the second row finishes
                keep = torch.tensor([k for k in range(len(a)) if k != 1])
                grow.drop(keep)
                stat.drop(keep)
                tok = tok[keep]
            grow.advance(tok)
            stat.advance(tok)
    b.close()


def test_capture_is_only_tried_on_a_cuda_device(tiny_qwen):
    b = _backend(tiny_qwen, "nocapture")
    ids, mask = b._left_pad([b._prompt_ids(m) for m in PROMPTS])
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    said = []
    with torch.inference_mode():
        dec = StaticDecoder(b.model, b.lm, ids, mask, pos, 1, 4)
        dec.capture_or_say(said.append)
    assert dec.graph is None and said == []
    b.close()
