#!/usr/bin/env bash
# One command on an H100/H200 machine: install from wheels, check the fused kernels, benchmark.
#
#   bash benchmarks/gpu/run.sh [--dry-run] [bench.py options, e.g. --steps 40 --fp8]
#
# Installs benchmarks/gpu/requirements.txt into $VENV (default: .venv-gpu in the repository) from
# $WHEELS (default: benchmarks/gpu/wheels) when that folder exists, offline (--no-index), else from
# PyPI. Then bench.py --check-kernels (fused paths vs their fallbacks on the GPU) and bench.py (the
# Llama-3.2-1B training benchmark). --dry-run prints the commands without running them.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-$REPO/.venv-gpu}"
WHEELS="${WHEELS:-$HERE/wheels}"
DRY_RUN=0
BENCH_ARGS=()
for arg in "$@"; do
  if [[ "$arg" == "--dry-run" ]]; then DRY_RUN=1; else BENCH_ARGS+=("$arg"); fi
done

run() {
  echo "+ $*"
  if [[ "$DRY_RUN" == 0 ]]; then "$@"; fi
}

if [[ ! -x "$VENV/bin/python" ]]; then
  run "$PYTHON" -m venv "$VENV"
fi
if [[ -d "$WHEELS" ]]; then
  run "$VENV/bin/pip" install --no-index --find-links "$WHEELS" -r "$HERE/requirements.txt"
else
  run "$VENV/bin/pip" install -r "$HERE/requirements.txt"
fi

export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
run "$VENV/bin/python" "$HERE/bench.py" --check-kernels
run "$VENV/bin/python" "$HERE/bench.py" ${BENCH_ARGS[@]+"${BENCH_ARGS[@]}"}
