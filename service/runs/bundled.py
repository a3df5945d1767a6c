"""Runs of the bundled trainer and of NeMo AutoModel: a metrics JSON-lines file (``training.jsonl``: step, loss,
tps, mem, mfu per logged step; AutoModel adds ``tps_per_gpu``) read beside the config that ran (AutoModel-style
YAML: ``step_scheduler``, ``distributed``, ``dataset``, ``hardware``).

A line that is not a metrics record is an error naming ``file:line``; so is a file cut off mid-line, unless the
caller knows the run was stopped (``recipe-advisor train`` after a kill): then the torn tail is what the kill
left and is dropped. Nothing is stored from a file with an error.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Optional

from service.runs.errors import RunInputError
from service.runs.measure import step_summary, thinned, warmup_count
from service.runs.schema import RunRecord
from trainer.contract.dotted import get_dotted

FAST_PATH_KEYS = ("model.kernels", "model.attn_implementation", "loss_fn.chunked", "loss_fn.chunk_size",
                  "optimizer.fused", "compile.enabled")
METRICS_FILE = "training.jsonl"
MAX_METRICS_BYTES = 64 * 1024 * 1024


def dotted(config: dict, key: str, default: Any = None) -> Any:
    found = get_dotted(config, key)
    return default if found is None else found


def _number(value: Any, where: str, key: str, *, positive: bool = False) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RunInputError(where, f"{key} is {value!r}, not a number", "this is not a metrics record of the trainer")
    if not math.isfinite(value) or (positive and value <= 0):
        raise RunInputError(where, f"{key} is {value}, expected a finite{' positive' if positive else ''} number",
                            "the run's metrics are corrupt; record it with the outcome it had (--outcome crashed)")
    return float(value)


def _metrics_line(line: str, where: str, torn: bool) -> dict:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        if torn:
            raise RunInputError(where, "the file ends mid-record (truncated: the run was cut off while writing)",
                                "pass --outcome stopped to record what it reached (the torn line is dropped)")
        raise RunInputError(where, f"not a JSON metrics record ({exc.msg})", "remove or fix the line") from None
    if not isinstance(record, dict):
        raise RunInputError(where, "not a JSON object", "each line of training.jsonl is one metrics record")
    for key in ("step", "tps"):
        if key not in record:
            raise RunInputError(where, f"the record has no {key!r}", "each record needs step and tps (tokens/s)")
    if not isinstance(record["step"], int) or record["step"] < 0:
        raise RunInputError(where, f"step is {record['step']!r}, expected a whole number", "fix the line")
    _number(record["tps"], where, "tps", positive=True)
    for key in ("loss", "mem", "mfu", "tps_per_gpu"):
        if key == "loss" and isinstance(record.get(key), float) and not math.isfinite(record[key]):
            continue  # a diverged loss is data
        _number(record.get(key), where, key)
    return record


def read_metrics(path: Path, *, drop_torn_tail: bool = False) -> list[dict]:
    """The records of a metrics file, in order; RunInputError naming ``file:line`` for the first bad one."""
    if not path.is_file():
        raise RunInputError(str(path), "no such metrics file", f"point at the run's checkpoint_dir, which holds "
                            f"{METRICS_FILE}")
    if path.stat().st_size > MAX_METRICS_BYTES:
        raise RunInputError(str(path), f"larger than {MAX_METRICS_BYTES >> 20} MiB", "is this a metrics file?")
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    complete = text.endswith("\n")
    if complete:
        lines.pop()
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        torn = number == len(lines) and not complete
        if torn and drop_torn_tail:
            try:
                json.loads(line)
            except json.JSONDecodeError:
                break
        records.append(_metrics_line(line, f"{path}:{number}", torn))
    if not records:
        raise RunInputError(str(path), "holds no metrics record", "the run logged no step; nothing to record")
    return records


def _goal(config: dict) -> str:
    mode = dotted(config, "metadata.mode")
    if mode in ("pretrain", "sft", "peft"):
        return mode
    if config.get("peft"):
        return "peft"
    target = str(dotted(config, "dataset._target_", "")).lower()
    return "sft" if "sft" in target or "squad" in target or "hellaswag" in target else "pretrain"


def _sharding(config: dict) -> str:
    strategy = dotted(config, "distributed.strategy")
    target = str(dotted(config, "distributed._target_", "")).lower()
    if strategy == "ddp" or "ddp" in target:
        return "none"
    if strategy == "megatron":
        return "full" if dotted(config, "distributed.use_megatron_fsdp") else "optimizer"
    return "full"  # fsdp2, the bundled trainer's and AutoModel's default


def _recompute(config: dict) -> str:
    value = dotted(config, "distributed.activation_checkpointing", "none")
    if value is True:
        return "full"
    return value if value in ("none", "selective", "full") else "none"


def request_and_layout(config: dict, gpus_per_node: Optional[int], nodes: Optional[int]) -> tuple[dict, dict]:
    """The request and layout a config ran (``gpus_per_node`` / ``nodes``: as launched, else the config's)."""
    gpn = gpus_per_node or dotted(config, "hardware.gpus_per_node") or 1
    nodes = nodes or dotted(config, "hardware.num_nodes") or 1
    model = dotted(config, "model.pretrained_model_name_or_path") or dotted(config, "metadata.model")
    for key, value in (("model.pretrained_model_name_or_path", model),
                       ("dataset.seq_length", dotted(config, "dataset.seq_length")),
                       ("step_scheduler.global_batch_size", dotted(config, "step_scheduler.global_batch_size"))):
        if value is None:
            raise RunInputError(f"config {key}", "missing", "record the run with the config it ran (--config CFG)")
    sizes = {name: int(dotted(config, f"distributed.{name}_size") or 1) for name in ("tp", "pp", "cp", "ep")}
    vp, etp = dotted(config, "distributed.vp_size"), dotted(config, "distributed.etp_size")
    world = gpn * nodes
    request = {"model": str(model), "gpu_type": str(dotted(config, "hardware.gpu_type") or "cpu"),
               "gpus_per_node": gpn, "nodes": nodes, "goal": _goal(config),
               "seq_length": dotted(config, "dataset.seq_length"),
               "global_batch_size": dotted(config, "step_scheduler.global_batch_size"),
               "precision": str(config.get("precision") or dotted(config, "model.dtype") or "bf16")}
    layout = {**sizes, "vp": vp if vp and vp > 1 else None, "etp": etp,
              "dp": max(world // (sizes["tp"] * sizes["pp"] * sizes["cp"]), 1),
              "micro_batch_size": dotted(config, "step_scheduler.local_batch_size") or 1,
              "recompute": _recompute(config), "sharding": _sharding(config),
              "fast_paths": {key: dotted(config, key) for key in FAST_PATH_KEYS if dotted(config, key) is not None}}
    return request, layout


def measurement(records: list[dict], global_batch_size: int, seq_length: int, world_size: int) -> dict:
    """What the metrics records measured: step times after warm-up, throughput, memory, loss."""
    tokens = global_batch_size * seq_length
    # AutoModel logs the tokens a step held (num_tokens_per_step); the bundled trainer's batch is always full.
    step_times = [(r.get("num_tokens_per_step") or tokens) / r["tps"] for r in records]
    previous = [0] + [r["step"] for r in records[:-1]]
    counts = [max(r["step"] - before, 1) for r, before in zip(records, previous)]
    summary = step_summary(step_times, counts)
    losses = [(r["step"], r["loss"]) for r in records if isinstance(r.get("loss"), (int, float))
              and math.isfinite(r["loss"])]
    timed = records[warmup_count(len(records)):]
    mfus = [r["mfu"] for r in timed if r.get("mfu") is not None]
    mems = [r["mem"] for r in records if r.get("mem") is not None]
    out = {**summary, "peak_mem_gib": max(mems) if mems else None,
           "mfu": sorted(mfus)[len(mfus) // 2] if mfus else None,
           "loss_first": losses[0][1] if losses else None, "loss_last": losses[-1][1] if losses else None,
           "loss_curve": thinned(losses)}
    if summary.get("step_time_s"):
        out["tokens_per_s_per_gpu"] = tokens / summary["step_time_s"] / world_size
    return out


def record_from_metrics(records: list[dict], config: dict, *, engine: str = "bundled",
                        gpus_per_node: Optional[int] = None, nodes: Optional[int] = None,
                        config_text: Optional[str] = None, **fields: Any) -> RunRecord:
    """A RunRecord of one run's metrics and config; ``fields`` add provenance, outcome, reproduce."""
    request, layout = request_and_layout(config, gpus_per_node, nodes)
    world = request["gpus_per_node"] * request["nodes"]
    measured = measurement(records, request["global_batch_size"], request["seq_length"], world)
    provenance = {"engine": engine, "hosts": request["nodes"], **fields.pop("provenance", {})}
    return RunRecord.model_validate({"request": request, "layout": layout, "measurement": measured,
                                     "provenance": provenance, "config_text": config_text, **fields})
