"""reasoning-gym tasks: a TaskRef addresses one question exactly, so any node can regenerate it."""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import importlib
import json
import math
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reasoning_gym.dataset import ProceduralDataset


class TaskError(ValueError):
    """A task that cannot be built: unknown domain, a config reasoning-gym rejects, a bad ref."""


# A real task config is a few dozen scalars (ONE_DIGIT_ADDITION: 7 keys, 8 values). A peer's
# ref is bounded while it is frozen, before anything else reads it (issue 54: ~200k nested empty
# lists in one group's config cost a receiver ~1 s of its network thread and ~10 MiB held).
MAX_CONFIG_KEYS = 64
MAX_CONFIG_VALUES = 512  # scalars and lists, over the whole config
MAX_CONFIG_DEPTH = 3  # a list of lists of lists at most
MAX_CONFIG_TEXT = 256  # characters in a key or a string value


class _Budget:
    def __init__(self) -> None:
        self.values = 0

    def spend(self) -> None:
        self.values += 1
        if self.values > MAX_CONFIG_VALUES:
            raise TaskError(f"task config holds over {MAX_CONFIG_VALUES} values")


def _freeze(value: Any, budget: _Budget | None = None, depth: int = 0) -> Any:
    budget = budget or _Budget()
    budget.spend()
    if isinstance(value, list | tuple):
        if depth >= MAX_CONFIG_DEPTH:
            raise TaskError(f"task config lists nest over {MAX_CONFIG_DEPTH} deep")
        return tuple(_freeze(v, budget, depth + 1) for v in value)
    if isinstance(value, dict):
        raise TaskError("task configs hold scalars or lists of scalars, not nested objects")
    if isinstance(value, str) and len(value) > MAX_CONFIG_TEXT:
        raise TaskError(f"task config string over {MAX_CONFIG_TEXT} characters")
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TaskError(f"task config value {str(value)[:40]!r} is not a JSON scalar or list")


def _thaw(value: Any) -> Any:
    return [_thaw(v) for v in value] if isinstance(value, tuple) else value


@dataclass(frozen=True)
class TaskRef:
    """(dataset, config, seed, index): enough to regenerate the identical question and answer."""

    dataset: str
    config: tuple[tuple[str, Any], ...]  # sorted (key, value) pairs, lists frozen to tuples
    seed: int
    index: int

    @classmethod
    def make(cls, dataset: str, config: dict[str, Any] | None, seed: int, index: int) -> TaskRef:
        config = config or {}
        if len(config) > MAX_CONFIG_KEYS:
            raise TaskError(f"task config has over {MAX_CONFIG_KEYS} keys")
        if any(len(str(k)) > MAX_CONFIG_TEXT for k in config):
            raise TaskError(f"task config key over {MAX_CONFIG_TEXT} characters")
        budget = _Budget()
        items = tuple(sorted((str(k), _freeze(v, budget)) for k, v in config.items()))
        return cls(dataset, items, int(seed), int(index))

    def config_dict(self) -> dict[str, Any]:
        return {k: _thaw(v) for k, v in self.config}

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "config": self.config_dict(),
            "seed": self.seed,
            "index": self.index,
        }

    @classmethod
    def from_dict(cls, d: Any) -> TaskRef:
        if not isinstance(d, dict) or set(d) != {"dataset", "config", "seed", "index"}:
            raise TaskError("a task ref is an object with exactly: dataset, config, seed, index")
        if not isinstance(d["dataset"], str) or not isinstance(d["config"], dict):
            raise TaskError("task ref: dataset must be a string and config an object")
        for name in ("seed", "index"):
            v = d[name]
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 2**63:
                raise TaskError(f"task ref: {name} must be a non-negative integer")
        return cls.make(d["dataset"], d["config"], d["seed"], d["index"])

    @property
    def key(self) -> str:
        """Canonical JSON text of the ref: equal refs have equal keys."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))


# --- regeneration ---------------------------------------------------------------------------

PAPER_DOMAINS: tuple[str, ...] = (
    "base_conversion",
    "basic_arithmetic",
    "arc_1d",
    "bf",
    "propositional_logic",
    "fraction_simplification",
    "decimal_arithmetic",
    "calendar_arithmetic",
    "binary_matrix",
)

# One-digit addition (basic_arithmetic settings): the demo's, the sweep's and the benchmark's
# scaling task, where SmolLM2-135M's lenient reward is neither ~0 nor ~1.
ONE_DIGIT_ADDITION: dict = {
    "min_terms": 2,
    "max_terms": 2,
    "min_digits": 1,
    "max_digits": 1,
    "operators": ["+"],
    "allow_parentheses": False,
    "allow_negation": False,
}

# reasoning-gym seeds item i with Random(seed + i) and never looks at `size` except as a bound, so
# every dataset is built with one fixed size and item i is the same whatever size a peer used.
# 10**6 questions per domain is 500x a 2000-round run; larger sizes make list_functions and
# gsm_symbolic precompute bigger index tables in __init__.
MAX_INDEX = 1_000_000
_SIZE_CAP = {"word_ladder": 20_000}  # word_ladder rejects size > 20000
_UNSUPPORTED = {
    "acre": "precomputes its questions from the dataset size, so an index does not pin one question",
    "composite": "mixes other datasets through a nested config that a task ref cannot carry",
}
# These scorers hand the model's answer to sympy.parse_expr, which runs it as Python code: a
# completion from a peer could execute anything on this machine.
_CODE_EXECUTING_SCORERS = frozenset(
    {
        "countdown",
        "puzzle24",
        "polynomial_multiplication",
        "simple_integration",
        "intermediate_integration",
    }
)
# These scorers eval() the answer to read a Python list; ast.literal_eval reads the same lists
# and nothing else, so it replaces eval in their modules (their item generation never uses eval).
_EVAL_SCORER_MODULES = (
    "reasoning_gym.algorithmic.binary_matrix",
    "reasoning_gym.algorithmic.spiral_matrix",
    "reasoning_gym.algorithmic.string_insertion",
    "reasoning_gym.games.n_queens",
)
_BUILD_LOCK = threading.Lock()  # one build at a time: datasets are shared (cached), some keep state


class _Building(threading.local):
    on = False  # while this thread builds a task: what it prints is dropped


_BUILDING = _Building()


class _QuietBuilds:
    """sys.stdout from the first task built on, for good: what a thread building a task prints
    is dropped (some generators print: bf), what any other thread prints (the network thread's
    "peer ... connected" lines, which the namespace LAN test reads) goes on to the stream it
    wraps. Installed once and never swapped back: swapping sys.stdout for each build freed the
    swapped-in object while another thread's print() still held it (CPython 3.11's print keeps
    sys.stdout by a borrowed reference between its writes), so that print wrote into freed
    memory: an AttributeError, a segfault, or a corrupted heap (a node reported a question that
    failed to build, or hung at exit, when links closed around a stop: issue 44)."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def write(self, text: str) -> int:
        if _BUILDING.on:
            return len(text)
        return self.real.write(text)

    def flush(self) -> None:
        if not _BUILDING.on:
            self.real.flush()

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, buffer...
        return getattr(self.real, name)


_QUIET_KEPT: list[_QuietBuilds] = []  # every one installed, never freed (see _QuietBuilds)


def _quiet_stdout() -> None:
    """Make sys.stdout a _QuietBuilds (wrapping what it is now) unless it is one already. A
    stream someone else swaps in later (a test's capture, Textual's) is wrapped in turn; the
    one it replaced is kept alive."""
    out = sys.stdout
    if out is None or isinstance(out, _QuietBuilds):
        return
    quiet = _QuietBuilds(out)
    _QUIET_KEPT.append(quiet)
    sys.stdout = quiet


@functools.cache
def _registry() -> dict[str, tuple[type, type]]:
    """reasoning-gym's {name: (dataset class, config class)}, imported on first use (~2 s)."""
    from .gymcompat import install

    install()  # installs without a C compiler lack pycosat: a pure-Python stand-in
    from reasoning_gym.factory import DATASETS

    from .gymfixes import install as fix_generators

    fix_generators()  # a generator that could loop for hours (gymfixes.py)

    for name in _EVAL_SCORER_MODULES:
        importlib.import_module(name).eval = ast.literal_eval
    return DATASETS


def known_datasets() -> list[str]:
    """Names of the reasoning-gym datasets a TaskRef can address."""
    return sorted(
        n for n in _registry() if n not in _UNSUPPORTED and n not in _CODE_EXECUTING_SCORERS
    )


def dataset_size(dataset: str) -> int:
    """How many questions a TaskRef can address in a dataset (its indices are 0 .. this - 1)."""
    return _SIZE_CAP.get(dataset, MAX_INDEX)


def check_dataset(name: str) -> None:
    """Raise TaskError, with what to pick instead, for a dataset a TaskRef cannot address."""
    if name in _UNSUPPORTED:
        raise TaskError(f"dataset {name!r} {_UNSUPPORTED[name]}; pick another dataset.")
    if name in _CODE_EXECUTING_SCORERS:
        raise TaskError(
            f"dataset {name!r} scores answers with sympy.parse_expr, which runs them as code, "
            "so sapo-edge refuses it; pick another dataset."
        )
    if name not in _registry():
        close = difflib.get_close_matches(name, list(_registry()), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise TaskError(
            f"unknown reasoning-gym dataset {name!r}{hint}; the SAPO paper uses "
            f"{', '.join(PAPER_DOMAINS)} ({len(known_datasets())} datasets are known)."
        )


@functools.lru_cache(maxsize=256)
def _dataset(name: str, config_json: str, seed: int) -> ProceduralDataset:
    """The dataset object for (name, config, seed), keyed on canonical JSON so 1, 1.0 and true differ."""
    check_dataset(name)  # imports reasoning-gym through _registry() first
    import reasoning_gym

    config = json.loads(config_json)
    fields = sorted(
        f.name for f in dataclasses.fields(_registry()[name][1]) if f.name not in ("seed", "size")
    )
    for reserved in ("seed", "size"):
        if reserved in config:
            raise TaskError(
                f"task config for {name!r} sets {reserved!r}, which belongs to the task ref, not the "
                f"config; remove it (config keys for {name}: {', '.join(fields)})."
            )
    try:
        return reasoning_gym.create_dataset(name, seed=seed, size=dataset_size(name), **config)
    except Exception as e:  # TypeError for unknown keys, AssertionError/ValueError from validate()
        msg = str(e) or type(e).__name__
        raise TaskError(
            f"reasoning-gym rejected the config {config} for {name!r} ({msg}); "
            f"its config keys are: {', '.join(fields)}."
        ) from None


def config_json(ref: TaskRef) -> str:
    """Canonical JSON text of a ref's config: equal configs have equal texts."""
    return json.dumps(ref.config_dict(), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Task:
    """One regenerated question: its ref, the text shown to the model and the item used to score."""

    ref: TaskRef
    question: str
    # the reference answer; None where the verifier accepts many answers (propositional_logic)
    answer: str | None
    entry: dict[str, Any]  # the full reasoning-gym item, passed to the dataset's score_answer

    @property
    def domain(self) -> str:
        return self.ref.dataset


def regenerate(ref: TaskRef) -> Task:
    """Rebuild the exact question at ref.index; raises TaskError (never anything else) for a bad ref."""
    if not isinstance(ref, TaskRef):
        raise TaskError(
            f"regenerate needs a TaskRef, got {type(ref).__name__}; build one with TaskRef.make."
        )
    check_dataset(ref.dataset)
    if not 0 <= ref.index < dataset_size(ref.dataset):
        raise TaskError(
            f"task index {ref.index} is out of range for {ref.dataset!r}: use 0 <= index < {dataset_size(ref.dataset)}."
        )
    ds = _dataset(ref.dataset, config_json(ref), ref.seed)
    try:
        with _BUILD_LOCK:
            _quiet_stdout()
            _BUILDING.on = True
            try:
                entry = ds[ref.index]
            finally:
                _BUILDING.on = False
        question, answer = entry["question"], entry["answer"]
        if not isinstance(question, str):
            raise TypeError(f"question is a {type(question).__name__}")
    except Exception as e:
        _dataset.cache_clear()  # a failed item can leave state behind (word_ladder shrinks its size)
        raise TaskError(
            f"reasoning-gym failed to build {ref.dataset!r} item {ref.index} (seed {ref.seed}): "
            f"{type(e).__name__}: {e}; this config or index cannot be used."
        ) from None
    return Task(ref, question, None if answer is None else str(answer), entry)


# --- scoring --------------------------------------------------------------------------------


def _prop_logic_answer_is_safe(task: Task, answer: str) -> bool:
    """propositional_logic checks an answer with a 2**n truth table over its n distinct leaves, and
    "PQ", "(P)(Q)", ... all count as leaves: only answers built from the question's variables pass."""
    from reasoning_gym.logic.propositional_logic import Expression

    def leaves(e: Any) -> Iterator[Any]:
        if not isinstance(e, Expression):
            yield e
        elif e.operator is None:
            yield e.left
        else:
            yield from leaves(e.left)
            if e.right is not None:
                yield from leaves(e.right)

    variables = set(task.entry["metadata"]["variables"])
    return len(answer) <= 4096 and all(
        v in variables for v in leaves(Expression.from_string(answer))
    )


def verifier_score(task: Task, answer: str | None) -> float:
    """The dataset's own score_answer(answer, entry), clamped to [0, 1]; any failure scores 0."""
    try:
        ds = _dataset(task.ref.dataset, config_json(task.ref), task.ref.seed)
        if task.domain == "propositional_logic" and answer is not None:
            if not _prop_logic_answer_is_safe(task, answer):
                return 0.0
        score = float(ds.score_answer(answer, task.entry))
    except Exception:
        return 0.0
    return min(max(score, 0.0), 1.0) if math.isfinite(score) else 0.0
