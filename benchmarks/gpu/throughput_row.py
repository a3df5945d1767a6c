"""A GPU benchmark's measurement as a row of recipe_index/data/published_throughput.json, and the
planner's estimate of the same run.

The row has every field the published rows have (the layout, tokens/s per GPU, model TFLOPS per GPU,
step time, source, note ...) and three that those leave implicit because every published row is a
Megatron Bridge run: ``engine`` ("bundled"), ``recompute`` and ``grad_reduce_dtype``.
benchmarks/step_time_published.py estimates a row with these fields on that engine, so a bundled
trainer measurement calibrates the bundled engine's estimates as NVIDIA's rows calibrate Megatron's.

The estimate is the planner's own (service/estimate/memory.py MemoryModel, service/estimate/steptime.py StepTimeModel,
as `recipe-advisor plan --engine bundled` computes them) for the exact layout measured: the micro
batch, the recompute and FSDP2's full sharding, not the layout the planner would pick.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, Optional

# The published rows name the precision by Bridge's token; the bundled trainer's fp8 is torchao's
# dynamic tensor-wise scaling, which is Bridge's current scaling (fp8cs).
PRECISION_TOKENS = {"bf16": "bf16", "fp8": "fp8cs", "fp32": "fp32", "fp16": "fp16"}
PRECISION_PRINTED = {"bf16": "BF16", "fp8": "FP8 (torchao tensorwise)", "fp32": "FP32", "fp16": "FP16"}
# The bundled trainer reduces gradients in fp32 unless distributed.grad_reduce_dtype says otherwise.
GRAD_REDUCE_DTYPE = "fp32"


def planner_estimate(model: str, hardware: str, *, num_gpus: int, seq_length: int, global_batch_size: int,
                     micro_batch_size: int, recompute: str, precision: str) -> dict[str, Any]:
    """The planner's estimate (engine bundled, FSDP2 full sharding) of one measured layout: tokens/s
    per GPU, step time, MFU, and memory per GPU in GiB by part. `model`: a bundled id or a config.json."""
    from service.estimate.memory import MemoryModel, model_shape
    from service.facts import Layout
    from service.plan.planner import make_request
    from service.plan.types import Estimators

    request = make_request(model, num_gpus, hardware, seq_length=seq_length, global_batch_size=global_batch_size,
                           precision=precision, engine="bundled", grad_reduce_dtype=GRAD_REDUCE_DTYPE)
    shape = model_shape(request.model)
    memory_model = MemoryModel(shape, world_size=request.world_size, seq_length=request.seq_length, engine="bundled",
                               cpu=request.hardware.arch == "cpu", precision=request.precision,
                               grad_reduce_dtype=request.grad_reduce_dtype)
    time_model = Estimators(request, shape).time  # as the planner builds it: compiled blocks, the MFU ceiling
    layout = Layout(micro_batch_size=micro_batch_size, recompute=recompute)
    accumulation = max(global_batch_size // (micro_batch_size * num_gpus), 1)
    time = time_model.estimate(layout, "full")
    return {"tokens_per_s_per_gpu": time.tokens_per_s_per_gpu, "step_time_s": time.step_time_s, "mfu": time.mfu,
            "memory_gib": memory_model.estimate(layout, "full", accumulation).as_dict(),
            "flops_per_token": time_model.flops_per_token}


def source_commit(repo: Path) -> Optional[str]:
    """The commit measured: BENCH_COMMIT when the caller names it (the lent machine gets a copy of the
    work tree without .git), else git's HEAD where there is one."""
    named = os.environ.get("BENCH_COMMIT")
    if named:
        return named
    if not (repo / ".git").exists():
        return None
    try:
        return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def throughput_row(report: dict[str, Any]) -> dict[str, Any]:
    """The published-throughput row of a benchmark report (bench.py run())."""
    precision = report["precision"]
    commit = report.get("commit")
    env = report.get("environment", {})
    kernels = ", ".join(f"{part} {name}" for part, name in report["kernels"].items())
    note = (f"bundled trainer, FSDP2 on {report['num_gpus']} GPU(s), torch.compile per block: "
            f"{'on' if report['compile'] else 'off'}, kernels: {kernels}; fused AdamW, random init, mock data; "
            f"{report['steps_timed']} timed steps after {report['warmup_steps']} warm-up; "
            f"{report['device']}, torch {env.get('torch')}, liger-kernel {env.get('liger_kernel')}, "
            f"torchao {env.get('torchao')}; model TFLOPS as the trainer counts them (6N + 6·L·d·S per token)")
    if not report.get("complete", True):
        note += f"; incomplete: {report.get('stopped_by')}"
    tps = report["tokens_per_s"]
    return {
        "model": report["model"], "mode": "pretrain", "hardware": report["gpu_type"], "num_gpus": report["num_gpus"],
        "seq_length": report["seq"], "global_batch_size": report["batch"], "micro_batch_size": report["batch"],
        "precision_token": PRECISION_TOKENS.get(precision, precision),
        "tp": 1, "pp": 1, "cp": 1, "vp": None, "ep": 1, "etp": None, "fsdp": True,
        "tokens_per_s_per_gpu": _round(tps, 1),
        "model_tflops_per_gpu": _round(report["model_tflops_per_gpu"], 2),
        "step_time_s": _round(report["step_time_s"], 5),
        "variant": None, "release": None,
        "source": f"recipe-advisor:benchmarks/gpu/bench.py@{commit or 'uncommitted'}",
        "note": note, "ga": 1,
        "tokens_per_s_total": _round(tps * report["num_gpus"] if tps is not None else None, 1),
        "mfu_percent": _round(100 * report["mfu"] if report["mfu"] is not None else None, 2),
        "precision_printed": PRECISION_PRINTED.get(precision, precision), "table_model_name": None,
        "bundled_model": report.get("bundled_model", False), "also_in": [],
        "engine": "bundled", "compile": bool(report["compile"]), "recompute": report["recompute"],
        "grad_reduce_dtype": GRAD_REDUCE_DTYPE,
    }


def _round(value: Optional[float], digits: int) -> Optional[float]:
    return None if value is None else round(float(value), digits)


def row_key(row: dict[str, Any]) -> tuple:
    """What makes two rows the same measurement (a rerun of it replaces the row)."""
    return (row["model"], row["hardware"], row["num_gpus"], row["seq_length"], row["global_batch_size"],
            row["micro_batch_size"], row["precision_token"], row.get("engine"), row.get("recompute"))


def add_row(path: Path, row: dict[str, Any]) -> list[dict[str, Any]]:
    """Write `row` into the JSON list at `path` (replacing the row of the same measurement), atomically:
    a call that is cut off keeps the rows written before."""
    rows: list[dict[str, Any]] = []
    if path.is_file():
        try:
            rows = [r for r in json.loads(path.read_text()) if isinstance(r, dict)]
        except (json.JSONDecodeError, TypeError):
            rows = []
    rows = [r for r in rows if row_key(r) != row_key(row)] + [row]
    write_json(path, rows)
    return rows


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)
