"""format_instruction (issue 56): the answer format's instruction after each question in the
user's turn, in every prompt a node samples from, trains with (its own groups and its peers')
and is evaluated with; with the worked example, in the example's user turn too."""

from __future__ import annotations

import types

import pytest
from scripted import ScriptedBackend, make_cfg, make_node

import sapo_edge.run.evaluate as ev
from sapo_edge.data.rollout import RolloutGroup
from sapo_edge.data.task_sampler import TaskSampler
from sapo_edge.data.tasks import regenerate
from sapo_edge.rl.prompts import INSTRUCTION, build_messages, extract_tagged, node_messages
from sapo_edge.swarm.transport import InProcessHub


def test_the_instruction_follows_every_user_turn():
    plain = build_messages("Calculate 2 + 3.")
    told = build_messages("Calculate 2 + 3.", instruction=True)
    assert told[0] == plain[0] and told[-1]["content"] == f"Calculate 2 + 3.\n{INSTRUCTION}"
    both = build_messages("Calculate 2 + 3.", example=True, instruction=True)
    assert [m["role"] for m in both] == ["system", "user", "assistant", "user"]
    assert both[1]["content"] == f"Calculate 12 + 30.\n{INSTRUCTION}"
    assert both[2] == build_messages("q", example=True)[2]  # the worked answer is untouched
    assert "<answer>" in INSTRUCTION and extract_tagged(INSTRUCTION) == "N"  # a slot, no number
    cfg = types.SimpleNamespace(format_example=True, format_instruction=False)
    assert node_messages("q", cfg) == build_messages("q", example=True)


@pytest.mark.parametrize("instruction", [True, False])
def test_sampled_trained_and_evaluated_prompts_carry_it_or_not(tmp_path, monkeypatch, instruction):
    cfg = make_cfg(tmp_path, local_samples=2, external_samples=2, format_instruction=instruction)
    node = make_node(cfg, "n", InProcessHub().connect("id-n"), right=1)
    for ref in TaskSampler(cfg.domains, cfg.domain_configs, seed=77).sample_batch(2):
        task = regenerate(ref)
        answers = tuple(f"<answer>{a}</answer>" for a in (task.answer, "-1", "-1", task.answer))
        node.pool.add(
            RolloutGroup(ref, task.question, task.answer, answers, (1.0,) * 4, "id-p", "m", 0, 0.0),
            0,
        )
    node.run_round()
    sampled = node.backend.calls[-1]["prompts"]
    trained = [s.messages for s in node.backend.steps[-1]]
    assert len(node.last_groups.external) == 2  # peers' groups are in the step
    assert sampled and trained
    for p in sampled + trained:
        assert p[-1]["content"].endswith(INSTRUCTION) is instruction
    backend = ScriptedBackend(right=4)  # evaluation asks as the nodes trained
    monkeypatch.setattr(ev, "select_backend", lambda choice, log: ("torch", "cpu"))
    monkeypatch.setattr(ev, "resolve_model", lambda name, progress: types.SimpleNamespace(path=""))
    monkeypatch.setattr(ev, "load_backend", lambda *a, **kw: backend)
    ev.evaluate(cfg, questions=2, samples=1, log=lambda m: None, example=False, strict=True)
    asked = backend.calls[-1]["prompts"]
    assert asked and all(p[-1]["content"].endswith(INSTRUCTION) is instruction for p in asked)
