"""The memory-fit rule: the estimated memory per GPU of a config's layout must fit the GPU.

Same estimator as the planner (service/memory.py), so a layout `plan` marks as fitting does
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

from typing import Optional

from service import constants as C
from service.facts import Facts
from service.memory import MemoryEstimate, MemoryModel, model_shape
from service.rules.registry import Violation, layout_rule
from service.rules.sizes import bundled, larger_ep, larger_pp, larger_tp

BUNDLED_SHARDING = {"fsdp2": "full", "ddp": "none"}


def sharding_of(facts: Facts) -> str:
    """How the config shards training state over DP: from ``extra["sharding"]`` when the validator
    read it from the config, else the strategy's default (Bridge turns the distributed optimizer on)."""
    explicit = facts.extra.get("sharding")
    if explicit in ("none", "optimizer", "full"):
        return explicit
    return BUNDLED_SHARDING.get(facts.strategy, "optimizer")


def _fix(facts: Facts, total: float, capacity: float, states_only: bool = False) -> str:
    """Only steps this engine runs and this world holds (service/rules/sizes.py): a fix that names
    pp_size to the bundled trainer, or an EP that no longer fits the expert mesh, is no fix.
    ``states_only``: the zero-token estimate alone is too big, so activation savers are no fix either."""
    steps = [] if states_only else _activation_steps(facts.layout)
    ep, tp, pp = larger_ep(facts), larger_tp(facts), larger_pp(facts)
    if ep is not None:
        steps.append(f"raise distributed.ep_size to {ep} (expert weights shard over EP)")
    if tp is not None:
        steps.append(f"raise distributed.tp_size to {tp} (within the NVLink domain)")
    if pp is not None:
        steps.append(f"raise distributed.pp_size to {pp}")
    steps.extend(_sharding_steps(facts))
    if facts.strategy == "fsdp2":
        steps.append("run on more GPUs (FSDP2 shards weights, gradients and optimizer state over all of them)")
    if not steps:
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


def _sharding_steps(facts: Facts) -> list[str]:
    sharding = sharding_of(facts)
    if sharding == "full":
        return []
    if facts.strategy == "ddp":
        return ["use strategy: fsdp2 (shards weights, gradients and optimizer state)"]
    if bundled(facts):
        return []
    steps = []
    if sharding == "none":
        steps.append("set distributed.use_distributed_optimizer: true (shards optimizer state over DP)")
    if facts.layout.pp == 1:  # Megatron-FSDP does not compose with PP (RA-L017)
        steps.append("shard weights and gradients too with distributed.use_megatron_fsdp: true")
    return steps


@layout_rule("RA-M002", "error", "distributed.activation_checkpointing", "estimated memory fits the GPU",
             "service/memory.py: Megatron theoretical memory, Korthikanti et al. 2022, HF Ultra-Scale Playbook")
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
                        grad_reduce_dtype=f.extra.get("grad_reduce_dtype", "fp32"))
    estimate = model.estimate(f.layout, sharding, accumulation)
    capacity = f.hardware.memory_gib
    if not f.seq_length:
        return _states_without_sequence(f, estimate, capacity, engine)
    total = estimate.total
    breakdown = (f"weights {estimate.weights:.1f}, grads {estimate.grads:.1f}, optimizer {estimate.optimizer:.1f}, "
                 f"activations {estimate.activations:.1f}, other {estimate.other:.1f}")
    if total > capacity:
        if engine == "bundled":
            return Violation(f"estimated {total:.1f} GiB per GPU ({breakdown}) exceeds the {capacity:g} GiB of "
                             f"one {f.hardware.name}", _fix(f, total, capacity))
        return Violation(f"estimated {total:.1f} GiB per GPU ({breakdown}) exceeds the {capacity:g} GiB of one "
                         f"{f.hardware.name}, {MEGATRON_SAVERS}", _fix(f, total, capacity), severity="warning")
    if total > capacity * C.MEMORY_WARNING_FRACTION:
        return Violation(f"estimated {total:.1f} GiB per GPU ({breakdown}) is {total / capacity:.0%} of the "
                         f"{capacity:g} GiB of one {f.hardware.name}: little headroom for allocator spikes",
                         _fix(f, total, capacity * C.MEMORY_WARNING_FRACTION), severity="warning")
    return None


MEGATRON_SAVERS = ("unless the Megatron Bridge recipe adds memory savers this config does not state (CPU offload, "
                   "precision-aware optimizer, recompute modules)")
SEQ_FIX = ("set dataset.seq_length (the tokens per sequence you train on, e.g. 4096, Megatron Bridge's default) "
           "so the activations are checked too")


def _states_without_sequence(f: Facts, estimate: MemoryEstimate, capacity: float, engine: str) -> Violation:
    """No dataset.seq_length: the zero-token estimate (training state, runtime, and the activations no
    token count changes, such as FSDP2's unsharded blocks) is a lower bound on the real one. Above the
    GPU it is an error (a warning for megatron, as above), above the warning fraction a warning, else an
    info finding that per-token activations went unchecked. Activation savers cannot lower this bound."""
    total = estimate.total
    breakdown = (f"weights {estimate.weights:.1f}, grads {estimate.grads:.1f}, optimizer {estimate.optimizer:.1f}, "
                 f"fixed activations {estimate.activations:.1f}, other {estimate.other:.1f}")
    at_least = (f"at least {total:.1f} GiB per GPU before any per-token activations ({breakdown}; "
                "dataset.seq_length is not set, so those are not counted)")
    where = f"the {capacity:g} GiB of one {f.hardware.name}"
    if total > capacity:
        message, fix = f"needs {at_least}, more than {where}", _fix(f, total, capacity, states_only=True)
        if engine == "bundled":
            return Violation(message, fix)
        return Violation(f"{message}, {MEGATRON_SAVERS}", fix, severity="warning")
    if total > capacity * C.MEMORY_WARNING_FRACTION:
        return Violation(f"needs {at_least}, {total / capacity:.0%} of {where}: activations and allocator "
                         "spikes come on top", _fix(f, total, capacity * C.MEMORY_WARNING_FRACTION, states_only=True),
                         severity="warning")
    return Violation(f"activation memory not checked: the config has no dataset.seq_length; it needs {at_least} "
                     f"of {where}", SEQ_FIX, severity="info", key="dataset.seq_length")
