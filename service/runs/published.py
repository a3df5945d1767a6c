"""NVIDIA's published Megatron throughput rows (recipe_index/data/published_throughput.json) as runs of source
"published": they can stand for users' clusters (one group per software release and GPU type) and are always
reported apart from the user's own runs."""

from __future__ import annotations

import json
from typing import Iterator

from pydantic import ValidationError

from recipe_index.hardware import get_hardware
from recipe_index.measurements import PUBLISHED, UNSCORED_VARIANTS, measured_tokens_per_s
from recipe_index.models import find_bundled_model
from service.runs.estimate import with_estimate
from service.runs.schema import RunRecord


def _record(row: dict) -> RunRecord:
    tokens = measured_tokens_per_s(row)
    world = row["num_gpus"]
    gpn = min(world, get_hardware(row["hardware"]).gpus_per_node)
    step = row["global_batch_size"] * row["seq_length"] / (tokens * world)
    vp = row.get("vp")
    return RunRecord.model_validate({
        "provenance": {"engine": "megatron", "release": row.get("release"), "source": "published",
                       "hosts": max(world // gpn, 1), "cluster": f"published {row['hardware']}"},
        "request": {"model": find_bundled_model(row["model"]).id, "gpu_type": row["hardware"], "gpus_per_node": gpn,
                    "nodes": max(world // gpn, 1), "goal": row["mode"], "seq_length": row["seq_length"],
                    "global_batch_size": row["global_batch_size"], "precision": row["precision_token"]},
        "layout": {"tp": row["tp"], "pp": row["pp"], "vp": vp if vp and vp > 1 else None, "cp": row["cp"],
                   "ep": row["ep"], "etp": row.get("etp"),
                   "dp": max(world // (row["tp"] * row["pp"] * row["cp"]), 1),
                   "micro_batch_size": row["micro_batch_size"], "sharding": "full" if row.get("fsdp") else "optimizer",
                   "recompute": "none"},
        "measurement": {"step_time_s": step, "tokens_per_s_per_gpu": tokens, "timed_steps": 0},
        "reproduce": {"log_path": row["source"]},
        "outcome_detail": row.get("note") or None,
    })


def published_records(estimate: bool = True) -> Iterator[RunRecord]:
    """Every published row that names a bundled model, GPU type, release-independent layout and a throughput."""
    for row in json.loads(PUBLISHED.read_text()):
        if (not row.get("bundled_model") or not row.get("hardware") or row.get("variant") in UNSCORED_VARIANTS
                or not measured_tokens_per_s(row) or find_bundled_model(row["model"]) is None):
            continue
        try:
            record = _record(row)
        except (ValidationError, KeyError, TypeError):
            continue  # a row the schema cannot hold (no sequence length, ...) is no run
        yield with_estimate(record) if estimate else record
