"""The keys that tie runs to a plan: which request a run answers, and which calibration group it belongs to."""

from __future__ import annotations

import hashlib
from typing import Optional

from service.runs.schema import RunRecord, RunRequest

# A run's engine as the planner names it: AutoModel runs are FSDP2 runs, estimated by the bundled engine's model.
PLANNER_ENGINE = {"bundled": "bundled", "automodel": "bundled", "megatron": "megatron"}


def request_key(model: str, gpu_type: str, world_size: int, goal: str, seq_length: int, global_batch_size: int,
                precision: str, engine: str) -> str:
    """One request (what plan is asked), as a short hash: runs of it are that request's measurements."""
    text = "|".join(map(str, (model, gpu_type, world_size, goal, seq_length, global_batch_size, precision,
                              PLANNER_ENGINE.get(engine, engine))))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def run_request_key(record: RunRecord) -> str:
    r: RunRequest = record.request
    return request_key(r.model, r.gpu_type, r.world_size, r.goal, r.seq_length, r.global_batch_size, r.precision,
                       record.provenance.engine)


def layout_key(record: RunRecord) -> tuple:
    """A distinct layout, as calibration holds layouts out: structure, micro batch, sharding and recompute."""
    return (*record.layout.key, record.layout.sharding, record.layout.recompute)


def group_key(cluster: Optional[str], gpu_type: str, engine: str, release: Optional[str], moe: bool) -> str:
    """A calibration group: the cluster label (else the GPU type), engine, software release, dense or MoE."""
    kind = "moe" if moe else "dense"
    return "|".join((cluster or gpu_type, PLANNER_ENGINE.get(engine, engine), release or "-", kind))


def layout_text(record: RunRecord) -> str:
    """The layout as plan's rows tell them apart, as the runs table's ``layout_key`` column holds it."""
    lay = record.layout
    return ",".join(str(v) for v in (lay.tp, lay.pp, lay.vp or 1, lay.cp, lay.ep, lay.etp or 1,
                                     lay.micro_batch_size, lay.sharding))
