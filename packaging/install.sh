#!/bin/sh
# Install sapo-edge on Linux or macOS with uv: no C compiler, the CPU build of torch where there
# is no NVIDIA GPU (uv --torch-backend auto), MLX on Apple Silicon, Python fetched by uv if the
# machine has none. Then fetch the offline model and check the machine.
#
#   sh install.sh                 # from PyPI
#   SAPO_EDGE_SPEC=./dist/sapo_edge-0.1.0-py3-none-any.whl sh install.sh   # a local wheel
#   SAPO_EDGE_NO_MODEL=1 sh install.sh   # skip the offline model (98 MB)
#
# Extra uv options (an index mirror, --find-links ...) go in UV_* variables, e.g.
# UV_DEFAULT_INDEX=https://mirror.example/simple.
set -eu

SPEC="${SAPO_EDGE_SPEC:-sapo-edge}"
PYTHON="${SAPO_EDGE_PYTHON:-3.12}"

if ! command -v uv >/dev/null 2>&1; then
  echo "uv is not installed. Install it first, then run this script again:"
  echo "  curl -LsSf https://astral.sh/uv/install.sh | sh      (or: brew install uv / pipx install uv)"
  exit 1
fi

# reasoning-gym pins pycosat, which PyPI has only as C source: leave it out (sapo-edge carries a
# pure-Python stand-in that builds the same questions).
EXCLUDES="$(mktemp)"
trap 'rm -f "$EXCLUDES"' EXIT
echo "pycosat" > "$EXCLUDES"

uv tool install --force --python "$PYTHON" --torch-backend auto --excludes "$EXCLUDES" "$SPEC"

BIN="$(uv tool dir --bin)"
case ":$PATH:" in
  *":$BIN:"*) ;;
  *) echo "note: $BIN is not on your PATH: run \`uv tool update-shell\` and open a new terminal."
     PATH="$BIN:$PATH" ;;
esac

if [ -z "${SAPO_EDGE_NO_MODEL:-}" ]; then
  sapo-edge models --get smollm2-135m
fi
sapo-edge doctor || echo "sapo-edge doctor found something to fix (see the red lines above)."
echo "Installed. Start with: sapo-edge   (or: sapo-edge sim --preset demo)"
