"""Measured training throughput of one layout: NVIDIA's published figures and this trainer's own GPU runs.

``data/published_throughput.json`` holds what the Megatron Bridge and NeMo performance summaries and the
dgxc-benchmarking READMEs publish, one row per model, GPU type, GPU count, sequence, precision and layout,
each with its release and source; ``data/measured_bundled_trainer.json`` holds the bundled trainer's runs on a
GPU (benchmarks/gpu). `plan` shows a measurement beside the estimate of the layout it was taken on; the
ranking stays the estimate. Where a setup was published by several releases, the newest one counts: the
same layout moves between releases as the software does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

DATA = Path(__file__).resolve().parent / "data"
PUBLISHED = DATA / "published_throughput.json"
MEASURED_BUNDLED = DATA / "measured_bundled_trainer.json"
# torchtitan's and NeMo AutoModel's published FSDP2 runs: the bundled engine's calibration (rows it cannot
# score say why in `left_out`).
PUBLISHED_FSDP2 = DATA / "published_fsdp2_throughput.json"
# README "example output" lines are single log lines, some without the GPU named: not measurements of a
# stated layout.
UNSCORED_VARIANTS = ("readme_example_output",)


@dataclass(frozen=True)
class Measurement:
    tokens_per_s_per_gpu: float
    global_batch_size: int
    release: Optional[str]
    source: str

    def to_dict(self) -> dict:
        return {"tokens_per_s_per_gpu": round(self.tokens_per_s_per_gpu, 1),
                "global_batch_size": self.global_batch_size, "release": self.release, "source": self.source}


def measured_tokens_per_s(row: dict) -> Optional[float]:
    """Tokens/s per GPU as published, or derived from the whole job's tokens/s or the step time."""
    if row.get("tokens_per_s_per_gpu"):
        return float(row["tokens_per_s_per_gpu"])
    if row.get("tokens_per_s_total"):
        return row["tokens_per_s_total"] / row["num_gpus"]
    if row.get("step_time_s"):
        return row["global_batch_size"] * row["seq_length"] / (row["step_time_s"] * row["num_gpus"])
    return None


def release_order(release: Optional[str]) -> tuple[int, ...]:
    """A release as a sortable tuple ("26.04.01" -> (26, 4, 1)); none sorts first."""
    return tuple(int(part) for part in (release or "0").split("."))


def measurement_key(model: str, mode: str, hardware: str, num_gpus: int, seq_length: int, precision_token: str,
                    engine: str, tp: int, pp: int, vp: Optional[int], cp: int, ep: int, etp: Optional[int],
                    micro_batch_size: int, fully_sharded: bool) -> tuple:
    """What a measurement is of: the request (without the global batch, which moves the pipeline bubble but
    not the layout) and the layout, Megatron-FSDP / FSDP2 included."""
    return (model, mode, hardware, num_gpus, seq_length, precision_token, engine, tp, pp, vp or 1, cp, ep, etp or 1,
            micro_batch_size, fully_sharded)


def _row_key(row: dict) -> tuple:
    return measurement_key(row["model"], row["mode"], row["hardware"], row["num_gpus"], row["seq_length"],
                           row["precision_token"], row.get("engine", "megatron"), row["tp"], row["pp"], row.get("vp"),
                           row["cp"], row["ep"], row.get("etp"), row["micro_batch_size"], bool(row.get("fsdp")))


@lru_cache(maxsize=1)
def _measurements() -> dict[tuple, Measurement]:
    """The newest measurement of each key (a row without a release is older than any release)."""
    newest: dict[tuple, tuple[tuple, Measurement]] = {}
    for path in (PUBLISHED, MEASURED_BUNDLED):
        for row in json.loads(path.read_text()):
            if row.get("variant") in UNSCORED_VARIANTS or not row.get("hardware") or not row.get("num_gpus"):
                continue
            tokens = measured_tokens_per_s(row)
            if tokens is None:
                continue
            key, order = _row_key(row), release_order(row.get("release"))
            if key not in newest or order > newest[key][0]:
                newest[key] = (order, Measurement(tokens, row["global_batch_size"], row.get("release"),
                                                  row["source"]))
    return {key: measurement for key, (_, measurement) in newest.items()}


def find_measurement(key: tuple) -> Optional[Measurement]:
    """The newest measurement of a :func:`measurement_key`, if one was published or run."""
    return _measurements().get(key)


def measured_models() -> frozenset[str]:
    """Models with at least one measurement (a quick test before building keys)."""
    return frozenset(key[0] for key in _measurements())


@lru_cache(maxsize=1)
def fsdp2_calibration_rows() -> tuple[dict, ...]:
    """The published FSDP2 rows the bundled engine is calibrated on (those not left out)."""
    return tuple(row for row in json.loads(PUBLISHED_FSDP2.read_text()) if row.get("left_out") is None)


@lru_cache(maxsize=1)
def bundled_trainer_runs() -> tuple[dict, ...]:
    """The bundled trainer's own GPU runs (benchmarks/gpu)."""
    return tuple(json.loads(MEASURED_BUNDLED.read_text()))


@lru_cache(maxsize=1)
def megatron_published_count() -> int:
    """Published Megatron measurements of a stated layout (the Megatron engine's calibration)."""
    return sum(1 for key in _measurements() if key[6] == "megatron")
