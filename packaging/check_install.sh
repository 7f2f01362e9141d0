#!/usr/bin/env bash
# Check the documented install end to end, as a new user would: build the wheel, install it with
# uv into an empty tool folder and an empty HOME, with no C compiler (CC=false) and the CPU torch,
# then run the first commands. CI runs it after `make test` (.ci/run); by hand: make package-check.
#
# torch comes from PyTorch's CPU index (--torch-backend cpu), or from a local CPU wheel where
# one is at $TORCH_WHEELS (default /opt/wheels, how this project's machines have it).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
UV="${UV:-$(dirname "$PY")/uv}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# uv's download cache stays the real user's (wheels are fetched once); everything else is new
export UV_CACHE_DIR="${UV_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/uv}"
export HOME="$WORK/home" UV_TOOL_DIR="$WORK/tools" UV_TOOL_BIN_DIR="$WORK/bin"
export CC=false CXX=false   # any package that needs a compiler fails the check
unset SAPO_EDGE_HOME SAPO_EDGE_CACHE XDG_CONFIG_HOME XDG_DATA_HOME XDG_CACHE_HOME HF_HUB_OFFLINE
mkdir -p "$HOME"
step() { printf '\n== %s\n' "$*"; }

step "build and check the wheel and sdist"
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$WORK/dist" . 2>&1 | grep -v '^WARNING: Location' || true
WHEEL="$(ls "$WORK"/dist/sapo_edge-*.whl)"
"$PY" -m twine check --strict "$WHEEL"

step "uv tool install (no compiler, CPU torch, pycosat excluded)"
TORCH_WHEELS="${TORCH_WHEELS:-/opt/wheels}"
TORCH=(--torch-backend cpu)
if ls "$TORCH_WHEELS"/torch-*+cpu-*.whl >/dev/null 2>&1; then
  local_torch="$(basename "$(ls "$TORCH_WHEELS"/torch-*+cpu-*.whl | head -1)" | cut -d- -f2)"
  echo "torch==$local_torch" > "$WORK/constraints.txt"
  TORCH=(--find-links "$TORCH_WHEELS" -c "$WORK/constraints.txt")
fi
start=$(date +%s)
"$UV" tool install -q --python "$("$PY" -c 'import sys; print(sys.executable)')" \
  --excludes packaging/excludes.txt "${TORCH[@]}" "$WHEEL"
echo "installed in $(( $(date +%s) - start )) s; tool environment $(du -sh "$UV_TOOL_DIR" | cut -f1)"
export PATH="$UV_TOOL_BIN_DIR:$PATH"
TOOL_PY="$(ls -d "$UV_TOOL_DIR"/sapo-edge/bin/python)"
if "$TOOL_PY" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("pycosat") is None)'; then
  echo "pycosat is installed: the exclusion did not work"; exit 1
fi

step "first commands in an empty HOME"
sapo-edge --version
sapo-edge presets
sapo-edge models
sapo-edge doctor --multicast-interface 127.0.0.1 || echo "(doctor reported a red line: see above)"

step "one round of the demo preset, headless, on a tiny model"
"$TOOL_PY" tests/tiny_model.py "$WORK/tiny" > /dev/null
OMP_NUM_THREADS=1 sapo-edge sim --preset demo --model "$WORK/tiny" --nodes 1 --rounds 1 \
  --checkpoint-every 1 --out-dir "$WORK/runs/one"
test -s "$WORK/runs/one/demo-0/metrics.jsonl"
sapo-edge runs --out-dir "$WORK/runs"
if sapo-edge sim --preset demo --model "$WORK/tiny" --nodes 1 --rounds 1 --out-dir "$WORK/runs/one" 2> "$WORK/err"; then
  echo "a second run into a used folder was not refused"; exit 1
fi
grep -q -- "--resume" "$WORK/err" && cat "$WORK/err"
step "all good"
