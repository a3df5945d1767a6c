"""The planner's types: a request, one planned layout with its estimates, and the ranked plan.

They live below the modules that build them (``service.plan.planner``, ``search_space``, ``ranking``,
``sizing``), so each of those imports them from here and none imports another's types.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Optional

from recipe_index.cards import HardwareCard, ModelCard
from service.estimate import constants as C
from service.estimate.memory import (
    PUBLISHED_DIGITS,
    MemoryEstimate,
    MemoryModel,
    ModelShape,
    model_shape,
    usable_memory_gib,
)
from service.estimate.steptime import StepTime, StepTimeModel, calibration_note
from service.facts import Finding, Layout, split_world, with_fix
from service.layouts.bridge_tables import explicit_layouts, needs_unwritten_layout
from trainer.contract.fast_paths import default_fast_paths

ENGINES = ("megatron", "bundled")
GOALS = ("pretrain", "sft", "peft")


class PlanError(ValueError):
    """A request that cannot be planned: which field, why, and what to do instead."""

    def __init__(self, message: str, *, field: Optional[str] = None, fix: Optional[str] = None,
                 suggestions: tuple[str, ...] = ()):
        self.field, self.fix, self.suggestions = field, fix, list(suggestions)
        super().__init__(with_fix(message, fix))


@dataclass(frozen=True)
class PlanRequest:
    model: ModelCard
    hardware: HardwareCard
    gpus_per_node: int
    num_nodes: int = 1
    goal: str = "pretrain"
    seq_length: int = 4096
    global_batch_size: int = 32
    precision: str = "bf16"
    engine: str = "megatron"
    grad_reduce_dtype: str = "fp32"
    fp8_recipe: Optional[str] = None  # the FP8 scaling (Bridge token fp8cs, fp8mx, ...) when precision is fp8
    # The recipe packs its SFT data offline (dataset.packed_sequence): Megatron Bridge then takes only
    # micro batch 1 (ConfigContainer.validate(); Megatron Bridge, "Sequence packing").
    packed_sequence: bool = False
    # The contract fields the user set (the others came from the base recipe): a tuned recipe must match these
    # (service.plan.sources). A request built from explicit values sets them all.
    given: frozenset = frozenset({"seq_length", "global_batch_size", "precision"})

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.num_nodes

    @property
    def peft(self) -> bool:
        return self.goal == "peft"

    @property
    def fsdp_last(self) -> bool:
        """MXFP8 or NVFP4: precisions NVIDIA's published Megatron layouts never run with Megatron-FSDP, whose rows
        then rank last among ties (service.plan.ranking); blockwise FP8 (fp8sc) has no published layout to tell."""
        return self.precision == "nvfp4" or self.fp8_recipe == "fp8mx"

    def with_world(self, gpus: int) -> "PlanRequest":
        """The same request on ``gpus`` GPUs of the same type, in whole nodes where possible."""
        gpn, nodes = split_world(gpus, None, self.hardware.gpus_per_node)
        return replace(self, gpus_per_node=gpn, num_nodes=nodes)


def with_micro_batch(layout: Layout, micro_batch_size: int, recompute: str) -> Layout:
    # Layout(...) directly: dataclasses.replace is several times slower in this loop.
    return Layout(tp=layout.tp, pp=layout.pp, vp=layout.vp, cp=layout.cp, ep=layout.ep, etp=layout.etp,
                  sp=layout.sp, micro_batch_size=micro_batch_size, recompute=recompute)


class Estimators:
    """The memory and step-time models of one request, shared by every row planned for it."""

    def __init__(self, request: PlanRequest, shape: ModelShape):
        req = request
        cpu = req.hardware.arch == "cpu"
        explicit = req.engine == "megatron" and explicit_layouts(req.model.id)
        self.memory = MemoryModel(shape, world_size=req.world_size, seq_length=req.seq_length,
                                  engine=req.engine, peft=req.peft, cpu=cpu, precision=req.precision,
                                  grad_reduce_dtype=req.grad_reduce_dtype, explicit_layout=explicit)
        # The bundled trainer compiles its blocks on the GPUs it has fast paths for, as recommend's config does
        # (trainer/contract/fast_paths.py); the estimate follows it.
        compiled = default_fast_paths(req.hardware.name, req.hardware.arch).get("compile.enabled", False)
        self.time = StepTimeModel(shape, req.hardware, world_size=req.world_size, seq_length=req.seq_length,
                                  global_batch_size=req.global_batch_size, precision=req.precision,
                                  engine=req.engine, grad_reduce_dtype=req.grad_reduce_dtype, peft=req.peft,
                                  explicit_layout=explicit, compiled=compiled, model_id=req.model.id)
        self._model_id, self._layers, self._megatron = req.model.id, shape.layers, req.engine == "megatron"

    def needs_layout_string(self, structure: Layout) -> bool:
        """Whether Bridge's library recipe cannot place this pipeline itself (RA-L019; last among ties)."""
        return self._megatron and needs_unwritten_layout(self._model_id, self._layers, structure.pp,
                                                         structure.vp_or_1)


def _significant(value: float, digits: int = 6) -> float:
    return float(f"{value:.{digits}g}")


class PlannedLayout:
    """One layout with the fastest variant that fits (or, when none fits, the leanest one).

    The ranking needs only the total memory and the step time; the breakdowns (``memory``,
    ``time``) are computed on first use, so planning thousands of layouts stays fast. The step-time terms the
    planner computed to rank a fitting row (``components``) are kept, so its ``time`` is not computed again.
    """

    __slots__ = ("structure", "micro_batch_size", "recompute", "sharding", "strategy", "dp",
                 "grad_accumulation_steps", "fits", "findings", "memory_total_gib", "tokens_per_s", "_estimators",
                 "_layout", "_memory", "_time", "_components")

    def __init__(self, structure: Layout, micro_batch_size: int, recompute: str, sharding: str, strategy: str,
                 dp: int, grad_accumulation_steps: int, fits: bool, findings: tuple, memory_total_gib: float,
                 tokens_per_s: Optional[float], estimators: "Estimators", components: Optional[tuple] = None):
        self.structure, self.micro_batch_size, self.recompute = structure, micro_batch_size, recompute
        self.sharding, self.strategy = sharding, strategy  # sharding: none | optimizer | full
        self.dp, self.grad_accumulation_steps, self.fits, self.findings = dp, grad_accumulation_steps, fits, findings
        self.memory_total_gib, self.tokens_per_s = memory_total_gib, tokens_per_s
        self._estimators, self._layout, self._memory, self._time = estimators, None, None, None
        self._components = components  # StepTimeModel.components of this variant, when the planner computed them

    @property
    def layout(self) -> Layout:
        if self._layout is None:
            self._layout = with_micro_batch(self.structure, self.micro_batch_size, self.recompute)
        return self._layout

    @property
    def memory(self) -> MemoryEstimate:
        if self._memory is None:
            self._memory = self._estimators.memory.estimate(self.layout, self.sharding, self.grad_accumulation_steps)
        return self._memory

    @property
    def components(self) -> tuple:
        """StepTimeModel.components of the row: (step, compute, bubble, TP, CP, EP, PP, DP, optimizer, MoE
        unattributed) seconds; the planner's own where it ranked the row by them."""
        if self._components is None:
            lay = self.layout
            self._components = self._estimators.time.components(lay.tp, lay.pp, lay.vp or 1, lay.cp, lay.ep, lay.etp,
                                                                 lay.sp, lay.micro_batch_size, lay.recompute,
                                                                 self.sharding)
        return self._components

    @property
    def time(self) -> StepTime:
        if self._time is None:
            self._time = self._estimators.time.step_time(self.components)
        return self._time

    @property
    def needs_layout_string(self) -> bool:
        return self._estimators.needs_layout_string(self.structure)

    @property
    def estimators(self) -> "Estimators":
        return self._estimators

    @property
    def key(self) -> tuple:
        lay = self.structure
        return (lay.tp, lay.pp, lay.vp_or_1, lay.cp, lay.ep, lay.etp, self.micro_batch_size)

    def __repr__(self) -> str:
        return f"PlannedLayout({self.layout}, sharding={self.sharding!r}, fits={self.fits})"

    def to_dict(self, usable_gib: Optional[float] = None) -> dict:
        """The row as the JSON answers publish it; given the plan's ``usable_gib``, the published total agrees
        with ``fits`` (a total a hair above the limit would otherwise round onto it)."""
        lay, t = self.layout, self.time
        memory = self.memory.as_dict()
        if usable_gib is not None:
            usable = round(usable_gib, PUBLISHED_DIGITS)
            step = 10.0 ** -PUBLISHED_DIGITS
            if not self.fits and memory["total"] <= usable:
                memory["total"] = round(usable + step, PUBLISHED_DIGITS)
            elif self.fits and memory["total"] > usable:
                memory["total"] = usable
        return {
            "tp": lay.tp, "pp": lay.pp, "vp": lay.vp, "cp": lay.cp, "ep": lay.ep, "etp": lay.etp,
            "dp": self.dp, "sp": lay.sp, "micro_batch_size": lay.micro_batch_size,
            "grad_accumulation_steps": self.grad_accumulation_steps, "recompute": lay.recompute,
            "sharding": self.sharding,
            "memory_gib": memory,
            "memory_stage": self.memory.stage,
            "fits": self.fits,
            # Significant digits, not decimals: a tiny model's step is under a millisecond and its
            # throughput in the millions, a CPU's a few tokens/s; both must multiply back to the batch.
            "step_time_s": _significant(t.step_time_s),
            "tokens_per_s_per_gpu": _significant(t.tokens_per_s_per_gpu),
            "mfu": _significant(t.mfu, 4),  # a tiny model's MFU is 1e-6, not 0
            "needs_pipeline_layout_string": self.needs_layout_string,
        }


@dataclass
class Plan:
    request: PlanRequest
    layouts: list[PlannedLayout]  # fitting ones by tokens/s, then the rest by memory
    structures: int = 0  # (TP, PP, VP, CP, EP, ETP) combinations enumerated
    rejections: dict[str, tuple[Finding, int]] = field(default_factory=dict)  # rule code -> (example, count)
    # Why the first row is first although a faster one is listed (ranking.why_first); None when it is the fastest.
    why_first: Optional[str] = None
    # The candidate sources' choice (service.plan.sources.plan_choice), computed when an answer first needs it.
    choice: Optional[Any] = field(default=None, repr=False, compare=False)
    by_key: Optional[dict] = field(default=None, repr=False, compare=False)  # Plan.find's index
    # What the runs store adds (service.runs.advice.RunsView): measured rows, calibration; None without a store.
    runs: Optional[object] = None

    @property
    def usable_gib(self) -> float:
        return usable_memory_gib(self.request.hardware.memory_gib)

    @property
    def fitting(self) -> list[PlannedLayout]:
        return [p for p in self.layouts if p.fits]

    @property
    def notes(self) -> list[str]:
        """What the estimates carry beyond the model's own terms (the measured MoE factor)."""
        note = calibration_note(model_shape(self.request.model), self.request.engine)
        return [note] if note else []

    @property
    def best(self) -> Optional[PlannedLayout]:
        return self.layouts[0] if self.layouts and self.layouts[0].fits else None

    def find(self, layout: Layout) -> Optional[PlannedLayout]:
        """The planned row of a layout (TP, PP, VP, CP, EP, ETP, micro batch), if it is a valid one."""
        key = (layout.tp, layout.pp, layout.vp_or_1, layout.cp, layout.ep, layout.etp, layout.micro_batch_size)
        if self.by_key is None:  # built once: the candidate sources look up several layouts of one plan
            self.by_key = {}
            for row in self.layouts:
                self.by_key.setdefault(row.key, row)
        return self.by_key.get(key)

    def why_not_fitting(self, row: PlannedLayout) -> str:
        m = row.memory
        where = "" if m.stage == "only" else f" on its {m.stage} pipeline stage"
        return (f"needs {m.total:.1f} GiB per GPU{where} (weights {m.weights:.1f}, grads {m.grads:.1f}, optimizer "
                f"{m.optimizer:.1f}, activations {m.activations:.1f}, other {m.other:.1f}) even with "
                f"recompute={row.layout.recompute} and sharding={row.sharding}; {self.request.hardware.name} "
                f"offers {self.usable_gib:.1f} GiB after {C.MEMORY_HEADROOM_FRACTION:.0%} headroom")

    def to_dict(self, top: Optional[int] = None) -> dict:
        req, hw = self.request, self.request.hardware
        rows = self.layouts if top is None else self.layouts[:top]
        return {
            "model": req.model.id,
            "hardware": {"gpu_type": hw.name, "gpus_per_node": req.gpus_per_node, "num_nodes": req.num_nodes,
                         "world_size": req.world_size, "memory_gib": hw.memory_gib,
                         "usable_gib": round(self.usable_gib, PUBLISHED_DIGITS)},
            "goal": req.goal, "engine": req.engine, "precision": req.precision, "fp8_recipe": req.fp8_recipe,
            "grad_reduce_dtype": req.grad_reduce_dtype, "seq_length": req.seq_length,
            "global_batch_size": req.global_batch_size,
            "layouts": [row.to_dict(self.usable_gib) for row in rows],
            "why_first": self.why_first,
            "rejections": [{"code": code, "count": count, "message": finding.message, "fix": finding.fix}
                           for code, (finding, count) in sorted(self.rejections.items())],
        }

