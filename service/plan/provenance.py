"""What stands beside a planned row's estimate: the index recipes that run its layout and the newest
published measurement of it. Neither changes the ranking, which stays the estimate."""

from __future__ import annotations

from typing import Optional

from recipe_index.layouts import recipes_on
from recipe_index.measurements import (
    bundled_trainer_runs,
    find_measurement,
    fsdp2_calibration_rows,
    measured_models,
    measurement_key,
    megatron_published_count,
)
from service.plan.types import Plan, PlannedLayout, PlanRequest

# The bundled trainer's fp8 is torchao's dynamic tensor-wise scaling: current scaling, Bridge's fp8cs.
BUNDLED_FP8_TOKEN = "fp8cs"


def precision_token(request: PlanRequest) -> str:
    """The published precision token a request trains in (bf16, fp8cs, fp8mx, ..., nvfp4)."""
    if request.precision != "fp8":
        return request.precision
    if request.engine == "bundled":
        return BUNDLED_FP8_TOKEN
    return request.fp8_recipe or "fp8cs"


def used_by(request: PlanRequest, row: PlannedLayout) -> list[dict]:
    """The index recipes of this model on this GPU type, for this engine, whose layout is the row's (at any GPU
    count: a recipe sized for another count shows where its structure lands here)."""
    kinds = ("bundled",) if request.engine == "bundled" else ("library", "benchmark")
    return [{"recipe": entry.name, "kind": entry.kind, "num_gpus": entry.num_gpus}
            for entry, layout in recipes_on(request.model.id, request.hardware.name)
            if layout.key == row.key and entry.kind in kinds]


def measured(request: PlanRequest, row: PlannedLayout) -> Optional[dict]:
    """The newest measurement of the row's layout for this model, goal, GPU type and count, sequence and
    precision, with the sharding it was measured with (the row's own first)."""
    if request.model.id not in measured_models():
        return None
    lay = row.layout
    for fully_sharded in sorted((False, True), key=lambda full: full != (row.sharding == "full")):
        key = measurement_key(request.model.id, request.goal, request.hardware.name, request.world_size,
                              request.seq_length, precision_token(request), request.engine, lay.tp, lay.pp, lay.vp,
                              lay.cp, lay.ep, lay.etp, lay.micro_batch_size, fully_sharded)
        found = find_measurement(key)
        if found is not None:
            return {**found.to_dict(), "sharding": "full" if fully_sharded else "not full"}
    return None


# A row's published measurement (find_measurement's fields and the sharding measured): null each where only the
# user's runs measured the layout.
PUBLISHED_FIELDS = ("tokens_per_s_per_gpu", "global_batch_size", "release", "source", "sharding")


def measured_beside(published: Optional[dict], yours: Optional[dict]) -> Optional[dict]:
    """A row's ``measured``: the published measurement's fields at its top level and ``yours``, the runs store's
    measurements of the row (service.runs.advice.measured_summary); None when neither exists."""
    if published is None and yours is None:
        return None
    return {**(published or dict.fromkeys(PUBLISHED_FIELDS)), "yours": yours}


def provenance(result: Plan, row: PlannedLayout) -> dict:
    """What stands beside a row's estimate: the index recipes that run its layout, what was measured of it
    (published, and in the user's runs store), and its estimate calibrated on the user's runs."""
    runs = result.runs
    yours = runs.yours(row) if runs is not None else None
    return {"used_by": used_by(result.request, row),
            "measured": measured_beside(measured(result.request, row), yours),
            "calibrated_tokens_per_s_per_gpu": runs.calibrated_speed(row) if runs is not None else None}


def row_dict(result: Plan, row: PlannedLayout) -> dict:
    """A row as the answers publish it: its estimates and what stands beside them (``provenance``)."""
    return {**row.to_dict(result.usable_gib), **provenance(result, row)}


def plan_calibration(result: Plan) -> str:
    """calibration() of the request, preceded by what the user's runs store applied, named as theirs."""
    published = calibration(result.request)
    own = result.runs.describe() if result.runs is not None else None
    return f"{own}; the model's own calibration: {published}" if own else published


def calibration(request: PlanRequest) -> str:
    """Where the estimates' efficiencies come from, in words: the runs they were fitted on."""
    if request.engine == "megatron":
        return (f"Megatron published runs: the Megatron Bridge and NeMo performance summaries and dgxc-benchmarking "
                f"({megatron_published_count()} measured layouts)")
    if request.hardware.arch == "cpu":
        return "not calibrated for CPUs: the GPU efficiencies on the cpu card's peak (a smoke-test estimate)"
    own = [run for run in bundled_trainer_runs()
           if (run["model"], run["hardware"]) == (request.model.id, request.hardware.name)]
    published = fsdp2_calibration_rows()
    frameworks = ", ".join(sorted({row["framework"] for row in published}))
    text = (f"FSDP2 published runs: {frameworks} ({len(published)} rows), and this trainer's own GPU runs "
            f"({len(bundled_trainer_runs())})")
    if own:
        text = f"measured on this trainer ({len(own)} run(s) of {request.model.id} on {request.hardware.name}); " + text
    return text
