"""reasoning-gym tasks: exact regeneration, safe scoring, and the node's SampleBatch sampler."""

from __future__ import annotations

import json
import re

import pytest
import reasoning_gym
from reasoning_gym.arithmetic.basic_arithmetic import BasicArithmeticDataset
from task_configs import ONE_DIGIT_ADD

from sapo_edge.data.task_sampler import TaskSampler, node_seed
from sapo_edge.data.tasks import (
    MAX_INDEX,
    PAPER_DOMAINS,
    Task,
    TaskError,
    TaskRef,
    regenerate,
    verifier_score,
)
from sapo_edge.rl.rewards import score_completion


def correct_answer(task: Task) -> str:
    # propositional_logic accepts many conclusions and has no single answer: use its example one
    return task.answer if task.answer is not None else task.entry["metadata"]["example_answer"]


# --- regeneration ---------------------------------------------------------------------------


@pytest.mark.parametrize("domain", PAPER_DOMAINS)
def test_paper_domain_regenerates_exactly_and_its_answer_scores_one(domain: str) -> None:
    ref = TaskRef.make(domain, None, seed=1234, index=37)
    task = regenerate(ref)
    again = regenerate(TaskRef.from_dict(json.loads(json.dumps(ref.to_dict()))))
    assert task.domain == domain
    assert (again.question, again.answer, again.entry) == (task.question, task.answer, task.entry)
    # the same item as reasoning-gym's own dataset at its default size: size never changes item i
    plain = reasoning_gym.create_dataset(domain, seed=1234)[37]
    assert (plain["question"], plain["answer"]) == (task.question, task.answer)
    assert score_completion(task, f"Let me think.\n<answer>{correct_answer(task)}</answer>") == 1.0
    assert score_completion(task, "<answer>not it</answer>") == 0.0


def test_only_propositional_logic_lacks_a_single_answer() -> None:
    tasks = [regenerate(TaskRef.make(d, None, 1, 0)) for d in PAPER_DOMAINS]
    assert [t.domain for t in tasks if t.answer is None] == ["propositional_logic"]


def test_demo_config_asks_small_additions() -> None:
    for index in range(20):
        task = regenerate(TaskRef.make("basic_arithmetic", ONE_DIGIT_ADD, 7, index))
        a, b = map(int, re.findall(r"\d+", task.question))
        # reasoning-gym draws terms with randint(0, 10**digits): "one digit" includes 10
        assert 0 <= a <= 10 and 0 <= b <= 10 and int(task.answer) == a + b


def test_nearby_indices_and_seeds_give_different_questions() -> None:
    questions = {regenerate(TaskRef.make("arc_1d", None, 5, i)).question for i in range(10)}
    assert len(questions) == 10
    assert regenerate(TaskRef.make("bf", None, 5, 0)) != regenerate(TaskRef.make("bf", None, 6, 0))


def test_regenerating_bf_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    for index in range(6):
        reasoning_gym.create_dataset("bf", seed=5)[index]
    assert capsys.readouterr().out != ""  # reasoning-gym's bf compiler prints progress dots...
    for index in range(6):
        regenerate(TaskRef.make("bf", None, 5, index))
    assert capsys.readouterr().out == ""  # ...which would scribble over the TUI


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        (TaskRef.make("basic_arithmatic", None, 1, 0), "did you mean 'basic_arithmetic'"),
        (TaskRef.make("no_such_thing", None, 1, 0), "base_conversion, basic_arithmetic"),
        (
            TaskRef.make("basic_arithmetic", {"digits": 3}, 1, 0),
            "unexpected keyword argument 'digits'",
        ),
        (
            TaskRef.make("basic_arithmetic", {"min_terms": 5, "max_terms": 2}, 1, 0),
            "max_terms must be >= min_terms",
        ),
        (TaskRef.make("basic_arithmetic", {"seed": 3}, 1, 0), "belongs to the task ref"),
        (TaskRef.make("basic_arithmetic", {"size": 3}, 1, 0), "belongs to the task ref"),
        (TaskRef.make("basic_arithmetic", None, 1, MAX_INDEX), "out of range"),
        (TaskRef.make("basic_arithmetic", None, 1, -1), "out of range"),
        (TaskRef.make("word_ladder", None, 1, 20_000), "out of range"),
        (TaskRef.make("acre", None, 1, 0), "precomputes"),
        (TaskRef.make("countdown", None, 1, 0), "runs them as code"),
    ],
)
def test_bad_refs_raise_task_error_saying_what_is_wrong(ref: TaskRef, message: str) -> None:
    with pytest.raises(TaskError, match=re.escape(message)):
        regenerate(ref)


@pytest.mark.parametrize(
    "d",
    [
        {"dataset": "basic_arithmetic", "config": {"min_digits": "x"}, "seed": 1, "index": 0},
        {"dataset": "basic_arithmetic", "config": {"operators": [1, None]}, "seed": 1, "index": 0},
        {"dataset": "basic_arithmetic", "config": {"max_digits": -5}, "seed": 1, "index": 0},
        {"dataset": "bf", "config": {"difficulty": 2.5}, "seed": 1, "index": 3},
        {"dataset": "__class__", "config": {}, "seed": 1, "index": 0},
        {"dataset": "", "config": {}, "seed": 1, "index": 0},
        {"dataset": "basic_arithmetic", "config": {}, "seed": 1, "index": 2**62},
    ],
)
def test_hostile_refs_from_peers_only_ever_raise_task_error(d: dict) -> None:
    with pytest.raises(TaskError):
        regenerate(TaskRef.from_dict(d))


def test_regenerate_rejects_a_dict_instead_of_a_ref() -> None:
    with pytest.raises(TaskError, match="TaskRef"):
        regenerate({"dataset": "bf", "config": {}, "seed": 1, "index": 0})  # type: ignore[arg-type]


# --- scoring --------------------------------------------------------------------------------


def test_answers_are_never_run_as_code(tmp_path) -> None:
    task = regenerate(TaskRef.make("binary_matrix", None, 1, 0))
    marker = tmp_path / "pwned"
    attack = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    assert verifier_score(task, attack) == 0.0
    assert not marker.exists()
    # the list-of-lists answers that reasoning-gym reads with eval still get their partial credit
    assert verifier_score(task, str(task.entry["metadata"]["solution"])) == 0.1


def test_propositional_answer_with_made_up_variables_scores_zero() -> None:
    # "(P)(P)" and friends are leaves of their own to reasoning-gym, which enumerates 2**leaves
    # truth assignments: a peer could stall the node with a long one; we score them 0 instead.
    task = regenerate(TaskRef.make("propositional_logic", None, 1, 0))
    var = task.entry["metadata"]["variables"][0]
    attack = " ∧ ".join(f"({var})" * n for n in range(1, 21))
    assert verifier_score(task, attack) == 0.0
    assert verifier_score(task, correct_answer(task)) == 1.0


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(float("nan"), 0.0), (float("inf"), 0.0), (7.0, 1.0), (-2.0, 0.0), ("oops", 0.0)],
)
def test_verifier_score_is_a_finite_number_in_unit_range(monkeypatch, raw, expected) -> None:
    monkeypatch.setattr(BasicArithmeticDataset, "score_answer", lambda self, answer, entry: raw)
    assert (
        verifier_score(regenerate(TaskRef.make("basic_arithmetic", ONE_DIGIT_ADD, 1, 0)), "5")
        == expected
    )


def test_verifier_score_swallows_scorer_crashes(monkeypatch) -> None:
    def boom(self, answer, entry):
        raise RuntimeError("scorer bug")

    monkeypatch.setattr(BasicArithmeticDataset, "score_answer", boom)
    assert verifier_score(regenerate(TaskRef.make("basic_arithmetic", None, 1, 0)), "5") == 0.0


# --- sampling -------------------------------------------------------------------------------


def test_node_seed_is_stable_31_bit_and_differs_between_nodes() -> None:
    assert node_seed("alice") == node_seed("alice") == 1507868383  # sha256: same in every process
    assert node_seed("alice") != node_seed("bob") != node_seed("alice", base_seed=1)
    assert all(0 <= node_seed(f"n{i}") < 2**31 for i in range(100))


def test_different_nodes_draw_different_questions() -> None:
    domains = {d: 1.0 for d in PAPER_DOMAINS}
    a = TaskSampler(domains, None, node_seed("alice")).sample_batch(8)
    b = TaskSampler(domains, None, node_seed("bob")).sample_batch(8)
    assert {regenerate(r).question for r in a}.isdisjoint(regenerate(r).question for r in b)


def test_sample_batch_picks_k_distinct_domains_and_never_repeats_a_question() -> None:
    sampler = TaskSampler(
        {d: 1.0 for d in PAPER_DOMAINS}, {"basic_arithmetic": ONE_DIGIT_ADD}, seed=3
    )
    seen: set[str] = set()
    for _ in range(20):
        batch = sampler.sample_batch(8)
        assert len({r.dataset for r in batch}) == 8
        assert all(r.seed == 3 for r in batch)
        keys = {r.key for r in batch}
        assert seen.isdisjoint(keys)
        seen |= keys
    arithmetic = [json.loads(k) for k in seen if '"basic_arithmetic"' in k]
    assert all(r["config"] == ONE_DIGIT_ADD for r in arithmetic)
    assert sorted(r["index"] for r in arithmetic) == list(
        range(len(arithmetic))
    )  # counter advances


def test_sample_batch_wraps_around_when_k_exceeds_the_domains() -> None:
    batch = TaskSampler(
        {"bf": 1.0, "arc_1d": 1.0, "base_conversion": 0.0}, None, seed=0
    ).sample_batch(5)
    names = [r.dataset for r in batch]
    assert sorted(names[:2]) == ["arc_1d", "bf"] and sorted(names[2:4]) == ["arc_1d", "bf"]
    assert "base_conversion" not in names  # weight 0 excludes a domain
    assert sorted(r.index for r in batch if r.dataset == "bf") == list(range(names.count("bf")))


def test_weights_bias_which_domain_comes_first() -> None:
    sampler = TaskSampler({"bf": 20.0, "arc_1d": 1.0}, None, seed=0)
    firsts = [sampler.sample_batch(1)[0].dataset for _ in range(200)]
    assert firsts.count("bf") > 170  # expected about 190
    assert sampler.sample_batch(0) == []


def test_sampler_is_deterministic_and_resumes_exactly_from_its_state() -> None:
    domains = {"bf": 1.0, "arc_1d": 2.0, "basic_arithmetic": 3.0}
    a, b = TaskSampler(domains, None, seed=9), TaskSampler(domains, None, seed=9)
    assert [a.sample_batch(2) for _ in range(5)] == [b.sample_batch(2) for _ in range(5)]
    saved = json.loads(json.dumps(a.state_dict()))
    expected = [a.sample_batch(2) for _ in range(5)]
    resumed = TaskSampler(domains, None, seed=9)
    resumed.load_state_dict(saved)
    assert [resumed.sample_batch(2) for _ in range(5)] == expected
    assert [TaskSampler(domains, None, seed=10).sample_batch(2) for _ in range(5)] != expected


def test_load_state_rejects_other_seeds_and_garbage() -> None:
    sampler = TaskSampler({"bf": 1.0}, None, seed=1)
    with pytest.raises(TaskError, match="seed 2"):
        sampler.load_state_dict(TaskSampler({"bf": 1.0}, None, seed=2).state_dict())
    with pytest.raises(TaskError, match="malformed"):
        sampler.load_state_dict({"seed": 1, "next_index": {}, "rng": "nope"})


@pytest.mark.parametrize(
    ("domains", "configs", "message"),
    [
        ({"bassic_arithmetic": 1.0}, None, "did you mean 'basic_arithmetic'"),
        ({}, None, "at least one domain"),
        ({"bf": -1.0}, None, "finite number >= 0"),
        ({"bf": float("inf")}, None, "finite number >= 0"),
        ({"bf": "1"}, None, "finite number >= 0"),
        ({"bf": 0.0, "arc_1d": 0}, None, "all domain weights are zero"),
        ({"bf": 1.0}, {"bf": {"difficulty": 9}}, "difficulty must be less than 4"),
        ({"bf": 1.0}, {"arc_1d": {}}, "not in domains"),
    ],
)
def test_sampler_validates_up_front(domains, configs, message) -> None:
    with pytest.raises(TaskError, match=re.escape(message)):
        TaskSampler(domains, configs, seed=0)


def test_sampler_accepts_only_its_own_domains_and_configs() -> None:
    sampler = TaskSampler({"basic_arithmetic": 1.0}, {"basic_arithmetic": ONE_DIGIT_ADD}, seed=0)
    (ref,) = sampler.sample_batch(1)
    assert sampler.accepts(TaskRef.from_dict({**ref.to_dict(), "seed": 99, "index": 5}))
    assert not sampler.accepts(
        TaskRef.make("basic_arithmetic", {**ONE_DIGIT_ADD, "max_digits": 9}, 0, 0)
    )
    assert not sampler.accepts(TaskRef.make("bf", None, 0, 0))


def test_another_threads_prints_survive_a_task_being_built(monkeypatch, capsys) -> None:
    """Building a task hides what the generator prints, and only that: a line the network
    thread prints meanwhile ("peer ... connected") reaches stdout (a redirect of the whole
    process's stdout lost it, and the namespace LAN test, which reads those lines, saw no mesh)."""
    import threading

    from sapo_edge.data import tasks as tasks_mod

    building, printed = threading.Event(), threading.Event()
    real = tasks_mod._dataset("basic_arithmetic", "{}", 7)

    class Noisy:
        def __getitem__(self, i):
            print("noise from the generator")
            building.set()
            assert printed.wait(30)  # the other thread prints while this one builds
            return real[i]

    monkeypatch.setattr(tasks_mod, "_dataset", lambda *a: Noisy())

    def network_thread() -> None:
        assert building.wait(30)
        print("peer n2 (e74fb902) connected via lan")
        printed.set()

    t = threading.Thread(target=network_thread)
    t.start()
    task = tasks_mod.regenerate(tasks_mod.TaskRef.make("basic_arithmetic", {}, seed=7, index=0))
    t.join(30)
    out = capsys.readouterr().out
    assert task.question
    assert "peer n2 (e74fb902) connected via lan" in out
    assert "noise from the generator" not in out
