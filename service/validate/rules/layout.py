"""Layout and batch rules (the precision rules are in precision.py): what Megatron-Core / Bridge enforce, plus the
recipe recommender's parallelism resizing rules and common pitfalls.

Each rule names its source. A rule judges a ``Facts`` and knows nothing about YAML, so the planner
prunes with the same code.
"""

from __future__ import annotations

from math import lcm
from typing import Optional

from service.estimate.constants import LONG_CONTEXT
from service.facts import Facts
from service.layouts.arithmetic import divisors, sequence_parallel_splits
from service.layouts.bridge_tables import megatron_fsdp_with_pp
from service.validate.rules.registry import Violation, layout_rule
from service.validate.rules.sizes import bundled, cp_sizes, larger_tp, tp_domain


@layout_rule("RA-L001", "error", "distributed.tp_size", "TP divides the attention heads",
             "mcore transformer_config: num_attention_heads % TP == 0 (raise)")
def tp_divides_attention_heads(f: Facts) -> Optional[Violation]:
    if f.model is None or f.model.num_attention_heads % f.layout.tp == 0:
        return None
    heads = f.model.num_attention_heads
    ok = [d for d in divisors(heads) if d <= max(8, f.layout.tp)]
    return Violation(f"tp_size={f.layout.tp} does not divide num_attention_heads={heads} of {f.model.id}",
                     f"set distributed.tp_size to a divisor of {heads}: {ok}")


def _kv_heads_and_tp(f: Facts) -> tuple[Optional[int], int]:
    """The model's KV heads (None when no model is known) and the layout's TP."""
    return (None if f.model is None else f.model.num_key_value_heads), f.layout.tp


@layout_rule("RA-L002", "error", "distributed.tp_size", "TP and KV heads divide one another",
             "mcore transformer_config: num_query_groups multiple or divisor of TP (raise)")
def tp_and_kv_heads_compatible(f: Facts) -> Optional[Violation]:
    kv, tp = _kv_heads_and_tp(f)
    if kv is None or kv % tp == 0 or tp % kv == 0:
        return None
    return Violation(f"tp_size={tp} and num_key_value_heads={kv} of {f.model.id} neither divide the other; "
                     "Megatron-Core rejects this",
                     f"set distributed.tp_size to a divisor of {kv}: {divisors(kv)}")


@layout_rule("RA-L003", "warning", "distributed.tp_size", "TP divides the KV heads (resizing rule 1)",
             "resizing rule 1; Megatron Bridge 3h (code only needs multiple-or-divisor)")
def tp_divides_kv_heads(f: Facts) -> Optional[Violation]:
    kv, tp = _kv_heads_and_tp(f)
    if kv is None or kv % tp == 0 or tp % kv:
        return None  # fine, or already an error under RA-L002
    return Violation(f"tp_size={tp} exceeds num_key_value_heads={kv}: each KV head is replicated "
                     f"{tp // kv}x, costing memory and bandwidth",
                     f"prefer distributed.tp_size in {divisors(kv)} and "
                     + ("let FSDP2 shard the rest" if bundled(f) else "add PP/CP instead"))


@layout_rule("RA-L004", "warning", "distributed.sequence_parallel", "SP needs TP > 1",
             "mcore model_parallel_config raise; Bridge finalize() silently sets SP=False (3a)")
def sp_needs_tp(f: Facts) -> Optional[Violation]:
    if f.layout.sp and f.layout.tp == 1:
        who = "the bundled trainer ignores it" if bundled(f) else "Megatron Bridge silently turns it off"
        return Violation(f"sequence_parallel is true with tp_size=1; {who}",
                         "set distributed.sequence_parallel: false, or raise distributed.tp_size")
    return None


@layout_rule("RA-L005", "info", "distributed.sequence_parallel", "SP on whenever TP > 1",
             "resizing rule 5: SP is essentially free with TP")
def sp_with_tp(f: Facts) -> Optional[Violation]:
    lay, seq = f.layout, f.seq_length
    splits = seq is None or sequence_parallel_splits(seq, lay.tp, lay.cp)  # else RA-L018 refuses SP
    if lay.tp > 1 and not lay.sp and lay.ep == 1 and splits:
        return Violation(f"tp_size={f.layout.tp} without sequence_parallel keeps redundant activation copies",
                         "set distributed.sequence_parallel: true")
    return None


@layout_rule("RA-L018", "error", "dataset.seq_length", "SP splits the sequence over TP",
             "mcore scatter_to_sequence_parallel_region splits dim 0 evenly over TP; Bridge 3d: "
             "seq divisible by lcm(2*CP, TP*CP) when SP")
def sequence_parallel_divides_sequence(f: Facts) -> Optional[Violation]:
    lay, seq = f.layout, f.seq_length
    if not lay.sp or seq is None or sequence_parallel_splits(seq, lay.tp, lay.cp):
        return None
    chunk = lcm(2 * lay.cp, lay.tp * lay.cp) if lay.cp > 1 else lay.tp  # RA-L014's 2*CP as well
    ranks = f"tp_size={lay.tp}" + (f" x cp_size={lay.cp}" if lay.cp > 1 else "")
    return Violation(f"seq_length={seq} is not divisible by {lay.tp * lay.cp}: sequence parallelism splits "
                     f"each sequence evenly over the {ranks} ranks",
                     f"use a seq_length that is a multiple of {chunk} (e.g. {max(chunk, seq // chunk * chunk)}), "
                     "or set distributed.sequence_parallel: false")


@layout_rule("RA-L006", "error", "distributed.tp_size", "world divisible by TP*PP*CP",
             "mcore parallel_state; Bridge ConfigContainer.validate (3c, 3d)")
def world_divisible_by_model_parallel(f: Facts) -> Optional[Violation]:
    lay = f.layout
    mp = lay.tp * lay.pp * lay.cp
    if f.world_size % mp == 0:
        return None
    message = f"world size {f.world_size} is not divisible by TP*PP*CP = {lay.tp}*{lay.pp}*{lay.cp} = {mp}"
    # One size alone breaks it (the others divide the world): the finding names that key.
    alone = [(k, v) for k, v in (("tp_size", lay.tp), ("pp_size", lay.pp), ("cp_size", lay.cp))
             if v > 1 and f.world_size % (mp // v) == 0]
    if len(alone) == 1:
        key, size = alone[0]
        room = f.world_size // (mp // size)
        return Violation(message, f"set distributed.{key} to a divisor of {room}: {divisors(room)}, or use a GPU "
                                  f"count that is a multiple of {mp}", key=f"distributed.{key}")
    return Violation(message, f"use a GPU count that is a multiple of {mp}, or change TP/PP/CP so their product "
                              f"divides {f.world_size}")


@layout_rule("RA-L007", "error", "distributed.ep_size", "world divisible by PP*EP*ETP (expert mesh fits)",
             "mcore parallel_state: expert-DP = world/(ETP*EP*PP) (3c); resizing rule 7")
def expert_mesh_fits(f: Facts) -> Optional[Violation]:
    lay = f.layout
    mesh = lay.pp * lay.ep * lay.etp
    if f.world_size % mesh == 0 or (lay.ep == 1 and lay.etp == lay.tp):
        return None  # without experts the expert mesh is TP*PP, already judged by RA-L006
    need = lay.pp * lcm(lay.tp * lay.cp, lay.ep * lay.etp)
    message = (f"world size {f.world_size} is not divisible by PP*EP*ETP = {lay.pp}*{lay.ep}*{lay.etp} = {mesh}; the "
               f"smallest world for this layout is PP*lcm(TP*CP, EP*ETP) = {need}")
    if lay.etp > 1 and f.world_size % (lay.pp * lay.ep) == 0:  # EP fits the world: ETP is what breaks the mesh
        room = f.world_size // (lay.pp * lay.ep)
        return Violation(message, f"set distributed.etp_size to a divisor of {room} (world / (PP*EP)): "
                                  f"{[d for d in divisors(room) if d <= lay.etp]}, or run on a multiple of {need} GPUs",
                         key="distributed.etp_size")
    return Violation(message, f"run on a multiple of {need} GPUs, or lower distributed.ep_size / etp_size")


@layout_rule("RA-L008", "error", "distributed.ep_size", "experts divisible by EP",
             "mcore moe_layer: num_moe_experts % EP == 0 (3c)")
def experts_divisible_by_ep(f: Facts) -> Optional[Violation]:
    if f.model is None or not f.model.is_moe or f.model.num_experts % f.layout.ep == 0:
        return None
    n, lay = f.model.num_experts, f.layout
    # Only sizes the world holds with the layout's PP and ETP (RA-L007), so the fix does not open another error.
    room = f.world_size // (lay.pp * lay.etp) if f.world_size and f.world_size % (lay.pp * lay.etp) == 0 else 0
    fits = [d for d in divisors(n) if d <= 256 and (not room or room % d == 0)]
    held = f" that PP x EP x ETP fits in the {f.world_size} GPUs" if room else ""
    return Violation(f"ep_size={lay.ep} does not divide the {n} experts of {f.model.id}",
                     f"set distributed.ep_size to a divisor of {n}{held}: {fits}")


@layout_rule("RA-L009", "error", "distributed.ep_size", "EP needs an MoE model",
             "mcore transformer_config: EP > 1 requires num_moe_experts (3b)")
def ep_needs_moe(f: Facts) -> Optional[Violation]:
    if f.model is None or f.model.is_moe or f.layout.ep == 1:
        return None
    return Violation(f"ep_size={f.layout.ep} but {f.model.id} is a dense model with no experts",
                     "set distributed.ep_size: 1")


@layout_rule("RA-L010", "error", "distributed.vp_size", "VP needs PP > 1",
             "mcore parallel_state: virtual pipeline requires PP > 1 (3c)")
def vp_needs_pp(f: Facts) -> Optional[Violation]:
    if f.layout.vp and f.layout.vp > 1 and f.layout.pp == 1:
        return Violation(f"vp_size={f.layout.vp} with pp_size=1: virtual pipeline stages need a pipeline",
                         "remove distributed.vp_size, or set distributed.pp_size > 1")
    return None


@layout_rule("RA-L012", "warning", "distributed.sequence_parallel", "EP with TP needs SP",
             "mcore model_parallel_config: EP > 1 and TP > 1 with SP off warns (3a)")
def ep_tp_needs_sp(f: Facts) -> Optional[Violation]:
    lay, seq = f.layout, f.seq_length
    if lay.ep == 1 or lay.tp == 1 or lay.sp:
        return None
    fix = "set distributed.sequence_parallel: true"
    if seq is not None and not sequence_parallel_splits(seq, lay.tp, lay.cp):
        fix += (f" with a dataset.seq_length that is a multiple of {lay.tp * lay.cp} (RA-L018), or set "
                "distributed.tp_size: 1")
    return Violation(f"ep_size={lay.ep} and tp_size={lay.tp} without sequence_parallel: Megatron-Core warns "
                     "that SP must be used with expert parallelism and TP", fix)


@layout_rule("RA-L013", "info", "distributed.vp_size", "PP without VP has a large bubble",
             "pitfall: PP without VP -> poor throughput")
def pp_without_vp(f: Facts) -> Optional[Violation]:
    lay = f.layout
    if lay.pp > 1 and lay.vp_or_1 == 1:
        return Violation(f"pp_size={lay.pp} without virtual stages: the bubble is (PP-1)/microbatches",
                         "set distributed.vp_size (e.g. 2) when the layers per stage divide by it")
    return None


@layout_rule("RA-L014", "error", "dataset.seq_length", "CP needs seq divisible by 2*CP",
             "Bridge ConfigContainer.validate: seq_length % (2*CP) == 0 (3d)")
def cp_divides_sequence(f: Facts) -> Optional[Violation]:
    cp, seq = f.layout.cp, f.seq_length
    if cp == 1 or seq is None or seq % (2 * cp) == 0:
        return None
    return Violation(f"seq_length={seq} is not divisible by 2*cp_size = {2 * cp} (load-balanced CP splits "
                     "each sequence into 2*CP chunks)", f"use a seq_length that is a multiple of {2 * cp}")


@layout_rule("RA-L015", "warning", "distributed.tp_size", "TP stays inside one NVLink domain",
             "resizing rule 2: TP > 8 needs NVL72-class interconnect")
def tp_within_nvlink(f: Facts) -> Optional[Violation]:
    domain = tp_domain(f)
    if domain is None or f.layout.tp <= domain or f.hardware.arch == "cpu":  # CPU ranks share memory, no NVLink
        return None
    across = "FSDP2/DDP data parallel" if bundled(f) else "PP/CP/DP"
    node = f.gpus_per_node or f.hardware.gpus_per_node
    # L40S: no NVLink (a domain of 1), so TP inside its node runs over PCIe, not over the network
    link = "PCIe inside the node" if f.layout.tp <= node else "the slower inter-node network"
    return Violation(f"tp_size={f.layout.tp} spans more than one NVLink domain ({domain} GPUs on "
                     f"{f.hardware.name}); TP all-reduces would cross {link}",
                     f"keep distributed.tp_size <= {domain} and use {across} across nodes")


@layout_rule("RA-L016", "warning", "distributed.cp_size", "long context uses CP",
             "decision tree / pitfall: > 8K without CP -> OOM on activations")
def long_context_without_cp(f: Facts) -> Optional[Violation]:
    seq = f.seq_length
    if seq is None or seq <= LONG_CONTEXT or f.layout.cp > 1 or f.world_size == 1:
        return None
    message = f"seq_length={seq} (> {LONG_CONTEXT}) with cp_size=1: activations grow linearly with sequence length"
    sizes = cp_sizes(f)
    if sizes:
        return Violation(message, f"set distributed.cp_size to {' or '.join(map(str, sizes))} "
                                  "(seq divides by 2*CP and the world by TP*PP*CP)")
    if bundled(f):
        message += f", and the bundled trainer ({f.strategy}) has no context parallelism"
    return Violation(message, "; ".join(_long_context_steps(f)))


def _long_context_steps(f: Facts) -> list[str]:
    """What shrinks activations per GPU when CP is out of reach (bundled engine, or a world no CP fits)."""
    lay, steps = f.layout, []
    if lay.recompute != "full":
        steps.append("set distributed.activation_checkpointing: full")
    if lay.micro_batch_size > 1:
        steps.append("lower step_scheduler.local_batch_size to 1")
    tp = larger_tp(f)
    if tp is not None:
        steps.append(f"set distributed.tp_size: {tp} with sequence_parallel: true (splits activations over TP)")
    if f.strategy == "fsdp2":
        steps.append("run on more GPUs (FSDP2 shards weights, gradients and optimizer state thinner, leaving "
                     "room for activations)")
    elif f.strategy == "ddp":
        steps.append("use strategy: fsdp2 (shards the training state, leaving room for activations)")
    if bundled(f):
        steps.append("or use strategy: megatron and run with Megatron Bridge, which has context parallelism "
                     "(distributed.cp_size 2, 4 or 8)")
    else:
        mp = lay.tp * lay.pp * 2
        steps.append(f"run on a GPU count divisible by TP*PP*CP = {mp} and set distributed.cp_size: 2"
                     + (f" (seq_length {f.seq_length} must divide by 4)" if f.seq_length % 4 else ""))
    return steps


# Megatron-FSDP lists TP, CP and EP as what it composes with; pipeline parallelism is an open
# request (Megatron-LM issue #1455) and Megatron-LM's own launch scripts turn FSDP off when PP > 1
# (PR #6081: "FSDP and PP are mutually exclusive in Megatron's standard path"). All 25 Bridge recipes
# with use_megatron_fsdp run PP = 1.
@layout_rule("RA-L017", "warning", "distributed.use_megatron_fsdp", "Megatron-FSDP runs without PP",
             "Megatron-FSDP docs (composes with TP, CP, EP); Megatron-LM issue #1455")
def megatron_fsdp_without_pp(f: Facts) -> Optional[Violation]:
    if not megatron_fsdp_with_pp(f.strategy, f.extra.get("sharding"), f.layout.pp):
        return None
    return Violation(f"use_megatron_fsdp with pp_size={f.layout.pp}: Megatron-FSDP is documented to compose "
                     "with TP, CP and EP, not with pipeline parallelism",
                     "set distributed.pp_size: 1 (shard the model with Megatron-FSDP over DP instead), or turn "
                     "use_megatron_fsdp off and keep the distributed optimizer")


@layout_rule("RA-B001", "error", "step_scheduler.global_batch_size", "global batch = micro * DP * accumulation",
             "mcore num_microbatches_calculator: GBS % (MBS*DP) == 0 (3c)")
def global_batch_divides(f: Facts) -> Optional[Violation]:
    gbs, dp, mbs = f.global_batch_size, f.dp, f.layout.micro_batch_size
    if gbs is None or dp == 0 or gbs % (mbs * dp) == 0:
        return None
    unit = mbs * dp
    if mbs > 1 and gbs % dp == 0:  # DP divides the batch: the micro batch is what does not
        per_rank = gbs // dp
        return Violation(f"global_batch_size={gbs} is not divisible by micro batch {mbs} x DP {dp} = {unit}",
                         f"set step_scheduler.local_batch_size to a divisor of {per_rank} (global batch / DP): "
                         f"{[d for d in divisors(per_rank) if d <= mbs]}", key="step_scheduler.local_batch_size")
    lower, upper = (gbs // unit) * unit, (gbs // unit + 1) * unit
    near = [b for b in (lower, upper) if b > 0]
    return Violation(f"global_batch_size={gbs} is not divisible by micro batch {mbs} x DP {dp} = {unit}",
                     f"keep the global batch (it is convergence) and change the layout so micro*DP divides {gbs}, "
                     f"or, as a new experiment, use global_batch_size {' or '.join(map(str, near))}")
