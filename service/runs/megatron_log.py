"""Runs read from Megatron-LM / Megatron Bridge logs, written from Megatron-LM's own format
(megatron/training/training.py ``training_log``, megatron/training/arguments.py ``_print_args``,
megatron/training/utils ``report_memory``):

- the arguments block printed at start-up, between ``---- arguments ----`` and ``---- end of arguments ----``,
  one ``  name ........ value`` per line: the layout, batch, sequence and model shape, so no config is needed;
- one line per logged iteration: `` [time] iteration N/ M | consumed samples: ... | elapsed time per iteration
  (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 400.1 | learning rate: ... | global batch size: 64 |
  lm loss: 1.2E+01 | ... |`` (MoE runs add their router losses as more ``name: value`` fields);
- ``[Rank 0] (after N iterations) memory (MB) | allocated: ... | max allocated: ... | reserved: ... |
  max reserved: ...`` where the run reports memory.

A line that looks like an iteration line and cannot be read is an error naming ``file:line``; so is a log with no
iteration line. Nothing half-read is stored. ``--config`` (a Megatron Bridge or Megatron-LM YAML) stands in for
the arguments block, or adds to it.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Optional

from recipe_index.cards import ModelCard
from recipe_index.hardware import get_hardware
from recipe_index.models import bundled_models
from service.runs.errors import RunInputError
from service.runs.measure import step_summary, thinned, warmup_count

MAX_LOG_BYTES = 256 * 1024 * 1024
_RANK_PREFIX = re.compile(r"^(?:\d+:\s)")  # srun -l / torchrun --tee prefixes a rank
_ARGS_START = re.compile(r"^-+ arguments -+$")
_ARGS_END = re.compile(r"^-+ end of arguments -+$")
_ARG_LINE = re.compile(r"^\s+(\S+) \.+ ?(.*)$")
_ITERATION = re.compile(r"\biteration\s+(\d+)/\s*(\d+)\s*\|(.*)$")
_MEMORY = re.compile(r"\(after (\d+) iterations\) memory \(MB\)(.*)$")
_ELAPSED = "elapsed time per iteration (ms)"


def _value(text: str) -> Any:
    text = text.strip()
    if text in ("None", ""):
        return None
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def _fields(rest: str, where: str) -> dict[str, float]:
    fields = {}
    for part in rest.split("|"):
        if not part.strip():
            continue
        name, colon, value = part.rpartition(":")
        if not colon:
            raise RunInputError(where, f"field {part.strip()!r} is not `name: value`", "is the line cut off?")
        try:
            fields[name.strip()] = float(value)
        except ValueError:
            raise RunInputError(where, f"{name.strip()}: {value.strip()!r} is not a number",
                                "the iteration line is damaged; remove it or fix the value") from None
    return fields


def _iteration(match: re.Match, where: str) -> dict:
    fields = _fields(match.group(3), where)
    elapsed = fields.get(_ELAPSED)
    if elapsed is None:
        raise RunInputError(where, f"the iteration line has no `{_ELAPSED}`", "is the line cut off?")
    if not math.isfinite(elapsed) or elapsed <= 0:
        raise RunInputError(where, f"{_ELAPSED} is {elapsed}, expected a positive number", "remove the line")
    loss = next((v for k, v in fields.items() if k.endswith("loss") and "load" not in k and "aux" not in k), None)
    return {"iteration": int(match.group(1)), "train_iters": int(match.group(2)), "step_s": elapsed / 1000,
            "tflops": fields.get("throughput per GPU (TFLOP/s/GPU)"), "gbs": fields.get("global batch size"),
            "loss": loss if loss is not None and math.isfinite(loss) else None}


def read_log(path: Path) -> dict:
    """The arguments, iterations and memory reports of a log: {"args", "iterations", "max_allocated_mb", "text"}."""
    if not path.is_file():
        raise RunInputError(str(path), "no such log file", "pass the log the job wrote (stdout of rank 0 / last)")
    if path.stat().st_size > MAX_LOG_BYTES:
        raise RunInputError(str(path), f"larger than {MAX_LOG_BYTES >> 20} MiB", "pass the log of one job")
    args: dict[str, Any] = {}
    iterations, memory, in_args, failure = [], [], False, None
    for number, raw in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        line = _RANK_PREFIX.sub("", raw, count=1)
        where = f"{path}:{number}"
        if _ARGS_START.match(line.strip()):
            in_args = True
        elif _ARGS_END.match(line.strip()):
            in_args = False
        elif in_args:
            arg = _ARG_LINE.match(line)
            if arg:
                args[arg.group(1)] = _value(arg.group(2))
        elif _ELAPSED in line:
            match = _ITERATION.search(line)
            if match is None:
                raise RunInputError(where, "an iteration line without `iteration N/ M |`", "is the line cut off?")
            iterations.append(_iteration(match, where))
        elif "memory (MB)" in line and (mem := _MEMORY.search(line)):
            fields = _fields(mem.group(2), where)
            if "max allocated" in fields:
                memory.append(fields["max allocated"])
        elif failure is None and ("out of memory" in line.lower() or line.startswith("Traceback")):
            failure = ("out_of_memory" if "out of memory" in line.lower() else "crashed", f"{where}: {line[:300]}")
    if not iterations:
        raise RunInputError(str(path), "no iteration line (`iteration N/ M | ... | elapsed time per iteration (ms): "
                            "...`)", "pass the log of a run that trained at least one logged iteration")
    return {"args": args, "iterations": iterations, "max_allocated_mb": max(memory) if memory else None,
            "failure": failure}


def find_key(data: Any, key: str) -> Any:
    """The first value of ``key`` anywhere in nested mappings (a Bridge ConfigContainer or a flat args dict)."""
    if isinstance(data, dict):
        if key in data:
            return data[key]
        for value in data.values():
            found = find_key(value, key)
            if found is not None:
                return found
    return None


def models_of_shape(args: dict) -> list[ModelCard]:
    """The bundled models whose shape the arguments print: layers, hidden size, heads, experts, and the FFN width
    where printed."""
    shape = (args.get("num_layers"), args.get("hidden_size"), args.get("num_attention_heads"),
             args.get("num_experts") or 0)
    if None in shape[:3]:
        return []
    found = [card for card in bundled_models() if (card.num_hidden_layers, card.hidden_size, card.num_attention_heads,
                                                   card.num_experts or 0) == shape]
    ffn = args.get("ffn_hidden_size")
    narrowed = [card for card in found if ffn is None or card.intermediate_size == ffn]
    return narrowed or found


def _precision(args: dict) -> str:
    recipe = {"delayed": "fp8ds", "tensorwise": "fp8cs", "mxfp8": "fp8mx", "blockwise": "fp8sc"}
    if args.get("fp8"):
        return recipe.get(str(args.get("fp8_recipe")), "fp8")
    if args.get("fp4"):
        return "nvfp4"
    return "bf16" if args.get("bf16") else "fp16" if args.get("fp16") else "fp32"


def _required(args: dict, key: str, source: str) -> Any:
    value = args.get(key)
    if value is None:
        raise RunInputError(f"{source} {key}", "not found in the arguments block or the config",
                            "pass the config the job ran with: --config CFG")
    return value


def record_data(log: dict, config: Optional[dict], *, model: Optional[str], gpu_type: str,
                gpus_per_node: Optional[int], source: str) -> dict:
    """The RunRecord fields (request, layout, measurement, outcome) of a read log."""
    args = dict(log["args"])
    keys = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
            "context_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size",
            "micro_batch_size", "global_batch_size", "seq_length", "world_size", "recompute_granularity",
            "use_distributed_optimizer", "use_megatron_fsdp", "use_custom_fsdp", "bf16", "fp16", "fp8", "fp8_recipe",
            "num_layers", "hidden_size", "num_attention_heads", "num_experts", "ffn_hidden_size",
            "data_parallel_size")
    for key in keys:
        if args.get(key) is None and config is not None:
            args[key] = find_key(config, key)
    name = model
    if name is None:
        cards = models_of_shape(args)
        if len(cards) != 1:
            among = f"; it fits {', '.join(c.id for c in cards)}" if cards else ""
            raise RunInputError(f"{source} model", "the model cannot be told from the log's shape (num_layers, "
                                f"hidden_size, num_attention_heads, num_experts){among}", "name it: --model ID")
        name = cards[0].id
    iterations = log["iterations"]
    gbs = int(args.get("global_batch_size") or iterations[-1]["gbs"] or _required(args, "global_batch_size", source))
    seq = int(_required(args, "seq_length", source))
    tp, pp, cp = (int(args.get(k) or 1) for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                                  "context_parallel_size"))
    world = int(args.get("world_size") or 0) or tp * pp * cp * int(_required(args, "data_parallel_size", source))
    node = get_hardware(gpu_type).gpus_per_node
    gpn = gpus_per_node or min(world, node)
    nodes = max(world // gpn, 1)
    previous = [0] + [it["iteration"] for it in iterations[:-1]]
    summary = step_summary([it["step_s"] for it in iterations],
                           [max(it["iteration"] - before, 1) for it, before in zip(iterations, previous)])
    timed = iterations[warmup_count(len(iterations)):]
    tflops = sorted(it["tflops"] for it in timed if it["tflops"] is not None)
    peak = get_hardware(gpu_type).bf16_tflops
    losses = [(it["iteration"], it["loss"]) for it in iterations if it["loss"] is not None]
    sharding = "full" if args.get("use_megatron_fsdp") or args.get("use_custom_fsdp") else (
        "optimizer" if args.get("use_distributed_optimizer") else "none")
    recompute = args.get("recompute_granularity") or "none"
    vp = args.get("virtual_pipeline_model_parallel_size")
    failure = log["failure"]
    last = iterations[-1]
    outcome, detail = ("completed", None) if last["iteration"] >= last["train_iters"] else (
        "stopped", f"the log ends at iteration {last['iteration']} of {last['train_iters']}")
    if failure is not None:
        outcome, detail = failure
    return {
        "request": {"model": name, "gpu_type": gpu_type, "gpus_per_node": gpn, "nodes": nodes, "seq_length": seq,
                    "global_batch_size": gbs, "precision": _precision(args)},
        "layout": {"tp": tp, "pp": pp, "vp": vp if vp and vp > 1 else None, "cp": cp,
                   "ep": int(args.get("expert_model_parallel_size") or 1),
                   "etp": args.get("expert_tensor_parallel_size"), "dp": max(world // (tp * pp * cp), 1),
                   "micro_batch_size": int(args.get("micro_batch_size") or 1),
                   "recompute": recompute if recompute in ("selective", "full") else "none", "sharding": sharding},
        "measurement": {**summary, "tokens_per_s_per_gpu": gbs * seq / summary["step_time_s"] / world,
                        "mfu": tflops[len(tflops) // 2] / peak if tflops and peak else None,
                        "peak_mem_gib": log["max_allocated_mb"] / 1024 if log["max_allocated_mb"] else None,
                        "loss_first": losses[0][1] if losses else None,
                        "loss_last": losses[-1][1] if losses else None, "loss_curve": thinned(losses)},
        "outcome": outcome, "outcome_detail": detail,
    }
