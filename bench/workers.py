"""Benchmark workers, one process each, driven by bench/vs_trl.py over stdin/stdout.

    python bench/workers.py sapo|trl|trl-tuned|node SPEC_JSON

A worker loads its model, prints `READY`, then for every round waits for a `go` line on stdin,
runs the round and prints `RESULT {json}`. Everything else goes to stderr. Peak RSS is the
process's own (ru_maxrss), so each framework is measured in its own process.

- sapo: the torch backend on the fixed batch: generate G completions per question, score them,
  one GRPO/DAPO step on all of them (zero-advantage groups included, as TRL does).
- trl: TRL's GRPOTrainer on the same batch, model, LoRA, sampling and loss settings; one
  optimizer step per round (num_iterations=1, beta=0), its defaults otherwise (one batch of all
  the completions, no gradient checkpointing).
- trl-tuned: the same, as a TRL user on a small machine would set it (TRL_TUNED): gradient
  checkpointing, micro-batches with gradient accumulation, one generation batch per step.
- node: a real sapo-edge Node round (the trainer's code path) that also receives E external
  groups from 8 in-process peers before each round: the scaling table.
"""

from __future__ import annotations

import json
import resource
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from sapo_edge.config.settings import Config
from sapo_edge.data.task_sampler import TaskSampler
from sapo_edge.data.tasks import ONE_DIGIT_ADDITION, regenerate
from sapo_edge.rl.prompts import build_messages
from sapo_edge.rl.rewards import RewardConfig, score_completion

# The work of every worker: one-digit addition scored leniently (the demo's and the sweep's
# task). SmolLM2-135M gets ~0.1-0.3 on it, so the rewards within a group of completions differ
# and the train step has something to learn from; on the paper's domains it scores ~0 and every
# advantage is zero (nothing to train, nothing to compare).
REWARD = RewardConfig(lenient=True, lenient_credit=0.5)
TASK = {
    "domains": {"basic_arithmetic": 1.0},
    "domain_configs": {"basic_arithmetic": ONE_DIGIT_ADDITION},
}


@dataclass
class Spec:
    model_dir: str
    model_id: str = "HuggingFaceTB/SmolLM2-135M-Instruct"
    questions: int = 4
    group_size: int = 8
    max_new_tokens: int = 128
    rounds: int = 4  # including the warm-up round
    external: int = 0  # node worker: groups received from peers before each round
    dtype: str = "float32"
    seed: int = 2026  # picks the fixed reasoning-gym batch
    # a random-weight model (bench/qwen_shape.py) earns no reward, so no step would run: each
    # group's completions get stand_in_reward(position) instead, in every column
    stand_in_rewards: bool = False
    domains: dict = field(default_factory=lambda: dict(TASK["domains"]))
    domain_configs: dict = field(default_factory=lambda: dict(TASK["domain_configs"]))

    def config(self, **kw) -> Config:
        base = dict(
            model=self.model_dir,
            dtype=self.dtype,
            domains=self.domains,
            domain_configs=self.domain_configs,
            questions_per_round=self.questions,
            local_samples=self.questions,
            external_samples=0,
            group_size=self.group_size,
            max_new_tokens=self.max_new_tokens,
            lenient=True,
            lenient_credit=0.5,
            checkpoint_every=0,
        )
        return Config(**{**base, **kw})


def stand_in_reward(position: int, group_size: int) -> float:
    """1 for a completion at an even position of its group, 0 at an odd one: every group has a
    non-zero advantage and every completion trains (the most work a step can have)."""
    return float(position % group_size % 2 == 0)


def fixed_tasks(spec: Spec):
    """The same reasoning-gym questions for every worker, every round."""
    sampler = TaskSampler(spec.domains, spec.domain_configs, spec.seed)
    return [regenerate(ref) for ref in sampler.sample_batch(spec.questions)]


def informative_groups(rewards: list[float], group_size: int) -> int:
    """Groups of `group_size` consecutive rewards that are not all alike: those with a non-zero
    advantage, the only ones a GRPO step learns from."""
    groups = [rewards[i : i + group_size] for i in range(0, len(rewards), group_size)]
    return sum(len(set(g)) > 1 for g in groups)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def proc_mb() -> dict[str, float]:
    """Resident memory now (VmRSS) and its peak since reset_peak() (VmHWM), in MB (Linux)."""
    with open("/proc/self/status") as fh:
        rows = [line.split() for line in fh if line.startswith(("VmHWM", "VmRSS"))]
    return {r[0].rstrip(":"): int(r[1]) / 1024 for r in rows}


def reset_peak() -> bool:
    """Restart VmHWM from the current RSS (Linux's /proc/self/clear_refs); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return False
    return True


REST: dict[str, float] = {}  # rest_rss_mb, in every RESULT
_PEAK_RESET = [False]  # VmHWM was restarted at ready(): the rounds' own peak can be read


def rounds_peak_mb() -> float:
    """Peak RSS since ready() where VmHWM was reset there, else the process's whole peak."""
    return proc_mb()["VmHWM"] if _PEAK_RESET[0] else peak_rss_mb()


def page_in(model) -> None:
    """Read every weight once: a float32 safetensors file is memory-mapped, and its pages join
    the process's RSS only when first touched (SmolLM2's 538 MB file: 448 MB resident after
    loading), which would count part of the weights as the first round's memory."""
    import torch

    with torch.no_grad():
        for t in [*model.parameters(), *model.buffers()]:
            t.sum()


def ready(model=None) -> None:
    """Record the resting floor (the loaded model, every weight resident, and runtime, before any
    round: `rest_rss_mb` in every RESULT), start the rounds' own peak (loading a model peaks
    above what a round holds: 3.3 GB against 2.3 GB resting at Qwen2.5-0.5B's shapes) and tell
    the driver it is loaded."""
    if model is not None:
        page_in(model)
    release_memory()
    REST["rest_rss_mb"] = proc_mb()["VmRSS"]
    _PEAK_RESET[0] = reset_peak()
    print("READY", flush=True)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def wait_go() -> bool:
    line = sys.stdin.readline()
    return line.strip() == "go"


def report(**values) -> None:
    """One round's figures; `peak_rss_mb` is the process's peak so far unless values give it."""
    now = {"peak_rss_mb": peak_rss_mb(), "rounds_peak_rss_mb": rounds_peak_mb()}
    print("RESULT " + json.dumps({**REST, **now, **values}), flush=True)
    release_memory()


def release_memory() -> None:
    """Hand freed heap back to the OS between rounds: the workers wait side by side, so an idle
    one should not hold its last round's peak (its own peak RSS is already recorded)."""
    import gc

    from sapo_edge.backends.heap import trim

    gc.collect()
    trim()  # glibc's malloc_trim; a no-op elsewhere


# --------------------------------------------------------------------------------- sapo-edge
def generate_round(backend, spec: Spec, prompts: list, seed: int) -> list:
    """G completions of every prompt at the benchmark's sampling settings."""
    return backend.generate(
        prompts,
        spec.group_size,
        max_new_tokens=spec.max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        seed=seed,
    )


def scored_samples(
    tasks: list, prompts: list, groups: list, stand_in: bool = False
) -> tuple[list, list[float]]:
    """Each completion scored (or given its stand-in reward) and turned into a training sample
    with its group's advantage (the sampled ids, as trained), and the rewards in order."""
    from sapo_edge.backends.base import Sample
    from sapo_edge.rl.advantages import group_advantages

    samples, rewards = [], []
    for task, msgs, group in zip(tasks, prompts, groups, strict=True):
        if stand_in:
            scores = [stand_in_reward(j, len(group)) for j in range(len(group))]
        else:
            scores = [score_completion(task, g.text, REWARD) for g in group]
        rewards += scores
        samples += [
            Sample(msgs, g, a) for g, a in zip(group, group_advantages(scores), strict=True)
        ]
    return samples, rewards


def run_sapo(spec: Spec) -> None:
    from sapo_edge.backends import load_backend

    cfg = spec.config()
    tasks = fixed_tasks(spec)
    prompts = [build_messages(t.question) for t in tasks]
    backend = load_backend(Path(spec.model_dir), cfg, "bench", "cpu", log, kind="torch")
    ready(backend.model)
    for r in range(spec.rounds):
        if not wait_go():
            return
        t0 = time.perf_counter()
        groups = generate_round(backend, spec, prompts, seed=r)
        gen_s = time.perf_counter() - t0
        samples, rewards = scored_samples(tasks, prompts, groups, spec.stand_in_rewards)
        stats = backend.train_step(samples)
        round_s = time.perf_counter() - t0
        last = r == spec.rounds - 1
        # the peaks before the floors' own matrices are measured (their memory is not the round's)
        peaks = {"peak_rss_mb": peak_rss_mb(), "rounds_peak_rss_mb": rounds_peak_mb()}
        floor = gemm_floor(backend, samples) if last else None
        gen_floor = decode_floor(backend, prompts, groups) if last else None
        report(
            round_s=round_s,
            gen_s=gen_s,
            gen_tokens=sum(g.tokens for grp in groups for g in grp),
            step_s=stats.seconds,
            step_tokens=stats.tokens,
            trained_rows=sum(smp.advantage != 0.0 for smp in samples),
            informative_groups=informative_groups(rewards, spec.group_size),
            reward_mean=sum(rewards) / len(rewards),
            gemm_floor_s=floor,
            gen_floor_s=gen_floor,
            **peaks,
        )


def _linear_shapes(backend):
    """(config, the 7 (in, out) shapes of a decoder layer's linear layers, the LM head's shape)."""
    c = backend.model.base_model.model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    q, kv, h, inter = (
        c.num_attention_heads * head_dim,
        c.num_key_value_heads * head_dim,
        c.hidden_size,
        c.intermediate_size,
    )
    return (
        c,
        [(h, q), (h, kv), (h, kv), (q, h), (h, inter), (h, inter), (inter, h)],
        (h, c.vocab_size),
    )


def _time_gemms(work, dtype, backward: bool) -> dict:
    """Plain torch matmuls for each (rows, (in, out), times) of `work` in the layouts the model
    runs: the weight stored [out, in] as nn.Linear keeps it, the forward x @ w.T (F.linear) and,
    when `backward`, the backward to the inputs g @ w with w as stored (lora_fused.py,
    head_logps.py). Not g @ w.T of a [in, out] weight: torch 2.13's bfloat16 product of that
    layout at 32 x 49,152 dies of SIGFPE on AMX CPUs, and the app never runs it
    (tests/test_matmul_layouts.py). Timed in this process: seconds, GFLOP and GFLOP/s."""
    import torch
    from torch.nn import functional as F

    weights = {}
    flops, seconds = 0.0, 0.0
    with torch.no_grad():
        for m, (k, n), times in work:
            if m == 0 or times == 0:
                continue
            w = weights.setdefault((k, n), torch.randn(n, k, dtype=dtype))
            x, g = torch.randn(m, k, dtype=dtype), torch.randn(m, n, dtype=dtype)
            F.linear(x, w)  # warm
            if backward:
                g @ w
            t0 = time.perf_counter()
            for _ in range(times):
                F.linear(x, w)
                if backward:
                    g @ w
            seconds += time.perf_counter() - t0
            flops += (4.0 if backward else 2.0) * m * k * n * times
    return {"seconds": seconds, "gflop": flops / 1e9, "gflops_per_s": flops / 1e9 / seconds}


def gemm_floor(backend, samples) -> dict:
    """The step's linear-layer matmuls as plain torch GEMMs at this step's shapes (forward, and
    backward to the inputs: the base weights are frozen), timed in this process. Attention
    scores, norms and LoRA's small matmuls are left out, so this is a floor, not an estimate."""
    c, shapes, head = _linear_shapes(backend)
    dtype = next(backend.model.parameters()).dtype
    seqs = backend._sequences(samples)
    # the rows the step runs: at beta=0 a zero-advantage row is skipped (it adds exactly 0)
    seqs = [row for row in seqs if row[2] != 0.0 or backend.cfg.beta > 0]
    if not seqs:
        return None  # every completion scored alike: no step ran, so no floor to compare with
    work = []
    for prompt, batches in backend._by_prompt(seqs):
        # the prompt's prefix runs once for all its micro-batches (backends/shared_prefix.py);
        # each row runs the prompt's last token and its completion but the last, logits for those
        work += [(len(prompt) - 1, s, c.num_hidden_layers) for s in shapes]
        for rows in batches:
            tokens = sum(len(comp) for _, comp, _ in rows)
            work += [(tokens, s, c.num_hidden_layers) for s in shapes] + [(tokens, head, 1)]
    return _time_gemms(work, dtype, backward=True)


def decode_floor(backend, prompts, groups) -> dict:
    """generate()'s linear-layer matmuls as plain torch GEMMs at its shapes, timed in this
    process: the prefill (each prompt once, all but its last token, no LM head) and every decode
    step with the rows still live at that step (a row leaves after its end token) through every
    layer and the LM head. Attention, norms, sampling and the Python loop are left out."""
    from collections import Counter

    c, shapes, head = _linear_shapes(backend)
    dtype = next(backend.model.parameters()).dtype
    prefill = sum(len(backend._prompt_ids(m)) - 1 for m in prompts)
    lengths = [g.tokens for grp in groups for g in grp]
    steps = Counter(sum(n >= s for n in lengths) for s in range(1, max(lengths) + 1))
    work = [(prefill, s, c.num_hidden_layers) for s in shapes]
    for rows, times in sorted(steps.items()):
        work += [(rows, s, c.num_hidden_layers * times) for s in shapes] + [(rows, head, times)]
    hot = _time_gemms(work, dtype, backward=False)
    streamed = _time_model_gemms(backend, prefill, sorted(steps.items()))
    return {**streamed, "hot_seconds": hot["seconds"], "hot_gflops_per_s": hot["gflops_per_s"]}


def _time_model_gemms(backend, prefill: int, steps: list[tuple[int, int]]) -> dict:
    """generate()'s linear layers as bare F.linear calls on the model's own weights, layer after
    layer as a forward pass runs them: the prefill (no LM head), then for each decode step every
    layer's 7 projections and the LM head at the rows still live. Unlike `_time_gemms` (one
    weight per shape, reused: it stays in the CPU's cache), every weight is read from memory
    once per step, as a decode step must: at a few rows a decode step is bound by reading the
    weights, not by arithmetic."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    base = backend.model.get_base_model()
    layers = [  # each layer's 7 projections (a LoRA-wrapped one by its base_layer), in order
        [
            m.weight
            for name, m in layer.named_modules()
            if type(m) is nn.Linear and "lora_" not in name
        ]
        for layer in base.get_decoder().layers
    ]
    head = base.get_output_embeddings().weight
    dtype = head.dtype
    flops, seconds = 0.0, 0.0
    inputs: dict[tuple[int, int], torch.Tensor] = {}

    def x(rows: int, k: int) -> torch.Tensor:
        return inputs.setdefault((rows, k), torch.randn(rows, k, dtype=dtype))

    with torch.no_grad():
        for rows, times, with_head in [(prefill, 1, False)] + [(r, t, True) for r, t in steps]:
            if rows == 0:
                continue
            weights = [w for ws in layers for w in ws] + ([head] if with_head else [])
            for w in weights:  # warm the kernels at these shapes (not the weights: too many)
                F.linear(x(rows, w.shape[1]), w)
                break
            t0 = time.perf_counter()
            for _ in range(times):
                for w in weights:
                    F.linear(x(rows, w.shape[1]), w)
            seconds += time.perf_counter() - t0
            flops += 2.0 * rows * sum(w.numel() for w in weights) * times
    return {"seconds": seconds, "gflop": flops / 1e9, "gflops_per_s": flops / 1e9 / seconds}


# ----------------------------------------------------------------------------------------- TRL
def trl_settings(spec: Spec, tuned: bool) -> dict:
    """The GRPOConfig settings that differ between TRL default and TRL tuned: the default gives
    the trainer all the completions as one batch; tuned is what a TRL user on a small machine
    sets (gradient checkpointing; micro-batches of sapo-edge's micro-batch size with gradient
    accumulation up to the same completions per optimizer step; one generation batch of them)."""
    completions = spec.questions * spec.group_size
    if not tuned:
        return {
            "per_device_train_batch_size": completions,
            "gradient_accumulation_steps": 1,
            "gradient_checkpointing": False,
        }
    micro = min(Config().micro_batch("cpu"), completions)  # sapo-edge's auto size here: 1
    return {
        "per_device_train_batch_size": micro,
        "gradient_accumulation_steps": completions // micro,
        "generation_batch_size": completions,
        "gradient_checkpointing": True,
    }


def trl_shared_settings(spec: Spec) -> dict:
    """The GRPOConfig settings both TRL columns share (the work sapo-edge does)."""
    cfg = spec.config()
    return dict(
        num_generations=spec.group_size,
        max_completion_length=spec.max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        num_iterations=1,
        epsilon=cfg.clip_low,
        epsilon_high=cfg.clip_high,
        learning_rate=cfg.learning_rate,
        max_grad_norm=cfg.max_grad_norm,
        use_cpu=True,
        bf16=spec.dtype == "bfloat16",
    )


def run_trl(spec: Spec, tuned: bool = False) -> None:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from sapo_edge.backends.torch_backend import lora_config

    cfg = spec.config()
    tasks = fixed_tasks(spec)
    dataset = Dataset.from_list(
        [{"prompt": build_messages(t.question), "task": i} for i, t in enumerate(tasks)]
    )

    scored: list[float] = []  # this step's rewards, in TRL's order (G consecutive per group)

    def reward(prompts, completions, task, **_):
        if spec.stand_in_rewards:  # TRL passes whole groups, G consecutive completions each
            out = [stand_in_reward(j, spec.group_size) for j in range(len(completions))]
            scored.extend(out)
            return out
        out = [
            score_completion(tasks[i], c[0]["content"], REWARD)
            for c, i in zip(completions, task, strict=True)
        ]
        scored.extend(out)
        return out

    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[spec.dtype]
    model = AutoModelForCausalLM.from_pretrained(spec.model_dir, dtype=dtype)
    tok = AutoTokenizer.from_pretrained(spec.model_dir)
    out = tempfile.mkdtemp(prefix="bench-trl-")
    args = GRPOConfig(
        output_dir=out,
        **trl_shared_settings(spec),
        **trl_settings(spec, tuned),
        max_steps=spec.rounds,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=dataset,
        peft_config=lora_config(cfg),  # the very LoRA settings sapo-edge uses
        processing_class=tok,
    )
    timing = {"gen_s": 0.0, "gen_tokens": 0}
    peft_model = trainer.model
    generate = peft_model.generate
    eos = set(trainer.eos_token_ids) if hasattr(trainer, "eos_token_ids") else {tok.eos_token_id}

    def timed_generate(*a, **kw):  # TRL calls the unwrapped (peft) model's generate
        t0 = time.perf_counter()
        ids = generate(*a, **kw)
        timing["gen_s"] += time.perf_counter() - t0
        new = ids[:, kw["input_ids"].shape[1] :].tolist()
        timing["gen_tokens"] += sum(
            next((j + 1 for j, t in enumerate(row) if t in eos), len(row)) for row in new
        )
        return ids

    peft_model.generate = timed_generate

    class Lockstep(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            if not wait_go():
                control.should_training_stop = True
            timing.update(gen_s=0.0, gen_tokens=0, t0=time.perf_counter())
            scored.clear()

        def on_step_end(self, args, state, control, **kw):
            round_s = time.perf_counter() - timing["t0"]
            report(
                round_s=round_s,
                gen_s=timing["gen_s"],
                gen_tokens=timing["gen_tokens"],
                step_s=round_s - timing["gen_s"],
                informative_groups=informative_groups(scored, spec.group_size),
                reward_mean=sum(scored) / max(len(scored), 1),
                scored=len(scored),
            )

    trainer.add_callback(Lockstep())
    ready(trainer.model)
    trainer.train()


# ------------------------------------------------------------------------- node (scaling)
def run_node(spec: Spec) -> None:
    from sapo_edge.backends import load_backend
    from sapo_edge.data.rollout import RolloutGroup, encode_batch
    from sapo_edge.rl.metrics import PrintCallback
    from sapo_edge.rl.trainer import Node
    from sapo_edge.swarm.transport import InProcessHub

    cfg = spec.config(external_samples=4 if spec.external else 0)
    hub = InProcessHub()
    backend = load_backend(Path(spec.model_dir), cfg, "bench", "cpu", log, kind="torch")
    out = Path(tempfile.mkdtemp(prefix="bench-node-"))
    node = Node(
        cfg,
        backend,
        hub.connect("bench-node"),
        node_id="bench-node",
        name="bench",
        model_id=spec.model_id,
        out_dir=out / "bench",
        callback=PrintCallback(log),
    )
    peers = [hub.connect(f"peer-{p}") for p in range(8)]
    peer_tasks = TaskSampler(spec.domains, spec.domain_configs, spec.seed + 1)
    ready(backend.model)
    for r in range(spec.rounds):
        if not wait_go():
            return
        # peers' groups: real questions of this node's domains, half of the completions right
        for i in range(spec.external):
            task = regenerate(peer_tasks.sample_batch(1)[0])
            right = f"The result is <answer>{task.answer}</answer>"
            texts = [right if j % 2 == 0 else "<answer>-1</answer>" for j in range(spec.group_size)]
            group = RolloutGroup(
                task.ref,
                task.question,
                task.answer,
                tuple(texts),
                tuple(float(j % 2 == 0) for j in range(spec.group_size)),
                f"peer-{i % 8}",
                spec.model_id,
                r,
                time.time(),
                finished=(True,) * spec.group_size,
            )
            peers[i % 8].publish(encode_batch([group]))
        rep = node.run_round()
        report(
            round_s=rep.round_seconds,
            gen_s=rep.gen_seconds,
            gen_tokens=rep.gen_tokens,
            step_s=rep.train_seconds,
            step_tokens=rep.train_tokens,
            received=rep.received,
            external_used=rep.external_used,
        )


def main() -> None:
    kind, spec = sys.argv[1], Spec(**json.loads(sys.argv[2]))
    runs = {
        "sapo": run_sapo,
        "trl": run_trl,
        "trl-tuned": lambda s: run_trl(s, tuned=True),
        "node": run_node,
    }
    runs[kind](spec)


if __name__ == "__main__":
    main()
