"""The memory-fit rule: the estimated memory per GPU of a config's layout must fit the GPU.

Same estimator as the planner (service/estimate/memory.py), so a layout `plan` marks as fitting does
not fail `validate`. The planner checks fit itself for every recompute and sharding option,
so it marks its facts with ``extra["planner"]`` and this rule stays out of its way.

Severity: for the bundled trainer (strategy fsdp2/ddp) the config states everything the estimate
depends on, so an estimate above the GPU's memory is an error. A ``megatron`` config describes the
layout of a Megatron Bridge run whose recipe may add memory savers the schema does not carry (CPU
offload, precision-aware optimizer, fine-grained recompute modules), so there the same finding is a
warning that names the assumption. The gradient buffer's dtype is in the schema
(``distributed.grad_reduce_dtype``; Bridge's performance recipes keep bf16 gradients).
"""

from __future__ import annotations

from typing import Callable, Optional

from service.estimate import constants as C
from service.estimate.memory import MemoryEstimate, MemoryModel, model_shape
from service.facts import Facts
from service.validate.rules.registry import Violation, layout_rule
from service.validate.rules.sizes import bundled, grown, larger_ep, larger_pp, larger_tp

BUNDLED_SHARDING = {"fsdp2": "full", "ddp": "none"}


def sharding_of(facts: Facts) -> str:
    """How the config shards training state over DP: from ``extra["sharding"]`` when the validator
    read it from the config, else the strategy's default (Bridge turns the distributed optimizer on)."""
    explicit = facts.extra.get("sharding")
    if explicit in ("none", "optimizer", "full"):
        return explicit
    return BUNDLED_SHARDING.get(facts.strategy, "optimizer")


def _fix(facts: Facts, total: float, capacity: float, states_only: bool = False,
         total_after: Optional[Callable[..., float]] = None, activations: Optional[float] = None) -> str:
    """Only steps this engine runs and this world holds (service/validate/rules/sizes.py): a fix that names
    pp_size to the bundled trainer, or an EP that no longer fits the expert mesh, is no fix.
    ``states_only``: the zero-token estimate alone is too big, so activation savers are no fix either,
    and ``total_after(sharding=..., **layout sizes)`` (that estimate after a step) keeps only the steps
    that close the gap, or failing that close at least a quarter of it: a TP under FSDP2 barely moves
    state that is already sharded over every GPU, so naming it only trades one finding for the next.
    ``activations``: the estimate's activation memory; an activation saver cannot free more than that, so
    where the gap is larger it is named as not enough alone."""
    steps = [] if states_only else _activation_steps(facts.layout)
    if steps and activations is not None and total - capacity > activations:
        steps = [f"{step} (not enough alone: activations are {activations:.1f} GiB)" for step in steps]
    ep, tp, pp = larger_ep(facts), larger_tp(facts), larger_pp(facts)
    candidates = [(step, grown(facts.layout, name, size)) for size, name, step in (
        (ep, "ep", f"raise distributed.ep_size to {ep} (expert weights shard over EP)"),
        (tp, "tp", f"raise distributed.tp_size to {tp} (within the NVLink domain)"),
        (pp, "pp", f"raise distributed.pp_size to {pp}")) if size is not None]
    candidates += [(step, {"sharding": sharding}) for step, sharding in _sharding_steps(facts)]
    closing = [step for step, _ in candidates]
    if total_after is not None:
        after = [(step, total_after(**change)) for step, change in candidates]
        closing = [step for step, value in after if value <= capacity]
        steps += closing or [f"{step} (not enough alone: {value:.1f} GiB)" for step, value in after
                             if total - value >= (total - capacity) / 4]
    else:
        steps += closing
    if facts.strategy == "fsdp2":
        steps.append("run on more GPUs (FSDP2 shards weights, gradients and optimizer state over all of them)")
    elif not steps or (states_only and not closing):
        steps.append("run on more GPUs or on a GPU with more memory")
    return (f"need {total - capacity:.1f} GiB less per GPU: " + "; ".join(steps)
            + "; `recipe-advisor plan` lists layouts that fit")


def _activation_steps(lay) -> list[str]:
    steps = []
    if lay.micro_batch_size > 1:
        steps.append("lower step_scheduler.local_batch_size (micro batch) first")
    if lay.recompute != "full":
        steps.append("set distributed.activation_checkpointing: full" if lay.recompute == "selective"
                     else "set distributed.activation_checkpointing: selective (or full)")
    return steps


def _sharding_steps(facts: Facts) -> list[tuple[str, str]]:
    """(step, the sharding it leads to) for each sharding change the strategy offers."""
    sharding = sharding_of(facts)
    if sharding == "full":
        return []
    if facts.strategy == "ddp":
        return [("use strategy: fsdp2 (shards weights, gradients and optimizer state)", "full")]
    if bundled(facts):
        return []
    steps = []
    if sharding == "none":
        steps.append(("set distributed.use_distributed_optimizer: true (shards optimizer state over DP)",
                      "optimizer"))
    if facts.layout.pp == 1:  # Megatron-FSDP does not compose with PP (RA-L017)
        steps.append(("shard weights and gradients too with distributed.use_megatron_fsdp: true", "full"))
    return steps


@layout_rule("RA-M002", "error", "distributed.activation_checkpointing", "estimated memory fits the GPU",
             "service/estimate/memory.py: Megatron theoretical memory, Korthikanti et al. 2022, "
             "HF Ultra-Scale Playbook")
def memory_fits(f: Facts) -> Optional[Violation]:
    if f.extra.get("planner") or f.model is None or f.hardware is None:
        return None
    dp = f.dp
    if dp == 0 or f.world_size % (f.layout.pp * f.layout.ep * f.layout.etp):
        return None  # the divisibility rules report this layout already
    accumulation = f.grad_accumulation_steps or 1
    engine = "bundled" if f.strategy in BUNDLED_SHARDING else "megatron"
    sharding = sharding_of(f)
    if engine == "bundled" and sharding == "optimizer":
        sharding = "full"
    # Without a sequence length the per-token activations are unknown: the zero-token estimate (state,
    # runtime, sequence-independent activations) is a lower bound, and it alone can already be too big.
    model = MemoryModel(model_shape(f.model), world_size=f.world_size, seq_length=f.seq_length or 0, engine=engine,
                        peft=f.peft, cpu=f.hardware.arch == "cpu", precision=f.precision,
                        fused_loss=f.extra.get("fused_loss", True),
                        grad_reduce_dtype=f.extra.get("grad_reduce_dtype", "fp32"),
                        explicit_layout=f.extra.get("pipeline_layout") is not None,
                        peft_base_bytes=f.extra.get("peft_base_bytes", C.FSDP2_PARAM_BYTES))
    estimate = model.estimate(f.layout, sharding, accumulation)
    capacity = f.hardware.memory_gib
    if not f.seq_length:
        def total_after(sharding: str = sharding, **sizes: int) -> float:
            return model.estimate(f.layout.with_(**sizes), sharding, accumulation).total
        return _states_without_sequence(f, estimate, capacity, engine, total_after)
    total = estimate.total
    breakdown = (f"weights {estimate.weights:.1f}, grads {estimate.grads:.1f}, optimizer {estimate.optimizer:.1f}, "
                 f"activations {estimate.activations:.1f}, other {estimate.other:.1f}")
    if total > capacity:
        if engine == "bundled":
            return Violation(f"estimated {total:.1f} GiB per GPU ({breakdown}) exceeds the {capacity:g} GiB of "
                             f"one {f.hardware.name}", _fix(f, total, capacity, activations=estimate.activations))
        return Violation(f"estimated {total:.1f} GiB per GPU ({breakdown}) exceeds the {capacity:g} GiB of one "
                         f"{f.hardware.name}, {MEGATRON_SAVERS}",
                         _fix(f, total, capacity, activations=estimate.activations), severity="warning")
    if total > capacity * C.MEMORY_WARNING_FRACTION:
        return Violation(f"estimated {total:.1f} GiB per GPU ({breakdown}) is {total / capacity:.0%} of the "
                         f"{capacity:g} GiB of one {f.hardware.name}: little headroom for allocator spikes",
                         _fix(f, total, capacity * C.MEMORY_WARNING_FRACTION, activations=estimate.activations),
                         severity="warning")
    return None


MEGATRON_SAVERS = ("unless the Megatron Bridge recipe adds memory savers this config does not state (CPU offload, "
                   "precision-aware optimizer, recompute modules)")
MODEL_KEY = "model.pretrained_model_name_or_path"
SEQ_FIX = ("set dataset.seq_length (the tokens per sequence you train on, e.g. 4096, Megatron Bridge's default) "
           "so the activations are checked too")


def _states_without_sequence(f: Facts, estimate: MemoryEstimate, capacity: float, engine: str,
                             total_after: Callable[..., float]) -> Violation:
    """No dataset.seq_length: the zero-token estimate (training state, runtime, and the activations no
    token count changes, such as FSDP2's unsharded blocks) is a lower bound on the real one. Above the
    GPU it is an error (a warning for megatron, as above), above the warning fraction a warning, else an
    info finding that per-token activations went unchecked. Activation savers cannot lower this bound,
    and a fix is named only when its own zero-token estimate closes the gap (see ``_fix``). The
    finding points at the model key: the model's size is what it judges, and the key it would
    otherwise name (activation checkpointing) may not be in the file."""
    total = estimate.total
    breakdown = (f"weights {estimate.weights:.1f}, grads {estimate.grads:.1f}, optimizer {estimate.optimizer:.1f}, "
                 f"fixed activations {estimate.activations:.1f}, other {estimate.other:.1f}")
    at_least = (f"at least {total:.1f} GiB per GPU before any per-token activations ({breakdown}; "
                "dataset.seq_length is not set, so those are not counted)")
    where = f"the {capacity:g} GiB of one {f.hardware.name}"
    if total > capacity:
        fix = _fix(f, total, capacity, states_only=True, total_after=total_after)
        message = f"needs {at_least}, more than {where}"
        if engine == "bundled":
            return Violation(message, fix, key=MODEL_KEY)
        return Violation(f"{message}, {MEGATRON_SAVERS}", fix, severity="warning", key=MODEL_KEY)
    if total > capacity * C.MEMORY_WARNING_FRACTION:
        target = capacity * C.MEMORY_WARNING_FRACTION
        return Violation(f"needs {at_least}, {total / capacity:.0%} of {where}: activations and allocator "
                         "spikes come on top", _fix(f, total, target, states_only=True, total_after=total_after),
                         severity="warning", key=MODEL_KEY)
    return Violation(f"activation memory not checked: the config has no dataset.seq_length; it needs {at_least} "
                     f"of {where}", SEQ_FIX, severity="info", key="dataset.seq_length")
