#!/usr/bin/env bash
# One call on a GPU machine: install what it lacks from carried wheels, check the fused kernels,
# benchmark the bundled trainer, and leave JSON results in $OUT, all inside one time budget.
#
#   bash benchmarks/gpu/run.sh [--dry-run] [--smoke] [bench.py options, e.g. --steps 20]
#
# Where the interpreter ($PYTHON, default python3) has torch with CUDA it is used as it is: no
# virtualenv, no torch install. The wheels in $WHEELS (benchmarks/gpu/wheels, made beforehand by
# fetch_wheels.sh) whose packages it lacks, or has in an older version, are installed offline into
# $SITE, which goes on PYTHONPATH. Without CUDA torch (a machine of your own) it creates $VENV and
# installs requirements.txt there, from $WHEELS offline when that folder exists, else from PyPI.
#
# Phases, in this order (what matters most first), each under `timeout` with what is left of
# GPU_BENCH_BUDGET_S (default 300 s, so a failed call leaves time for a second):
#   1. kernel checks: fused paths vs their reference on the GPU        -> $OUT/kernel_check.json
#   2. dense pair, same shape and step counts: the bundled trainer (Llama-3.2-1B, bf16) -> $OUT/dense-bf16.json,
#      then the peer: torchtitan's model and parallelize_llama under a minimal loop -> $OUT/peer-torchtitan.json
#      (GPU_BENCH_PEER_FIRST=1 swaps the order, for a second call)
#   3. MoE pair: Qwen3-30B-A3B-shaped (its first GPU_BENCH_MOE_LAYERS=4 layers), eager, bf16 -> $OUT/moe-bf16.json,
#      then transformers' Qwen3MoeForCausalLM at the same shape and batch -> $OUT/hf-moe.json
#   4. profile: the dense run again, torch.profiler over 6 steps -> $OUT/dense-profile.json ("profile")
#   5. dense fp8 (torchao), when GPU_BENCH_FP8_MIN_S (default 90) seconds are left -> $OUT/dense-fp8.json
#   6. tune: `recipe-advisor tune` for llama32-1b on one GPU, when the CLI has it and 90 s are left
# Each benchmark adds its row (recipe_index/data/published_throughput.json's format) to
# $OUT/throughput_rows.json; everything printed also goes to $OUT/run.log. --dry-run prints the steps
# and runs none of them; --smoke runs every phase on CPU with a tiny model, with the interpreter's
# packages as they are (GPU_BENCH_MODE=machine: installing from $WHEELS first, as on the lent machine).
# GPU_BENCH_ONLY=moe runs the setup and the MoE phase alone (about 2 minutes on an H200).
set -uo pipefail  # no -e: a failed phase must not keep the later ones from running and reporting

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-$REPO/.venv-gpu}"
WHEELS="${WHEELS:-$HERE/wheels}"
SITE="${SITE:-/tmp/recipe-advisor-site}"
OUT="${OUT:-$REPO/out/gpu-bench}"
BUDGET_S="${GPU_BENCH_BUDGET_S:-}"  # default below: 300 s on the GPU, 900 s for the CPU smoke run
FP8_MIN_S="${GPU_BENCH_FP8_MIN_S:-90}"
PEER_FIRST="${GPU_BENCH_PEER_FIRST:-0}"
DENSE_STEPS="${GPU_BENCH_DENSE_STEPS:-20}"
MOE_MODEL="${GPU_BENCH_MOE_MODEL:-qwen3-30b-a3b}"
MOE_LAYERS="${GPU_BENCH_MOE_LAYERS:-4}"
ONLY="${GPU_BENCH_ONLY:-}"  # "moe": the MoE phase alone
# machine: $PYTHON plus what it lacks of $WHEELS; venv: install into $VENV; as-is: $PYTHON and its packages;
# auto: machine where $PYTHON has CUDA torch, else venv (as-is with --smoke).
MODE="${GPU_BENCH_MODE:-auto}"
DRY_RUN=0
SMOKE=0
BENCH_ARGS=()
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY_RUN=1 ;;
    --smoke) SMOKE=1 ;;
    *) BENCH_ARGS+=("$arg") ;;
  esac
done
if [[ -z "$BUDGET_S" ]]; then
  if [[ "$SMOKE" == 1 ]]; then BUDGET_S=900; else BUDGET_S=300; fi
fi
START=$SECONDS
FAILED=()

run() {
  echo "+ $*"
  if [[ "$DRY_RUN" == 0 ]]; then "$@"; fi
}

left() { echo $((BUDGET_S - (SECONDS - START))); }

# phase TITLE SECONDS_NEEDED COMMAND...: runs COMMAND under what is left of the budget, or says why not.
phase() {
  local title="$1" needed="$2"
  shift 2
  local seconds
  seconds="$(left)"
  echo "== $title [t=$((SECONDS - START)) s, $seconds s of the budget left]"
  if ((seconds < needed)); then
    echo "skipped: $title needs about $needed s"
    return 0
  fi
  run timeout --kill-after=15 "$seconds" "$@"
  local rc=$?
  if ((rc == 124 || rc == 137)); then
    echo "$title: stopped at the time budget; what it wrote so far is in $OUT"
  fi
  if ((rc != 0)); then
    echo "$title: exit $rc"
    FAILED+=("$title")
  fi
}

if [[ "$DRY_RUN" == 0 ]]; then
  mkdir -p "$OUT"
  exec > >(tee -a "$OUT/run.log") 2>&1
  TEE_PID=$!
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false TQDM_DISABLE=1

if [[ "$SMOKE" == 1 && "$MODE" == auto ]]; then
  MODE=as-is
elif [[ "$MODE" == auto ]]; then
  if "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    MODE=machine
  else
    MODE=venv
  fi
fi
echo "== setup: $MODE mode, budget $BUDGET_S s, results in $OUT"

if [[ "$MODE" == machine ]]; then
  if [[ -d "$WHEELS" ]]; then
    mapfile -t MISSING < <("$PYTHON" "$HERE/wheels.py" select "$WHEELS")
    if ((${#MISSING[@]} > 0)) && "$PYTHON" -m pip --version >/dev/null 2>&1; then
      run "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
        "${MISSING[@]}"
      # torchao's wheel ships its tests as a top-level package "test", which on PYTHONPATH would shadow
      # the standard library's.
      run rm -rf "$SITE/test"
    elif ((${#MISSING[@]} > 0)); then
      echo "no pip: unpacking the wheels into $SITE (a wheel is a zip of its installed files)"
      for wheel in "${MISSING[@]}"; do
        run "$PYTHON" -m zipfile -e "$wheel" "$SITE"
      done
      run rm -rf "$SITE/test"
    else
      echo "the interpreter has every package of $WHEELS"
    fi
  else
    echo "no wheel folder $WHEELS: the interpreter's packages are used as they are"
  fi
  export PYTHONPATH="$REPO:$SITE${PYTHONPATH:+:$PYTHONPATH}"
elif [[ "$MODE" == as-is ]]; then
  export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
else
  if [[ ! -x "$VENV/bin/python" ]]; then
    run "$PYTHON" -m venv "$VENV"
  fi
  if [[ -d "$WHEELS" ]]; then
    run "$VENV/bin/pip" install --no-index --find-links "$WHEELS" -r "$HERE/requirements.txt"
  else
    run "$VENV/bin/pip" install -r "$HERE/requirements.txt"
  fi
  PYTHON="$VENV/bin/python"
  export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
fi

DEVICE=(--device cuda)
if [[ "$SMOKE" == 1 ]]; then
  DEVICE=(--device cpu)
  BENCH_ARGS=(--smoke "${BENCH_ARGS[@]+"${BENCH_ARGS[@]}"}")
else
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  fi
  if [[ -z "${CC:-}" ]] && ! command -v cc >/dev/null && ! command -v gcc >/dev/null && ! command -v clang >/dev/null
  then
    # Triton builds its kernel launcher with a C compiler on first use: without one neither inductor nor
    # Liger runs, and an eager run with the plain-torch kernels still measures the trainer.
    echo "no C compiler (cc, gcc, clang or \$CC): the benchmarks run eager with the plain-torch kernels"
    BENCH_ARGS=(--no-compile --kernels torch "${BENCH_ARGS[@]+"${BENCH_ARGS[@]}"}")
  fi
fi
run "$PYTHON" -c "import torch, pydantic, trainer.recipes.train_ft, service.plan.planner; print('torch', torch.__version__, \
'cuda', torch.version.cuda, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU', \
'pydantic', pydantic.VERSION)" || FAILED+=("imports")

if [[ "$ONLY" != moe ]]; then
  phase "kernel checks" 30 "$PYTHON" "$HERE/kernel_check.py" "${DEVICE[@]}" --out-dir "$OUT"
  PEER_ARGS=(--steps "$DENSE_STEPS" --warmup 5 --batch 4 --seq 4096 -o "$OUT/peer-torchtitan.json")
  if [[ "$SMOKE" == 1 ]]; then PEER_ARGS=(--smoke -o "$OUT/peer-torchtitan.json"); fi
  # The smoke run profiles its dense run (one process less); on the GPU the profile is a run of its own, so the
  # profiler's overhead stays out of the dense figures.
  DENSE_PROFILE=()
  if [[ "$SMOKE" == 1 ]]; then DENSE_PROFILE=(--profile); fi
  ours_dense() {
    phase "dense benchmark (bf16)" 60 "$PYTHON" "$HERE/bench.py" --out-dir "$OUT" --name dense-bf16 \
      --steps "$DENSE_STEPS" --time-budget "$(($(left) / 2))" ${DENSE_PROFILE[@]+"${DENSE_PROFILE[@]}"} \
      ${BENCH_ARGS[@]+"${BENCH_ARGS[@]}"}
  }
  peer_dense() {
    if "$PYTHON" -c 'import torchtitan.models.llama3' 2>/dev/null; then
      phase "peer: torchtitan's model + parallelize, minimal loop (bf16)" 60 "$PYTHON" "$HERE/peer_torchtitan.py" \
        --budget-s "$(($(left) / 3))" "${PEER_ARGS[@]}"
    else
      echo "== peer: skipped: torchtitan does not import here ($PYTHON -c 'import torchtitan.models.llama3')"
    fi
  }
  if [[ "$PEER_FIRST" == 1 ]]; then peer_dense; ours_dense; else ours_dense; peer_dense; fi
fi

echo "== MoE benchmark"
if "$PYTHON" -c 'import sys; from trainer.contract.capabilities import supports; sys.exit(0 if supports("moe") else 1)' 2>/dev/null
then
  # Eager: the routed token counts (a host sync per MoE layer) break every block's graph, so compiling
  # would spend the budget on recompiles. 3 warm-up + 12 timed steps of 2 x 4096 tokens.
  phase "MoE benchmark (bf16, $MOE_MODEL, $MOE_LAYERS layers)" 90 "$PYTHON" "$HERE/bench.py" --out-dir "$OUT" \
    --name moe-bf16 --model "$MOE_MODEL" --layers "$MOE_LAYERS" --no-compile --warmup 3 --steps 12 --batch 2 \
    --time-budget "$(($(left) / 2))" ${BENCH_ARGS[@]+"${BENCH_ARGS[@]}"}
  HF_ARGS=(--model "$MOE_MODEL" --layers "$MOE_LAYERS" --warmup 3 --steps 12 --batch 2 --seq 4096)
  if [[ "$SMOKE" == 1 ]]; then HF_ARGS=(--smoke); fi
  phase "MoE reference: transformers at the same shape (bf16)" 45 "$PYTHON" "$HERE/hf_moe_reference.py" \
    --time-budget "$(($(left) / 3))" -o "$OUT/hf-moe.json" "${HF_ARGS[@]}"
else
  echo "skipped: the bundled trainer has no MoE support yet (trainer/contract/capabilities.py: moe is false)"
fi

if [[ "$ONLY" != moe && "$SMOKE" != 1 ]]; then
  phase "profile (dense bf16, 6 steps)" 50 "$PYTHON" "$HERE/bench.py" --out-dir "$OUT" --name dense-profile \
    --steps 6 --warmup 3 --profile --time-budget "$(($(left) - 5))" ${BENCH_ARGS[@]+"${BENCH_ARGS[@]}"}
fi

if [[ "$ONLY" == moe ]]; then
  echo "== dense benchmark (fp8)"
  echo "skipped: GPU_BENCH_ONLY=moe"
elif [[ "$SMOKE" == 1 ]]; then
  echo "== dense benchmark (fp8)"
  echo "skipped: fp8 needs a CUDA GPU of compute capability 8.9+"
else
  phase "dense benchmark (fp8, torchao)" "$FP8_MIN_S" "$PYTHON" "$HERE/bench.py" --out-dir "$OUT" --name dense-fp8 \
    --fp8 --time-budget "$(($(left) - 5))" ${BENCH_ARGS[@]+"${BENCH_ARGS[@]}"}
fi

echo "== tune"
if [[ "$ONLY" == moe || "$SMOKE" == 1 ]]; then
  echo "skipped: tune runs on the GPU only"
elif "$PYTHON" -m service.cli tune --help >/dev/null 2>&1; then
  phase "tune (llama32-1b, 1 GPU: micro batch x recompute x compile)" 90 "$PYTHON" -m service.cli tune \
    --model llama32-1b --gpus 1 --gpu-type "${GPU_BENCH_GPU_TYPE:-h200}" --goal pretrain --engine bundled \
    --trials 6 --steps 12 --warmup 4 --trial-timeout 60 --budget-minutes "$(($(left) / 60))" --format json \
    --db "sqlite:///$OUT/runs.db" -o "$OUT/tuned.yaml"
else
  echo "skipped: this checkout's CLI has no tune command"
fi

echo "== done in $((SECONDS - START)) s"
if [[ "$DRY_RUN" == 0 ]]; then
  "$PYTHON" "$HERE/summary.py" "$OUT"
fi
if ((${#FAILED[@]} > 0)); then
  echo "failed: ${FAILED[*]}"
  STATUS=1
else
  STATUS=0
fi
if [[ "$DRY_RUN" == 0 ]]; then
  exec >&- 2>&-
  wait "$TEE_PID" 2>/dev/null
fi
exit "$STATUS"
