"""`recipe-advisor plan`: rank the parallel layouts of a model on a GPU allocation. Exit 0, or 2 on unusable input."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from recipe_index import get_hardware
from recipe_index.errors import ModelConfigError, UnknownHardwareError, UnknownModelError
from service.estimate.memory import GRAD_REDUCE_DTYPES
from service.plan.planner import plan
from service.plan.report import DEFAULT_TOP, format_text, plan_json
from service.plan.types import ENGINES, GOALS, PlanError
from service.recommend.contract import plan_request
from service.request import AdviceRequest, advice_request, check_limits
from service.runs.advice import reading_store, with_runs
from service.validate.rules.precision import PRECISION_CHOICES

EXIT_OK, EXIT_UNUSABLE = 0, 2
REQUEST_ERRORS = (UnknownModelError, UnknownHardwareError, ModelConfigError, PlanError)


def add_request_arguments(p: argparse.ArgumentParser) -> None:
    """The flags `plan` and `recommend` share: the fields of AdviceRequest."""
    p.add_argument("--model", required=True, help="bundled model id or alias, a config.json path, or a HF repo id")
    p.add_argument("--gpus", type=int, required=True,
                   help="GPUs per node; without --nodes a multiple of the node size is read as the total")
    p.add_argument("--gpu-type", required=True, help="hardware card, e.g. h100 (`recipe-advisor hardware`)")
    p.add_argument("--nodes", type=int, help="number of nodes")
    p.add_argument("--goal", choices=GOALS, default="pretrain", help="pretrain, sft or peft (default pretrain)")
    p.add_argument("--seq-length", type=int, help="sequence length (default: the recipe's)")
    p.add_argument("--global-batch-size", type=int, help="global batch in sequences (default: the recipe's)")
    p.add_argument("--precision", choices=PRECISION_CHOICES,
                   help="training precision, or for fp8 Megatron Bridge's FP8 recipe: fp8cs (current scaling), "
                        "fp8ds (delayed), fp8mx (MXFP8), fp8sc (blockwise) (default: the recipe's)")
    p.add_argument("--grad-reduce-dtype", choices=GRAD_REDUCE_DTYPES,
                   help="dtype gradients are reduced and (Megatron) buffered in (default: the recipe's; fp32)")
    p.add_argument("--engine", choices=ENGINES, default="megatron",
                   help="megatron: every parallel dimension; bundled: what the bundled trainer supports")
    p.add_argument("--db", metavar="URL", help="the runs store whose measurements stand beside the estimates (a "
                   "SQLite path or a postgresql+psycopg:// URL; default RECIPE_ADVISOR_DB, else the user's store)")


def add_parser(subparsers, name: str) -> None:
    p = subparsers.add_parser(name, help="rank the valid parallel layouts for a model on your hardware",
                              description="Enumerate TP/PP/VP/CP/EP/ETP and micro batch, prune with the validate "
                                          "rules, estimate memory and step time, rank what fits by tokens/s. "
                                          "Exit 0; 2 on unusable input.")
    add_request_arguments(p)
    p.add_argument("--top", type=_top, default=DEFAULT_TOP, help=f"layouts to show (default {DEFAULT_TOP}; 0: all)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=run)


def _top(text: str) -> int:
    """--top: how many rows; 0 shows all of them, a negative count is refused. The API's ``top`` is
    1..MAX_TOP (default 5): a response is bounded, so it has no "all"."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; give e.g. --top 10, or 0 for all") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; give a count of layouts to show, or 0 for all")
    return value


def request_from_args(args: argparse.Namespace, overrides: Sequence[str] = (), *,
                      gpu_type_first: bool = False) -> AdviceRequest:
    """The request the flags give: the counts within their bounds, the model resolved (a bundled name, a
    config.json path or a Hub id), the overrides parsed. ``gpu_type_first`` (`plan`): an unknown GPU type
    is named before the model is looked up; `recommend` checks its overrides first, which may restate it."""
    check_limits(gpus=args.gpus, nodes=args.nodes, seq_length=args.seq_length,
                 global_batch_size=args.global_batch_size)
    if gpu_type_first:
        get_hardware(args.gpu_type)
    top = getattr(args, "top", None)
    return advice_request(args.model, args.gpus, args.gpu_type, overrides=overrides, nodes=args.nodes, goal=args.goal,
                          seq_length=args.seq_length, global_batch_size=args.global_batch_size,
                          precision=args.precision, grad_reduce_dtype=args.grad_reduce_dtype,
                          engine=args.engine, top=top if top and top > 0 else None)


def report_error(err: Exception) -> int:
    field = getattr(err, "field", None)
    # A request field is the flag of the same name (seq_length -> --seq-length).
    where = f"--{field.replace('_', '-')}: " if isinstance(err, PlanError) and field else ""
    print(f"error: {where}{err}", file=sys.stderr)
    return EXIT_UNUSABLE


def run(args: argparse.Namespace) -> int:
    try:
        request = request_from_args(args, gpu_type_first=True)
        result = with_runs(plan(plan_request(request)), reading_store(args.db))
    except REQUEST_ERRORS as err:
        return report_error(err)
    if args.format == "json":
        print(json.dumps(plan_json(result, request.top), indent=2))
    else:
        print(format_text(result, request.top))
    return EXIT_OK
