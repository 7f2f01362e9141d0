"""format_example: the worked example is in every prompt a node samples from and in every prompt
it trains with (its own groups and its peers'), and in none when it is off: a completion is
trained on the prompt it was sampled from."""

from __future__ import annotations

import json
import types

import pytest
from scripted import ScriptedBackend, make_cfg, make_node

import sapo_edge.run.evaluate as ev
from sapo_edge.data.rollout import RolloutGroup
from sapo_edge.data.task_sampler import TaskSampler
from sapo_edge.data.tasks import regenerate
from sapo_edge.rl.prompts import build_messages
from sapo_edge.swarm.transport import InProcessHub


@pytest.mark.parametrize("example", [True, False])
def test_sampled_and_trained_prompts_both_carry_the_example_or_neither(tmp_path, example):
    cfg = make_cfg(tmp_path, local_samples=2, external_samples=2, format_example=example)
    node = make_node(cfg, "n", InProcessHub().connect("id-n"), right=1)
    theirs = TaskSampler(cfg.domains, cfg.domain_configs, seed=77)
    for ref in theirs.sample_batch(2):  # two peer groups with right and wrong answers
        task = regenerate(ref)
        answers = tuple(f"<answer>{a}</answer>" for a in (task.answer, "-1", "-1", task.answer))
        node.pool.add(
            RolloutGroup(ref, task.question, task.answer, answers, (1.0,) * 4, "id-p", "m", 0, 0.0),
            0,
        )
    node.run_round()
    sampled = node.backend.calls[-1]["prompts"]
    assert sampled and all(p == build_messages(p[-1]["content"], example=example) for p in sampled)
    trained = node.backend.steps[-1]
    assert len(node.last_groups.external) == 2  # peers' groups are in the step
    assert trained and all(
        s.messages == build_messages(s.messages[-1]["content"], example=example) for s in trained
    )
    assert all((len(p) == 4) is example for p in sampled + [s.messages for s in trained])


@pytest.fixture
def scripted_eval(monkeypatch) -> ScriptedBackend:
    """evaluate() with a scripted backend in place of a model (the backend it answers with)."""
    backend = ScriptedBackend(right=4)
    monkeypatch.setattr(ev, "select_backend", lambda choice, log: ("torch", "cpu"))
    monkeypatch.setattr(ev, "resolve_model", lambda name, progress: types.SimpleNamespace(path=""))
    monkeypatch.setattr(ev, "load_backend", lambda *a, **kw: backend)
    return backend


@pytest.mark.parametrize("example", [True, False])
def test_evaluation_asks_with_the_prompt_the_nodes_trained_with(tmp_path, scripted_eval, example):
    backend = scripted_eval
    cfg = make_cfg(tmp_path, format_example=example)
    result = ev.evaluate(cfg, questions=3, samples=2, log=lambda m: None)
    assert result.pass_at_1 == 1.0  # the scripted backend answered every question it was asked
    asked = backend.calls[-1]["prompts"]
    assert asked == [build_messages(t.question, example=example) for t in ev.heldout_tasks(cfg, 3)]


@pytest.mark.parametrize(("trained", "asked"), [(True, False), (False, True), (None, True)])
def test_an_adapter_is_evaluated_with_the_prompt_it_trained_with(
    tmp_path, scripted_eval, trained, asked
):
    """Its checkpoint's format_example wins, and the log says so; a checkpoint of a version
    before the setting (no key) trained without the example."""
    backend = scripted_eval
    ckpt = tmp_path / "round-000003"
    ckpt.mkdir()
    (ckpt / "COMPLETE").write_text("")
    backend.save(ckpt)
    saved = {"model": "m"} if trained is None else {"model": "m", "format_example": trained}
    (ckpt / "state.json").write_text(json.dumps({"round": 3, "config": saved}))
    cfg = make_cfg(tmp_path, format_example=asked)
    said: list[str] = []
    ev.evaluate(cfg, questions=2, samples=1, checkpoint=str(ckpt), log=said.append)
    used = bool(trained)
    assert backend.calls[-1]["prompts"] == [
        build_messages(t.question, example=used) for t in ev.heldout_tasks(cfg, 2)
    ]
    assert any(f"trained with format_example = {str(used).lower()}" in m for m in said)


def test_an_adapter_can_be_asked_without_the_example_and_scored_strictly(tmp_path, scripted_eval):
    """Hinted nodes (issue 45): every adapter is asked alike, without the example, whatever it
    trained with, and a right answer counts only in tags (the run's lenient credit ignored)."""
    backend = scripted_eval
    ckpt = tmp_path / "round-000003"
    ckpt.mkdir()
    (ckpt / "COMPLETE").write_text("")
    backend.save(ckpt)
    saved = {"model": "m", "format_example": True}
    (ckpt / "state.json").write_text(json.dumps({"round": 3, "config": saved}))
    cfg = make_cfg(tmp_path, format_example=True, lenient=True)
    backend.untagged = True
    strict = ev.evaluate(
        cfg, questions=2, samples=1, checkpoint=str(ckpt), log=print, example=False, strict=True
    )
    assert backend.calls[-1]["prompts"] == [
        build_messages(t.question, example=False) for t in ev.heldout_tasks(cfg, 2)
    ]
    assert strict.pass_at_1 == 0.0  # right, but untagged
    lenient = ev.evaluate(cfg, questions=2, samples=1, checkpoint=str(ckpt), log=print)
    assert lenient.pass_at_1 == 0.5  # the run's reward: half for a right untagged answer


def test_an_adapter_trained_with_the_instruction_is_asked_with_it(tmp_path, scripted_eval):
    """The review's case: evaluation restored format_example from the checkpoint but not
    format_instruction (issue 56's prompt variant), so it asked another prompt than trained."""
    backend = scripted_eval
    ckpt = tmp_path / "round-000003"
    ckpt.mkdir()
    (ckpt / "COMPLETE").write_text("")
    backend.save(ckpt)
    saved = {"model": "m", "format_example": False, "format_instruction": True}
    (ckpt / "state.json").write_text(json.dumps({"round": 3, "config": saved}))
    cfg = make_cfg(tmp_path, format_instruction=False)
    said: list[str] = []
    ev.evaluate(cfg, questions=2, samples=1, checkpoint=str(ckpt), log=said.append)
    assert backend.calls[-1]["prompts"] == [
        build_messages(t.question, instruction=True) for t in ev.heldout_tasks(cfg, 2)
    ]
    assert any("trained with format_instruction = true" in m for m in said)
