"""The bundled engine's step-time estimates against FSDP2 runs: published ones and this trainer's own.

Rows: ``recipe_index/data/published_fsdp2_throughput.json`` (torchtitan's benchmark pages and NeMo AutoModel's
performance summary, each with its source; rows on hardware the index has no card for, MoE rows run on kernels
the bundled trainer does not have, and rows without a published sequence length are kept with the reason in
``left_out``) and ``recipe_index/data/measured_bundled_trainer.json`` (benchmarks/gpu on a lent GPU). Each is
estimated with the bundled engine's step-time model as published: its layout, micro batch, precision, recompute
where stated (else the least the memory model fits), compiled where torch.compile ran or where the framework's
fused kernels stand in for it (AutoModel runs Transformer Engine's fused layers).

The fitted constants (``BUNDLED_MATMUL_EFFICIENCY`` for bf16 and fp8) are fitted with leave-one-setup-out
cross-validation: each setup (model, goal, GPU type) is held out, the constants fitted on the others by grid
search (mean absolute log error), and the held-out rows estimated with them.

    .venv/bin/python benchmarks/bundled_calibration.py [--compile-pair]

``--compile-pair`` shows how the eager element-wise factor reproduces torchtitan's paired compile on/off runs.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from step_time_published import estimate, measured_tokens_per_s  # noqa: E402

from recipe_index import find_bundled_model, get_hardware  # noqa: E402
from recipe_index.measurements import DATA  # noqa: E402
from service.estimate import constants as C  # noqa: E402
from service.estimate.memory import model_shape  # noqa: E402
from service.estimate.steptime import StepTimeModel  # noqa: E402
from service.facts import Layout  # noqa: E402

PUBLISHED_FSDP2 = DATA / "published_fsdp2_throughput.json"
MEASURED_BUNDLED = DATA / "measured_bundled_trainer.json"
GRID = {"bf16": tuple(round(0.40 + 0.02 * i, 2) for i in range(19)),
        "fp8": tuple(round(0.20 + 0.02 * i, 2) for i in range(25))}


def calibration_rows() -> list[dict]:
    """Every scorable row, as the estimate reads it (engine bundled, fp32 gradient reduce as FSDP2 runs it)."""
    rows = []
    for r in json.loads(PUBLISHED_FSDP2.read_text()):
        if r["left_out"] is None:
            fused = bool(r.get("compile")) or r["framework"] == "automodel"
            rows.append({**r, "engine": "bundled", "compile": fused, "grad_reduce_dtype": "fp32",
                         "origin": r["framework"]})
    for r in json.loads(MEASURED_BUNDLED.read_text()):
        rows.append({**r, "origin": "this trainer"})
    return rows


def setup(r: dict) -> tuple:
    return (r["model"], r["mode"], r["hardware"])


def kind(r: dict) -> str:
    return "fp8" if r["precision_token"].startswith("fp8") else "bf16"


def _set(values: dict) -> None:
    C.BUNDLED_MATMUL_EFFICIENCY = {**C.BUNDLED_MATMUL_EFFICIENCY, **values}


def log_error(r: dict) -> float:
    return math.log(estimate(r)[0] / measured_tokens_per_s(r))


def fit(rows: list[dict], start: dict) -> dict:
    """Each precision's efficiency on its own rows (they do not interact); kept at ``start`` without rows."""
    values = dict(start)
    for precision, grid in GRID.items():
        own = [r for r in rows if kind(r) == precision]
        if not own:
            continue
        losses = []
        for value in grid:
            _set({precision: value})
            losses.append((statistics.mean(abs(log_error(r)) for r in own), value))
        values[precision] = min(losses)[1]
    _set(values)
    return values


def median_abs(logs: list[float]) -> float:
    return math.exp(statistics.median(abs(x) for x in logs)) - 1


def compile_pair() -> None:
    """torchtitan's Llama 3.1 8B on 8 GPUs, seq 8192, local batch 2, selective recompute, compile off and on."""
    card, hw = find_bundled_model("llama31-8b"), get_hardware("h100")
    layout = Layout(micro_batch_size=2, recompute="selective")
    for factor in (1.0, 1.5, 2.0, 2.5, 3.0, 4.0):
        C.BUNDLED_EAGER_ELEMENTWISE_FACTOR = factor
        speeds = [StepTimeModel(model_shape(card), hw, world_size=8, seq_length=8192, global_batch_size=16,
                                engine="bundled", compiled=compiled).estimate(layout, "full").tokens_per_s_per_gpu
                  for compiled in (False, True)]
        print(f"eager element-wise factor {factor}: compiled / eager {speeds[1] / speeds[0]:.3f} "
              "(torchtitan: 6,667 / 5,762 = 1.157 on 8 GPUs, 6,514 / 5,605 = 1.162 on 128)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compile-pair", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="every grid's first, middle and last value only (the suite "
                    "runs it)")
    args = ap.parse_args()
    if args.smoke:
        GRID.update({precision: grid[::len(grid) // 2] for precision, grid in GRID.items()})
    if args.compile_pair:
        compile_pair()
        return
    shipped = {p: C.BUNDLED_MATMUL_EFFICIENCY[p] for p in GRID}
    rows = calibration_rows()
    in_sample = fit(rows, shipped)
    ins = {id(r): log_error(r) for r in rows}
    outs = {}
    folds = {}
    for held in sorted({setup(r) for r in rows}, key=str):
        values = fit([r for r in rows if setup(r) != held], shipped)
        folds[held] = values
        for r in rows:
            if setup(r) == held:
                outs[id(r)] = log_error(r)
    _set(shipped)
    shipped_logs = {id(r): log_error(r) for r in rows}
    print(f"fitted on every row: {in_sample} (shipped: {shipped})")
    print("| model | goal | GPUs | precision | layout | published tok/s/GPU | estimate (shipped) | error | "
          "out of sample | source |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        est = measured_tokens_per_s(r) * math.exp(shipped_logs[id(r)])
        lay = f"FSDP{r['num_gpus'] // (r['tp'] * r['cp'] * r['pp'])} TP{r['tp']} CP{r['cp']} MBS{r['micro_batch_size']}"
        print(f"| {r['model']} | {r['mode']} | {r['num_gpus']} x {r['hardware']} | {r['precision_token']} | {lay} | "
              f"{measured_tokens_per_s(r):,.0f} | {est:,.0f} | {math.exp(shipped_logs[id(r)]) - 1:+.0%} | "
              f"{math.exp(outs[id(r)]) - 1:+.0%} | {r['origin']}: {r['source'].split('@')[0]} |")
    print(f"median absolute error: shipped {median_abs(list(shipped_logs.values())):.1%}, in sample "
          f"{median_abs(list(ins.values())):.1%}, out of sample (leave one setup out) "
          f"{median_abs(list(outs.values())):.1%} over {len(rows)} rows")


if __name__ == "__main__":
    main()
