"""AutoModel's device-mesh and batch rules, as its mesh builder, strategy parser and step scheduler raise them.

``(dp·cp·tp) % ep == 0`` and ``dp_replicate < dp`` come from its FSDP2 mesh builder, the world divided by
``tp·cp·pp`` from its data-parallel inference, ``GBS % (LBS·dp) == 0`` from ``StepScheduler``, the pipeline
block's rules from ``parse_distributed_section``; TP over the attention and KV heads from the column-wise
sharded q/k/v projections of its tensor-parallel plans (no KV-head replication).
"""

from __future__ import annotations

from math import gcd
from typing import Iterator, Optional

from service.layouts.arithmetic import divisors
from service.validate.automodel.facts import section, whole
from service.validate.automodel.view import RecipeView
from service.validate.rules.registry import Violation, automodel_rule

_SOURCE = "AutoModel "


def smallest_world(view: RecipeView) -> int:
    """The fewest GPUs the layout runs on: pp·lcm(tp·cp, ep) with dp inferred, dp·tp·cp·pp with dp given
    (then EP must divide dp·tp·cp, which RA-A005 judges at that world)."""
    sizes = view.sizes
    if sizes.dp is not None:
        return sizes.dp * sizes.non_dp
    inner = sizes.tp * sizes.cp
    return sizes.pp * inner * sizes.ep // gcd(inner, sizes.ep)


def _world_fix(view: RecipeView, needed: int) -> str:
    per_node = view.world.gpus_per_node
    nodes = -(-needed // per_node)
    ci = view.world.ci_nodes
    hint = (f"; its ci.nodes says {ci}: judge it there with --nodes {ci}" if ci and ci > 1
            and ci * per_node != view.world.size else "")
    return (f"run it on {needed} GPUs (--nproc-per-node {min(needed, per_node)}"
            + (f" on {nodes} nodes" if nodes > 1 else "") + f"), or shrink the parallel sizes to fit "
            f"{view.world.size} GPUs{hint}")


@automodel_rule("RA-A004", "error", "distributed.tp_size", "the world holds tp·cp·pp (·dp when dp_size is set)",
                _SOURCE + "mesh_utils._infer_dp_size and init_device_mesh")
def world_holds_layout(view: RecipeView) -> Optional[Violation]:
    sizes, world = view.sizes, view.world.size
    if sizes.dp_at(world) is not None:
        return None
    needed = smallest_world(view)
    product = f"tp·cp·pp = {sizes.tp}·{sizes.cp}·{sizes.pp} = {sizes.non_dp}"
    if sizes.dp is not None:
        return Violation(f"dp_size {sizes.dp} with {product} needs exactly {needed} GPUs, not the {world} of "
                         f"{view.world.source}; the smallest world this layout needs is {needed}",
                         _world_fix(view, needed) + ", or set distributed.dp_size: none to infer it",
                         key="distributed.dp_size")
    return Violation(f"world size {world} ({view.world.source}) is not divisible by {product}; the smallest "
                     f"world this layout needs is {needed}", _world_fix(view, needed))


@automodel_rule("RA-A005", "error", "distributed.ep_size", "EP divides dp·cp·tp (the experts' mesh)",
                _SOURCE + "mesh_utils._create_fsdp2_device_mesh")
def ep_divides_non_pp(view: RecipeView) -> Optional[Violation]:
    sizes, dp = view.sizes, view.dp
    if sizes.ep <= 1 or dp is None:
        return None
    non_pp = dp * sizes.cp * sizes.tp
    if non_pp % sizes.ep == 0:
        return None
    options = [d for d in divisors(non_pp) if d > 1]
    needed = smallest_world(view)
    return Violation(f"ep_size {sizes.ep} does not divide dp·cp·tp = {dp}·{sizes.cp}·{sizes.tp} = {non_pp} at "
                     f"{view.world.size} GPUs; the smallest world this layout needs is {needed}",
                     (f"set distributed.ep_size to one of {options}, or " if options else "")
                     + _world_fix(view, needed))


@automodel_rule("RA-A006", "error", "distributed.dp_replicate_size",
                "dp_replicate_size divides dp and is below it (HSDP), FSDP2 only",
                _SOURCE + "mesh_utils: dp_replicate_size checks")
def dp_replicate_fits(view: RecipeView) -> Optional[Violation]:
    sizes, dp = view.sizes, view.dp
    replicate = sizes.dp_replicate
    if replicate is None or replicate == 1:
        return None
    if sizes.strategy != "fsdp2":
        return Violation(f"dp_replicate_size {replicate} with strategy {sizes.strategy}: only FSDP2 replicates "
                         "over part of the data-parallel group", "drop distributed.dp_replicate_size, or use "
                         "strategy: fsdp2")
    if dp is None:
        return None
    if dp % replicate or replicate >= dp:
        smaller = [d for d in divisors(dp) if 1 < d < dp]
        return Violation(f"dp_replicate_size {replicate} must divide dp_size {dp} and be less than it (FSDP2 "
                         "does not run the pure-DDP case)",
                         f"set distributed.dp_replicate_size to one of {smaller}" if smaller
                         else "drop distributed.dp_replicate_size")
    return None


def _tp_options(heads: int, kv_heads: int, world: int) -> list[int]:
    return [d for d in divisors(kv_heads) if heads % d == 0 and world % d == 0]


@automodel_rule("RA-A007", "error", "distributed.tp_size", "TP divides the attention heads",
                _SOURCE + "tensor-parallel plans (column-wise q projection)")
def tp_divides_heads(view: RecipeView) -> Optional[Violation]:
    model, tp = view.model, view.sizes.tp
    if model is None or tp <= 1 or model.num_attention_heads % tp == 0:
        return None
    return Violation(f"tp_size {tp} does not divide {model.id}'s {model.num_attention_heads} attention heads",
                     f"set distributed.tp_size to one of "
                     f"{_tp_options(model.num_attention_heads, model.num_key_value_heads, view.world.size)}")


@automodel_rule("RA-A008", "error", "distributed.tp_size", "TP divides the KV heads (no KV-head replication)",
                _SOURCE + "tensor-parallel plans (column-wise k/v projections)")
def tp_divides_kv_heads(view: RecipeView) -> Optional[Violation]:
    model, tp = view.model, view.sizes.tp
    if model is None or tp <= 1 or model.architecture.startswith("mla"):
        return None  # MLA's latent KV is not split by heads
    if model.num_key_value_heads % tp == 0 or model.num_attention_heads % tp:
        return None  # RA-A007 already names a TP that divides both
    return Violation(f"tp_size {tp} does not divide {model.id}'s {model.num_key_value_heads} KV heads: AutoModel "
                     "shards k/v column-wise and does not replicate KV heads",
                     f"set distributed.tp_size to one of "
                     f"{_tp_options(model.num_attention_heads, model.num_key_value_heads, view.world.size)}")


@automodel_rule("RA-A009", "error", "step_scheduler.global_batch_size",
                "global_batch_size divisible by local_batch_size · dp", _SOURCE + "StepScheduler")
def batch_divides(view: RecipeView) -> Optional[Violation]:
    facts, dp = view.facts, view.dp
    gbs, lbs = facts.global_batch_size, facts.layout.micro_batch_size
    if gbs is None or dp is None or gbs % (lbs * dp) == 0:
        return None
    step = lbs * dp
    lower, upper = gbs // step * step, (gbs // step + 1) * step
    fits = [str(b) for b in (lower, upper) if b > 0]
    locals_ = [d for d in divisors(gbs // dp) if d <= lbs] if gbs % dp == 0 else []
    fix = f"set step_scheduler.global_batch_size to {' or '.join(fits)}"
    if locals_:
        fix += f", or step_scheduler.local_batch_size to {locals_[-1]}"
    return Violation(f"global_batch_size {gbs} is not divisible by local_batch_size · dp = {lbs}·{dp} = {step} at "
                     f"{view.world.size} GPUs ({view.world.source}); AutoModel's step scheduler refuses it", fix)


@automodel_rule("RA-A010", "error", "distributed.pipeline", "pipeline settings need pp_size > 1, and pp_size > 1 "
                "a `distributed.pipeline` block; `distributed.moe` needs ep_size > 1",
                _SOURCE + "parse_distributed_section")
def pipeline_and_moe_blocks(view: RecipeView) -> Iterator[Violation]:
    dist, sizes = section(view.data, "distributed"), view.sizes
    if sizes.pp > 1 and dist.get("pipeline") is None:
        yield Violation(f"pp_size {sizes.pp} enables pipeline parallelism but there is no distributed.pipeline "
                        "block: AutoModel refuses to start", "add `pipeline: {}` under distributed (defaults) or "
                        "set pp_schedule and pp_microbatch_size there", key="distributed.pp_size")
    if "pipeline" in dist and sizes.pp <= 1:
        yield Violation(f"distributed.pipeline is set but pp_size is {sizes.pp}: AutoModel ignores the block",
                        "set distributed.pp_size above 1, or drop the pipeline block", severity="warning")
    if "moe" in dist and sizes.ep <= 1:
        yield Violation(f"distributed.moe is set but ep_size is {sizes.ep}: AutoModel ignores the block",
                        "set distributed.ep_size above 1, or drop the moe block", severity="warning",
                        key="distributed.moe")


@automodel_rule("RA-A013", "error", "step_scheduler.local_batch_size",
                "pipeline micro batches per step: local_batch_size / pp_microbatch_size, whole and >= pp_size",
                _SOURCE + "recipes/llm/train_ft.py (assert: pp_batch_size // pp_microbatch_size >= pp_size); "
                "components/distributed/pipelining/autopipeline.py (raise: local_batch_size % microbatch_size)")
def pipeline_microbatches(view: RecipeView) -> Optional[Violation]:
    pipeline = section(view.data, "distributed").get("pipeline")
    if view.sizes.pp <= 1 or not isinstance(pipeline, dict):
        return None
    local = whole(section(view.data, "step_scheduler").get("local_batch_size")) or 1
    micro = whole(pipeline.get("pp_microbatch_size")) or 1
    pp, need = view.sizes.pp, view.sizes.pp * micro
    if local % micro == 0 and local // micro >= pp:
        return None
    why = (f"local_batch_size {local} does not divide into pp_microbatch_size {micro} micro batches" if local % micro
           else f"local_batch_size {local} / pp_microbatch_size {micro} = {local // micro} micro batches per step, "
                f"fewer than the {pp} pipeline stages")
    return Violation(f"{why}: AutoModel refuses to start the pipeline",
                     f"set step_scheduler.local_batch_size to a multiple of {micro} of at least {need} (e.g. {need}), "
                     f"or distributed.pipeline.pp_microbatch_size to a divisor of {local} of at most "
                     f"{local // pp or 1}")
