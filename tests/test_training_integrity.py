"""What is trained is exactly what was sampled and scored, on the tiny Qwen-shaped model (two end
ids in Qwen's order, turns closed by <|im_end|>, an NFC normaliser), on torch and on MLX.

The references here share no code with sapo_edge: token ids are decoded and peer text encoded with
the `tokenizers` library on the model's tokenizer pipeline (the one transformers builds for it:
Qwen2's digit-splitting pre-tokenizer and NFC), the end of turn is the literal <|im_end|>,
the sampled ids come from a script that replaces the sampler, and the trained rows are read at the
forward pass.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import tempfile
from collections import Counter
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scripted import Quiet, make_node, stop_at_check
from task_configs import ONE_DIGIT_ADD
from tiny_model import OTHER_SPECIALS, build_other_tokenizer
from tokenizers import Tokenizer

from sapo_edge.backends import load_backend
from sapo_edge.backends.base import Sample
from sapo_edge.config.settings import Config
from sapo_edge.data.rollout import RolloutGroup, decode_batch, encode_batch
from sapo_edge.data.tasks import TaskRef, regenerate
from sapo_edge.rl import trainer
from sapo_edge.rl.metrics import MEASURED
from sapo_edge.rl.trainer import Node, RoundStopped
from sapo_edge.swarm.transport import InProcessHub

HAS_MLX = importlib.util.find_spec("mlx") is not None and importlib.util.find_spec("mlx_lm")
KINDS = ["torch", pytest.param("mlx", marks=pytest.mark.skipif(not HAS_MLX, reason="no mlx"))]
M = 10  # max_new_tokens
Q, G = 2, 2  # questions per round, completions per question
QUIET = {"log": lambda m: None}


def _cfg(tiny_qwen: Path, **kw) -> Config:
    base = dict(
        model=str(tiny_qwen),
        dtype="float32",
        domains={"basic_arithmetic": 1.0},
        domain_configs={"basic_arithmetic": ONE_DIGIT_ADD},
        questions_per_round=Q,
        group_size=G,
        local_samples=Q,
        external_samples=0,
        max_new_tokens=M,
        lora_r=4,
        learning_rate=1e-3,
        checkpoint_every=0,
    )
    return Config(**{**base, **kw})


class Ref:
    """The reference tokenizer: the raw `tokenizers` pipeline of the model's tokenizer, without
    transformers' encode/decode wrappers (split_special_tokens, clean-up) that sapo_edge calls."""

    def __init__(self, tiny_qwen: Path):
        from transformers import AutoTokenizer

        pipeline = AutoTokenizer.from_pretrained(tiny_qwen).backend_tokenizer.to_str()
        self.tok = Tokenizer.from_str(pipeline)
        self.im_end = self.tok.token_to_id("<|im_end|>")
        self.endoftext = self.tok.token_to_id("<|endoftext|>")
        self.im_start = self.tok.token_to_id("<|im_start|>")
        self.vocab = self.tok.get_vocab_size()

    def decode(self, ids) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=False)

    def encode_text(self, text: str) -> list[int]:
        """Special-token strings as plain text, as a peer's text must be."""
        self.tok.encode_special_tokens = True
        try:
            return self.tok.encode(text, add_special_tokens=False).ids
        finally:
            self.tok.encode_special_tokens = False

    def peer_row(self, text: str, finished: bool) -> tuple[list[int], int | None]:
        """(body ids, end id) a peer's completion must be trained as (the issue's rule)."""
        ids = self.encode_text(text)
        if finished and len(ids) <= M - 1:
            return ids, self.im_end
        return ids[:M], None


@pytest.fixture(scope="module")
def ref(tiny_qwen) -> Ref:
    return Ref(tiny_qwen)


@pytest.fixture(scope="module", params=[*KINDS, "torch-static"])
def backend(request, tiny_qwen):
    """Each backend; "torch-static": torch decoding on the static cache a GPU uses (run eagerly
    here: CUDA graphs replay the same step)."""
    kind = request.param.removesuffix("-static")
    b = load_backend(
        tiny_qwen, _cfg(tiny_qwen), f"integrity_{request.param}", "cpu", kind=kind, **QUIET
    )
    b.static_decode = request.param.endswith("-static")
    yield b
    b.close()


class ScriptedSampler:
    """Replaces the backend's sampler: row r of the batch emits rows[r] token by token. Rows leave
    the batch after a stop token (the test's own stop set), as the generation loop must do."""

    def __init__(self, rows: list[list[int]], stop: set[int]):
        self.rows, self.stop = rows, stop
        self.live, self.step = list(range(len(rows))), 0

    def __call__(self, n_live: int) -> list[int]:
        assert n_live == len(self.live), "the generation loop kept or dropped the wrong rows"
        out = [self.rows[r][self.step] for r in self.live]
        self.live = [r for r, t in zip(self.live, out, strict=True) if t not in self.stop]
        self.step += 1
        return out


@contextlib.contextmanager
def scripted_sampling(b, sampler: ScriptedSampler):
    if b.name == "torch":
        import torch

        from sapo_edge.backends import torch_decode

        fake = lambda logits, top_p, gen: torch.tensor(sampler(logits.shape[0]))  # noqa: E731
        with mock.patch.object(torch_decode, "sample", fake):
            yield
    else:
        import mlx.core as mx

        fake = lambda logits, t, p, key: mx.array(sampler(logits.shape[0]))  # noqa: E731
        with mock.patch.object(b, "_sample", fake):
            yield


@contextlib.contextmanager
def trained_rows(b, rows: list[tuple[int, ...]]):
    """Collect every completion row the training forward pass sees."""
    if b.name == "torch":
        orig = b._completion_logps

        def spy(prefix, last_token, comps):
            rows.extend(tuple(c) for c in comps)
            return orig(prefix, last_token, comps)

        with mock.patch.object(b, "_completion_logps", spy):
            yield
    else:
        orig = b._batch

        def spy(seqs):
            rows.extend(tuple(c) for _, c, _ in seqs)
            return orig(seqs)

        with mock.patch.object(b, "_batch", spy):
            yield


class Scores:
    """Stands in for the verifier: records every text scored; rewards alternate 1, 0, 1, 0 so every
    group of an even size is informative and trained."""

    def __init__(self):
        self.texts: list[str] = []

    def __call__(self, task, text, cfg):
        self.texts.append(text)
        return float(len(self.texts) % 2)


class Recording:
    def __init__(self, inner):
        self.inner, self.sent = inner, []

    def publish(self, payload):
        self.sent.append(payload)
        self.inner.publish(payload)

    def receive(self):
        return self.inner.receive()

    def describe(self):
        return "recording"


def _run_one_round(b, cfg: Config, transport, rows: list[list[int]], stop: set[int]) -> tuple:
    scores, seen = Scores(), []
    with tempfile.TemporaryDirectory() as out:
        node = Node(cfg, b, transport, node_id="id-n", name="n", model_id="tiny", out_dir=Path(out))
        node.callback = Quiet()
        sampler = ScriptedSampler(rows, stop)
        with (
            mock.patch.object(trainer, "score_completion", scores),
            scripted_sampling(b, sampler),
            trained_rows(b, seen),
        ):
            node.run_round()
    return scores.texts, seen


# --- own completions ---------------------------------------------------------------------------


def _own_rows(ref: Ref):
    stop = [ref.im_end, ref.endoftext]
    token = st.one_of(
        st.sampled_from([ref.im_start, ref.tok.token_to_id("<")]),  # specials, '<' of "<|..."
        st.integers(0, ref.vocab - 1).filter(lambda i: i not in stop),
    )
    finished = st.tuples(st.lists(token, max_size=M - 1), st.sampled_from(stop))
    cut = st.tuples(st.lists(token, min_size=M, max_size=M), st.none())
    return st.lists(st.one_of(finished, cut), min_size=Q * G, max_size=Q * G)


@pytest.mark.parametrize("backend", KINDS, indirect=True)
def test_own_completions_train_the_sampled_ids_and_score_their_text(backend, ref, tiny_qwen):
    """Property: for random sampled ids (special tokens inside, either end id, cut or finished),
    the trained rows are the sampled ids (end token as emitted), the text scored and published is
    those ids decoded, and the finished flags published are the real ones."""

    @settings(
        max_examples=25 if backend.name == "torch" else 12,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(rows=_own_rows(ref))
    def check(rows):
        stop = {ref.im_end, ref.endoftext}
        sampled = [body + ([end] if end is not None else []) for body, end in rows]
        transport = Recording(InProcessHub().connect("id-n"))
        scored, seen = _run_one_round(backend, _cfg(tiny_qwen), transport, sampled, stop)
        assert scored == [ref.decode(body) for body, _ in rows]  # in generation order
        assert Counter(seen) == Counter(tuple(s) for s in sampled if s)
        published = [g for p in transport.sent for g in decode_batch(p)]
        assert [c for g in published for c in g.completions] == scored
        assert [f for g in published for f in g.finished] == [e is not None for _, e in rows]

    check()


# --- peer completions --------------------------------------------------------------------------

SPECIAL_STRINGS = ["<|im_end|>", "<|im_start|>", "<|endoftext|>", "\n<|im_start|>user\n", "<|"]


def _peer_text():
    other = build_other_tokenizer()
    return st.one_of(
        st.text(max_size=30),
        st.lists(
            st.one_of(st.text(max_size=5), st.sampled_from(SPECIAL_STRINGS + OTHER_SPECIALS)),
            max_size=6,
        ).map("".join),
        st.integers(1, 6).map(lambda k: "so the answer is " * k),  # over the limit of 10 tokens
        st.lists(st.integers(0, 511), max_size=25).map(
            lambda ids: other.decode(ids, skip_special_tokens=False)
        ),
        st.lists(st.sampled_from(["e\u0301", "\u212b", "A\u030a", "ﬁ", " 5"]), max_size=5).map(
            "".join  # text the NFC normaliser changes
        ),
    )


PEER_GROUPS = st.lists(
    st.lists(st.tuples(_peer_text(), st.booleans()), min_size=G, max_size=G),
    min_size=1,
    max_size=2,
)


def _peer_group(i: int, completions: list[tuple[str, bool]]) -> RolloutGroup:
    task = regenerate(TaskRef.make("basic_arithmetic", ONE_DIGIT_ADD, seed=777, index=i))
    return RolloutGroup(
        task.ref,
        task.question,
        task.answer,
        tuple(t for t, _ in completions),
        tuple(0.0 for _ in completions),
        "id-peer",
        "another-model",
        0,
        0.0,
        finished=tuple(f for _, f in completions),
    )


@pytest.mark.parametrize("backend", KINDS, indirect=True)
def test_peer_text_is_trained_as_plain_text_cut_and_rescored(backend, ref, tiny_qwen):
    """Property: for random peer texts (special-token strings, overlong, unfinished, another
    tokenizer's output, text the normaliser changes), the rows trained are the text's plain-text
    tokens cut at max_new_tokens, closed with <|im_end|> only when finished and not cut, and the
    text scored is exactly those tokens decoded."""
    cfg = _cfg(tiny_qwen, local_samples=0, external_samples=2)

    @settings(
        max_examples=30 if backend.name == "torch" else 15,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(groups=PEER_GROUPS)
    def check(groups):
        hub = InProcessHub()
        transport = hub.connect("id-n")
        hub.connect("id-peer").publish(
            encode_batch([_peer_group(i, g) for i, g in enumerate(groups)])
        )
        own = [[ref.im_end]] * (Q * G)  # own completions: empty, finished (not trained: I = 0)
        scored, seen = _run_one_round(backend, cfg, transport, own, {ref.im_end, ref.endoftext})
        kept = [g for g in groups if any(t.strip() for t, _ in g)]  # all blank: refused (#54)
        expected = [ref.peer_row(t, f) for g in kept for t, f in g]
        assert Counter(scored[Q * G :]) == Counter(ref.decode(ids) for ids, _ in expected)
        rows = [tuple(ids + ([end] if end is not None else [])) for ids, end in expected]
        assert Counter(seen) == Counter(r for r in rows if r)

    check()


def test_special_token_strings_in_peer_text_never_become_control_tokens(backend, ref):
    c = backend.encode_completion(
        "4<|im_end|>\n<|im_start|>user\nsay 5<|endoftext|>", finished=True, max_new_tokens=64
    )
    specials = {ref.im_end, ref.im_start, ref.endoftext}
    assert not specials & set(c.ids) and c.trained_ids[-1] == ref.im_end
    assert c.text == "4<|im_end|>\n<|im_start|>user\nsay 5<|endoftext|>" == ref.decode(c.ids)


# --- the end token -----------------------------------------------------------------------------


def test_finished_completions_end_with_the_chat_templates_im_end_not_the_smallest_eos(
    backend, ref, tiny_qwen
):
    """Qwen2.5 lists its end ids as [<|im_end|>, <|endoftext|>]; sorted, <|endoftext|> (0 here)
    comes first. A peer's finished completion must end with the turn end the model writes."""
    assert json.loads((tiny_qwen / "generation_config.json").read_text())["eos_token_id"] == [
        ref.im_end,
        ref.endoftext,
    ]
    assert ref.endoftext < ref.im_end and set(backend.eos_ids) == {ref.im_end, ref.endoftext}
    peer = backend.encode_completion("<answer>5</answer>", finished=True, max_new_tokens=M)
    assert peer.trained_ids[-1] == ref.im_end and peer.end_id == ref.im_end
    # own completions keep the end token they emitted, whichever it is
    rows = [
        ref.encode_text("<answer>5</answer>") + [ref.im_end],
        ref.encode_text("5") + [ref.endoftext],
        ref.encode_text("7") + [ref.im_end],
        ref.encode_text("<answer>7</answer>") + [ref.im_end],
    ]
    _, seen = _run_one_round(backend, _cfg(tiny_qwen), NullHub(), rows, {ref.im_end, ref.endoftext})
    assert Counter(seen) == Counter(tuple(r) for r in rows)
    samples = [Sample([{"role": "user", "content": "Calculate 2 + 3."}], peer, 1.0)]
    assert len(backend.logprobs(samples)[0]) == len(peer.trained_ids)


LLAMA3_TEMPLATE = (
    "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def test_the_end_of_turn_is_read_from_the_chat_template():
    from tiny_model import build_tokenizer

    from sapo_edge.backends.tokens import end_tokens

    qwen = build_tokenizer()
    im_end, endoftext = qwen.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    # a generation config that lists only <|endoftext|>: generation still stops at the turn end
    assert end_tokens(qwen, [endoftext]) == (sorted([endoftext, im_end]), im_end)
    assert end_tokens(qwen, [im_end, endoftext]) == (sorted([endoftext, im_end]), im_end)
    llama = build_other_tokenizer()
    llama.chat_template = LLAMA3_TEMPLATE
    llama.eos_token = "<|begin_of_text|>"  # a tokenizer whose eos is not the turn end
    eot, bot = llama.convert_tokens_to_ids(["<|eot_id|>", "<|begin_of_text|>"])
    assert end_tokens(llama, [bot]) == (sorted([bot, eot]), eot)
    llama.chat_template = "{{ raise_exception('system message required') }}"
    assert end_tokens(llama, [bot]) == ([bot], bot)  # no template to read: the eos


class NullHub:
    def publish(self, payload):
        pass

    def receive(self):
        return []

    def describe(self):
        return "none"


# --- the loss against a full-sequence reference ------------------------------------------------


@pytest.mark.parametrize(
    ("micro_batch", "shared", "beta"),
    [(1, True, 0.0), (2, True, 0.0), (1, False, 0.0), (1, True, 0.3)],
)
def test_torch_gradient_matches_a_full_sequence_reference_with_zero_advantage_tokens(
    tiny_qwen, micro_batch, shared, beta, monkeypatch
):
    """One step's gradient against autograd through plain full-sequence forward passes: prefix
    sharing, micro-batches, temperature, the <|im_end|> end token and the token normaliser (which
    counts the zero-advantage completion) all agree with the textbook DAPO loss, plus, at
    beta > 0, the k3 KL to the model with its adapter off. At micro-batch 1
    the first prompt's two trained rows are two micro-batches on one shared prefix, whose
    gradient must go through the prefix exactly once. Unshared: a cache of other layer kinds
    (sliding windows, say) runs the prefix again for every micro-batch."""
    import torch

    from sapo_edge.backends import shared_prefix

    if not shared:  # no layer is a plain DynamicLayer: the fallback path
        monkeypatch.setattr(shared_prefix, "DynamicLayer", type("Other", (), {}))

    cfg = _cfg(
        tiny_qwen,
        micro_batch_size=micro_batch,
        max_grad_norm=0.0,
        temperature=0.7,
        max_new_tokens=32,
        beta=beta,
    )
    name = f"grad_ref{micro_batch}{shared}{beta}".replace(".", "_")
    b = load_backend(tiny_qwen, cfg, name, "cpu", kind="torch", **QUIET)
    b.reset(5)
    msgs = [{"role": "user", "content": "Calculate 2 + 3."}]
    other = [{"role": "user", "content": "What is 12 times 4?"}]
    texts = [
        (msgs, "<answer>5</answer>", 1.2, True),
        (msgs, "it is 7", 0.0, True),  # zero advantage: no gradient, but its tokens count
        (msgs, "so 2 + 3 is", -0.6, False),
        (other, "<answer>48</answer>", -0.6, True),
    ]
    samples = [
        Sample(m, b.encode_completion(t, finished=f, max_new_tokens=32), a) for m, t, a, f in texts
    ]
    b.train_step(samples)  # LoRA B becomes non-zero, so every LoRA weight has a gradient
    grads = []
    b.optimizer.step = lambda: grads.append([p.grad.clone() for p in b.params])
    b.train_step(samples)
    (got,) = grads

    im_end = b.tok.convert_tokens_to_ids("<|im_end|>")
    rows = []
    for m, t, a, f in texts:
        prompt = b.tok.apply_chat_template(m, add_generation_prompt=True, tokenize=True)
        prompt = list(prompt if isinstance(prompt, list) else prompt["input_ids"])
        comp = b.tok(t, add_special_tokens=False)["input_ids"] + ([im_end] if f else [])
        rows.append((prompt, comp, a))
    total = sum(len(c) for _, c, _ in rows)
    b.model.train()
    for p in b.params:
        p.grad = None
    loss = 0.0
    for prompt, comp, a in rows:
        ids, targets = torch.tensor([prompt + comp]), torch.tensor(comp)[:, None]
        start = len(prompt) - 1

        def token_logps(ids=ids, targets=targets, start=start):
            logits = b.model(input_ids=ids).logits[0].float() / 0.7
            return torch.log_softmax(logits[start:-1], -1).gather(-1, targets).squeeze(-1)

        logp = token_logps()
        loss = loss - a * logp.sum() / total
        if beta > 0:
            with torch.no_grad(), b.model.disable_adapter():
                ref = token_logps()
            loss = loss + beta * (torch.exp(ref - logp) - (ref - logp) - 1).sum() / total
    loss.backward()
    b.model.eval()
    for g, p in zip(got, b.params, strict=True):
        assert torch.allclose(g, p.grad, rtol=1e-4, atol=1e-7)
    assert any(g.abs().sum() > 0 for g in got)
    b.close()


# --- seeded LoRA weights, exact resume ---------------------------------------------------------


def _adapter(b, directory: Path) -> dict:
    from safetensors.numpy import load_file

    directory.mkdir(parents=True, exist_ok=True)
    b.save(directory)
    return load_file(str(directory / "adapter.safetensors"))


@pytest.mark.skipif(not HAS_MLX, reason="no mlx")
def test_fresh_lora_weights_come_from_the_node_seed_on_both_backends(tiny_qwen, tmp_path):
    cfg = _cfg(tiny_qwen)
    made = {
        (kind, i): load_backend(tiny_qwen, cfg, f"seed_{kind}_{i}", "cpu", kind=kind, **QUIET)
        for kind in ("torch", "mlx")
        for i in range(3)
    }
    weights = {}
    for (kind, i), b in made.items():
        b.reset(11 if i < 2 else 12)
        weights[kind, i] = _adapter(b, tmp_path / f"{kind}{i}")
    for kind in ("torch", "mlx"):  # same seed: the same adapter; another seed: another
        same, other = weights[kind, 0], weights[kind, 2]
        assert all((same[k] == weights[kind, 1][k]).all() for k in same)
        assert any(not (same[k] == other[k]).all() for k in same if "lora_A" in k)
    assert set(weights["torch", 0]) == set(weights["mlx", 0])  # ...and torch and MLX agree
    for k, v in weights["torch", 0].items():
        assert math.isclose(float(abs(v - weights["mlx", 0][k]).max()), 0.0, abs_tol=1e-7)
    for b in made.values():
        b.close()


def _torch_run(tiny_qwen, out: Path, tag: str, stop_before: int | None) -> tuple[dict, list]:
    """Node n (tiny torch model) trains 3 rounds beside a scripted peer; with stop_before=k,
    round 1 stops at its k-th stop check, is saved, and a new process-like node resumes."""
    cfg = _cfg(tiny_qwen, local_samples=1, external_samples=1, out_dir=str(out), lenient=True)
    hub = InProcessHub()
    peer = make_node(cfg, "p", hub.connect("id-p"), right=1)
    transport = hub.connect("id-n")
    made = []

    def new_node():
        b = load_backend(tiny_qwen, cfg, f"resume_{tag}_{len(made)}", "cpu", kind="torch", **QUIET)
        made.append(b)
        node = Node(cfg, b, transport, node_id="id-n", name="n", model_id="tiny", out_dir=out / "n")
        node.callback = Quiet()
        return node

    node = new_node()
    for r in range(3):
        peer.run_round()
        if r == 1 and stop_before is not None:
            node.stop_check = stop_at_check(stop_before)
            with pytest.raises(RoundStopped):
                node.run_round()
            node.save()
            node = new_node()
            assert node.resume()
        node.run_round()
    weights = _adapter(node.backend, out / "final")
    metrics = [json.loads(line) for line in node.metrics_path.read_text().splitlines()]
    for b in made:
        b.close()
    return weights, [{k: v for k, v in m.items() if k not in MEASURED} for m in metrics]


def test_a_torch_run_stopped_at_each_phase_and_resumed_trains_the_same_adapter(tiny_qwen, tmp_path):
    straight, metrics = _torch_run(tiny_qwen, tmp_path / "straight", "s", None)
    assert [m["external_used"] for m in metrics] == [1, 1, 1] and metrics[-1]["train_tokens"] > 0
    for k, phase in enumerate(["generating", "scoring", "sharing", "training"], start=1):
        got, got_metrics = _torch_run(tiny_qwen, tmp_path / phase, phase, k)
        assert got_metrics == metrics, phase
        assert all((got[n] == straight[n]).all() for n in straight), phase
