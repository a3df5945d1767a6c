"""`recipe-advisor plan`: rank the parallel layouts of a model on a GPU allocation. Exit 0, or 2 on unusable input."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional

from recipe_index.errors import ModelConfigError, UnknownHardwareError, UnknownModelError
from service.api_requests import MAX_GPUS, MAX_NODES
from service.memory import GRAD_REDUCE_DTYPES, gib_text
from service.planner import ENGINES, GOALS, Plan, PlanError, PlanRequest, make_request, plan
from service.request_overrides import INTEGER_LIMITS
from service.rules.precision import PRECISION_CHOICES
from service.sizing import gpus_that_fit
from trainer.config import MIN_SEQ_LENGTH

EXIT_OK, EXIT_UNUSABLE = 0, 2
DEFAULT_TOP = 10
REQUEST_ERRORS = (UnknownModelError, UnknownHardwareError, ModelConfigError, PlanError)
# Upper bounds of the count flags: the API's for --gpus/--nodes, the overrides' for the sequence length and
# batch (the same keys), so no spelling of a request reaches the planner with a count it would search for
# hours (its divisors are found by trial division) or a batch the config cannot hold.
FLAG_LIMITS = {"gpus": MAX_GPUS, "nodes": MAX_NODES, **INTEGER_LIMITS}


def add_request_arguments(p: argparse.ArgumentParser) -> None:
    """The flags `plan` and `recommend` share (DESIGN.md, command line)."""
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
    1..MAX_TOP (default 5; api_requests.py): a response is bounded, so it has no "all"."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; give e.g. --top 10, or 0 for all") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; give a count of layouts to show, or 0 for all")
    return value


def check_flag_limits(**values: Optional[int]) -> None:
    """Refuse a count flag above its bound (FLAG_LIMITS): PlanError naming the field, which report_error
    prints as its flag (gpus -> --gpus). A value below 1 is make_request's to refuse, naming the field."""
    for name, value in values.items():
        limit = FLAG_LIMITS[name]
        if value is not None and value > limit:
            least = MIN_SEQ_LENGTH if name == "seq_length" else 1
            raise PlanError(f"expected an integer from {least} to {limit:,}, got {value}", field=name)


def request_from_args(args: argparse.Namespace) -> PlanRequest:
    """The request, with the recipe's convergence contract for whatever the user left out.

    Only a value the user left out (None) takes the recipe's; a given 0 reaches make_request, which
    rejects it naming the field. Where the index has no recipe either, make_request's defaults apply.
    """
    from service.recommend import contract_defaults

    check_flag_limits(gpus=args.gpus, nodes=args.nodes, seq_length=args.seq_length,
                      global_batch_size=args.global_batch_size)
    seq, gbs, precision, grad_reduce, packed = contract_defaults(
        args.model, args.gpus, args.gpu_type, nodes=args.nodes, goal=args.goal, engine=args.engine,
        seq_length=args.seq_length, precision=args.precision)
    values = {"seq_length": args.seq_length if args.seq_length is not None else seq,
              "global_batch_size": args.global_batch_size if args.global_batch_size is not None else gbs,
              "precision": precision or args.precision,  # the asked one as recommend resolves it (fp8 -> fp8mx)
              "grad_reduce_dtype": getattr(args, "grad_reduce_dtype", None) or grad_reduce}
    return make_request(args.model, args.gpus, args.gpu_type, nodes=args.nodes, goal=args.goal, engine=args.engine,
                        packed_sequence=packed, **{name: value for name, value in values.items() if value is not None})


def report_error(err: Exception) -> int:
    field = getattr(err, "field", None)
    # A request field is the flag of the same name (seq_length -> --seq-length).
    where = f"--{field.replace('_', '-')}: " if isinstance(err, PlanError) and field else ""
    print(f"error: {where}{err}", file=sys.stderr)
    return EXIT_UNUSABLE


def format_text(result: Plan, top: Optional[int]) -> str:
    req, hw = result.request, result.request.hardware
    precision = req.fp8_recipe or req.precision
    lines = [f"{req.model.id} on {req.world_size} x {hw.name} ({req.gpus_per_node}/node x {req.num_nodes}), "
             f"{req.goal}, seq {req.seq_length}, global batch {req.global_batch_size}, {precision}"
             f"{', bf16 gradient reduce' if req.grad_reduce_dtype == 'bf16' else ''}, "
             f"{req.engine} engine; {hw.memory_gib:g} GiB per GPU, {result.usable_gib:.1f} usable",
             f"{len(result.fitting)} of {len(result.layouts)} valid layouts fit "
             f"({result.structures} parallel shapes enumerated)"]
    header = (f"{'#':>3} {'TP':>3} {'PP':>3} {'VP':>3} {'CP':>3} {'EP':>4} {'ETP':>3} {'DP':>5} {'mbs':>3} "
              f"{'acc':>5} {'recompute':<9} {'sharding':<9} {'GiB':>7} {'step s':>8} {'tok/s/GPU':>10} {'MFU':>5}")
    lines += ["", header]
    rows = result.layouts if not top else result.layouts[:top]
    for i, row in enumerate(rows, 1):
        lay, t = row.layout, row.time
        lines.append(f"{i:>3} {lay.tp:>3} {lay.pp:>3} {lay.vp or '-':>3} {lay.cp:>3} {lay.ep:>4} {lay.etp:>3} "
                     f"{row.dp:>5} {lay.micro_batch_size:>3} {row.grad_accumulation_steps:>5} {lay.recompute:<9} "
                     f"{row.sharding:<9} {gib_text(row.memory.total):>7} {t.step_time_s:>8.2f} "
                     f"{t.tokens_per_s_per_gpu:>10.0f} {t.mfu:>5.2f}" + ("" if row.fits else "  does not fit")
                     + ("  needs a layout string (RA-L019)" if row.needs_layout_string else ""))
    not_fitting = [i for i, r in enumerate(rows, 1) if not r.fits]
    if not_fitting:  # about those rows only: others above may fit
        first = not_fitting[0]
        lines += ["", f"{len(not_fitting)} of the {len(rows)} rows shown are marked \"does not fit\"; "
                      f"row {first}: {result.why_not_fitting(rows[first - 1])}"]
    counts = gpus_that_fit(result)
    if not result.layouts:
        works = f"; {' or '.join(map(str, counts))} GPUs of that type work" if counts else ""
        lines.append(f"no layout on {req.world_size} x {hw.name} passes the rules ({req.engine} engine): "
                     f"see the rejections below{works}")
    elif not result.fitting:
        lines.append(f"nothing fits on {req.world_size} x {hw.name}: " +
                     (f"the fewest GPUs of that type found to fit it: {counts[0]}" if counts
                      else "no GPU count up to 65536 fits"))
    lines += [f"note: {note}" for note in result.notes]
    if result.rejections:
        lines += ["", "rejected by the rules:"]
        for code, (finding, count) in sorted(result.rejections.items()):
            lines.append(f"  {code} x{count}: {finding.message}")
    return "\n".join(lines)


def plan_json(result: Plan, top: Optional[int]) -> dict:
    """`plan --format json` and POST /v1/plan: the plan, the GPU counts that fit when none here does, and
    notes on the estimates."""
    return {**result.to_dict(top=top), "gpus_that_fit": gpus_that_fit(result), "notes": result.notes}


def run(args: argparse.Namespace) -> int:
    try:
        request = request_from_args(args)
        result = plan(request)
    except REQUEST_ERRORS as err:
        return report_error(err)
    top = args.top if args.top and args.top > 0 else None
    if args.format == "json":
        print(json.dumps(plan_json(result, top), indent=2))
    else:
        print(format_text(result, top))
    return EXIT_OK
