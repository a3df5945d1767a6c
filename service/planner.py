"""Rank the parallel layouts of a model on a GPU allocation.

One pass (DESIGN.md, "Flow of a recommendation"): enumerate TP, PP, VP, CP, EP, ETP and the
micro batch for the world size (``service.search_space``); prune with the same layout rules ``validate`` runs
(``service.validate.check_layout``); for each surviving layout pick the fastest way to make
it fit (recompute none / selective / full, and how data parallelism shards the training
state); estimate memory and step time; rank the layouts that fit, with headroom, by
tokens/s per GPU (estimates within ESTIMATE_TIE_TOLERANCE, the model's own error, are a tie
broken by the seed's preferences: ``service.ranking``). Layouts that fit nowhere stay in the list
(after the fitting ones) with the memory that rules them out, so a user can see why.

``--engine megatron`` may use every dimension; ``--engine bundled`` only what
``trainer/capabilities.py`` declares (the bundled trainer grows, the planner follows).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional, Union

from recipe_index import get_hardware, resolve_model
from recipe_index.cards import HardwareCard, ModelCard
from service import constants as C
from service.facts import Facts, Finding, Layout, split_world, with_fix
from service.memory import (GRAD_REDUCE_DTYPES, PUBLISHED_DIGITS, MemoryEstimate, MemoryModel, ModelShape, model_shape,
                            usable_memory_gib)
from service.ranking import rank  # noqa: F401  (planner.rank stays a public name)
from service.rules.precision import FP8_RECIPES, PRECISION_CHOICES, split_precision
from service.rules.layout import explicit_layouts, megatron_fsdp_with_pp, needs_unwritten_layout
from service.search_space import micro_batch_sizes, needs_explicit_layout, recomputes, shardings, structures
from service.steptime import StepTime, StepTimeModel, calibration_note
from service.validate import check_layout
from trainer.config import MIN_SEQ_LENGTH
from trainer.capabilities import CAPABILITIES, supports_precision

ENGINES = ("megatron", "bundled")
GOALS = ("pretrain", "sft", "peft")
# Bridge's common templates (reference/mbridge_rules.md section 1): pretrain 4096 tokens and a
# global batch of 32, SFT/PEFT 2048 tokens and 128.
DEFAULT_SEQ_LENGTH = {"pretrain": 4096, "sft": 2048, "peft": 2048}
DEFAULT_GLOBAL_BATCH = {"pretrain": 32, "sft": 128, "peft": 128}


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
    # micro batch 1 (ConfigContainer.validate(); mbridge_rules.md "Sequence packing").
    packed_sequence: bool = False

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.num_nodes

    @property
    def peft(self) -> bool:
        return self.goal == "peft"

    @property
    def fsdp_last(self) -> bool:
        """MXFP8 or NVFP4: precisions NVIDIA's published Megatron layouts never run with Megatron-FSDP, whose rows
        then rank last among ties (service.ranking); blockwise FP8 (fp8sc) has no published layout to tell."""
        return self.precision == "nvfp4" or self.fp8_recipe == "fp8mx"

    def with_world(self, gpus: int) -> "PlanRequest":
        """The same request on ``gpus`` GPUs of the same type, in whole nodes where possible."""
        gpn, nodes = split_world(gpus, None, self.hardware.gpus_per_node)
        return replace(self, gpus_per_node=gpn, num_nodes=nodes)


def make_request(model: Union[str, ModelCard], gpus: int, gpu_type: str, *, nodes: Optional[int] = None,
                 goal: str = "pretrain", seq_length: Optional[int] = None,
                 global_batch_size: Optional[int] = None, precision: str = "bf16",
                 engine: str = "megatron", grad_reduce_dtype: str = "fp32",
                 packed_sequence: bool = False) -> PlanRequest:
    """A PlanRequest from user-facing names. Raises UnknownModelError / UnknownHardwareError
    (with suggestions) for unknown names and PlanError for bad values."""
    for name, value, known in (("goal", goal, GOALS), ("engine", engine, ENGINES),
                               ("precision", precision, PRECISION_CHOICES),
                               ("grad_reduce_dtype", grad_reduce_dtype, GRAD_REDUCE_DTYPES)):
        if value not in known:
            raise PlanError(f"unknown {name} {value!r}", field=name, fix=f"use one of {', '.join(known)}")
    for name, value in (("gpus", gpus), ("nodes", nodes), ("seq_length", seq_length),
                        ("global_batch_size", global_batch_size)):
        least = MIN_SEQ_LENGTH if name == "seq_length" else 1
        if value is not None and value < least:
            why = " (one input token and its label)" if name == "seq_length" else ""
            raise PlanError(f"{name} must be at least {least}{why}, got {value}", field=name,
                            fix=f"use a value of at least {least}")
    hardware = get_hardware(gpu_type)
    refuse_fp8_recipe_for_bundled(precision, engine, hardware)
    precision, fp8_recipe = split_precision(precision)
    if engine == "megatron" and hardware.arch == "cpu":
        raise PlanError("Megatron Bridge trains on CUDA GPUs (Transformer Engine, NCCL); the cpu card is for the "
                        "bundled trainer's gloo smoke tests", field="engine",
                        fix="use --engine bundled (API: engine bundled) on cpu, or a GPU type")
    node = hardware.gpus_per_node
    if nodes is not None and gpus > node:
        total = gpus * nodes  # offered only where it is a request the next check accepts: whole nodes
        whole = f", or the total ({total}) without nodes" if total % node == 0 else ""
        raise PlanError(f"gpus is GPUs per node when nodes is given: {gpus} > the {node} of one {hardware.name} node",
                        field="gpus", fix=f"pass gpus <= {node} with nodes{whole}")
    if nodes is None and gpus > node and gpus % node:
        raise PlanError(f"{gpus} {hardware.name} GPUs do not fill whole nodes of {node}", field="gpus",
                        fix=f"pass a multiple of {node} ({gpus // node * node} or {(gpus // node + 1) * node}), "
                            "or GPUs per node with nodes")
    card = resolve_model(model) if isinstance(model, str) else model
    gpn, num_nodes = split_world(gpus, nodes, node)
    seq = seq_length or DEFAULT_SEQ_LENGTH[goal]
    positions = card.max_position_embeddings
    if seq_length is None and positions:
        seq = min(seq, positions)
    if engine == "bundled" and positions and seq > positions:  # its pre-flight refuses it (RA-C011)
        raise PlanError(f"seq_length {seq} is beyond the {positions} positions of {card.id}, which the bundled "
                        "trainer refuses", field="seq_length", fix=f"use a seq_length of at most {positions}")
    return PlanRequest(model=card, hardware=hardware, gpus_per_node=gpn, num_nodes=num_nodes, goal=goal,
                       seq_length=seq, global_batch_size=global_batch_size or DEFAULT_GLOBAL_BATCH[goal],
                       precision=precision, engine=engine, grad_reduce_dtype=grad_reduce_dtype,
                       packed_sequence=packed_sequence, fp8_recipe=fp8_recipe)


def refuse_fp8_recipe_for_bundled(precision: Optional[str], engine: str, hardware: HardwareCard) -> None:
    """A Bridge FP8 recipe token names Transformer Engine's scaling, which the bundled trainer does not run."""
    if precision in FP8_RECIPES and engine == "bundled":
        own = supports_precision("fp8", hardware.arch)
        fix = "use --precision fp8 with --engine bundled" if own else (
            f"use --precision {'fp32' if hardware.arch == 'cpu' else 'bf16'} with --engine bundled (its fp8 needs a "
            f"GPU of {', '.join(CAPABILITIES['fp8']['archs'])})")
        raise PlanError(f"{precision} is a Megatron Bridge FP8 recipe; the bundled trainer's fp8 is torchao's own "
                        "scaling", field="precision", fix=fix)


def _significant(value: float, digits: int = 6) -> float:
    return float(f"{value:.{digits}g}")


class PlannedLayout:
    """One layout with the fastest variant that fits (or, when none fits, the leanest one).

    The ranking needs only the total memory and the step time; the breakdowns (``memory``,
    ``time``) are computed on first use, so planning thousands of layouts stays fast.
    """

    __slots__ = ("structure", "micro_batch_size", "recompute", "sharding", "strategy", "dp",
                 "grad_accumulation_steps", "fits", "findings", "memory_total_gib", "tokens_per_s", "_estimators",
                 "_layout", "_memory", "_time")

    def __init__(self, structure: Layout, micro_batch_size: int, recompute: str, sharding: str, strategy: str,
                 dp: int, grad_accumulation_steps: int, fits: bool, findings: tuple, memory_total_gib: float,
                 tokens_per_s: Optional[float], estimators: "_Estimators"):
        self.structure, self.micro_batch_size, self.recompute = structure, micro_batch_size, recompute
        self.sharding, self.strategy = sharding, strategy  # sharding: none | optimizer | full
        self.dp, self.grad_accumulation_steps, self.fits, self.findings = dp, grad_accumulation_steps, fits, findings
        self.memory_total_gib, self.tokens_per_s = memory_total_gib, tokens_per_s
        self._estimators, self._layout, self._memory, self._time = estimators, None, None, None

    @property
    def layout(self) -> Layout:
        if self._layout is None:
            self._layout = _with(self.structure, self.micro_batch_size, self.recompute)
        return self._layout

    @property
    def memory(self) -> MemoryEstimate:
        if self._memory is None:
            self._memory = self._estimators.memory.estimate(self.layout, self.sharding, self.grad_accumulation_steps)
        return self._memory

    @property
    def time(self) -> StepTime:
        if self._time is None:
            self._time = self._estimators.time.estimate(self.layout, self.sharding)
        return self._time

    @property
    def needs_layout_string(self) -> bool:
        return self._estimators.needs_layout_string(self.structure)

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
        return next((p for p in self.layouts if p.key == key), None)

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
            "grad_reduce_dtype": req.grad_reduce_dtype, "seq_length": req.seq_length, "global_batch_size": req.global_batch_size,
            "layouts": [row.to_dict(self.usable_gib) for row in rows],
            "rejections": [{"code": code, "count": count, "message": finding.message, "fix": finding.fix}
                           for code, (finding, count) in sorted(self.rejections.items())],
        }


# ---------------------------------------------------------------- planning


def _engine_allows(request: PlanRequest, layout: Layout, strategy: str) -> bool:
    """Combinations the bundled trainer declares it refuses (trainer/capabilities.py)."""
    if request.engine != "bundled" or layout.tp == 1:
        return True
    if strategy == "ddp" and not CAPABILITIES.get("tp_with_ddp", True):
        return False
    return not (request.peft and not CAPABILITIES.get("tp_with_lora", True))


class _Estimators:
    def __init__(self, request: PlanRequest, shape: ModelShape):
        req = request
        cpu = req.hardware.arch == "cpu"
        explicit = req.engine == "megatron" and explicit_layouts(req.model.id)
        self.memory = MemoryModel(shape, world_size=req.world_size, seq_length=req.seq_length,
                                  engine=req.engine, peft=req.peft, cpu=cpu, precision=req.precision,
                                  grad_reduce_dtype=req.grad_reduce_dtype, explicit_layout=explicit)
        self.time = StepTimeModel(shape, req.hardware, world_size=req.world_size, seq_length=req.seq_length,
                                  global_batch_size=req.global_batch_size, precision=req.precision,
                                  engine=req.engine, grad_reduce_dtype=req.grad_reduce_dtype, peft=req.peft,
                                  explicit_layout=explicit)
        self._model_id, self._layers, self._megatron = req.model.id, shape.layers, req.engine == "megatron"

    def needs_layout_string(self, structure: Layout) -> bool:
        """Whether Bridge's library recipe cannot place this pipeline itself (RA-L019; last among ties)."""
        return self._megatron and needs_unwritten_layout(self._model_id, self._layers, structure.pp,
                                                         structure.vp_or_1)


def facts_for(request: PlanRequest, layout: Layout, strategy: str) -> Facts:
    """The facts the rules judge for one planned layout (the planner checks memory fit itself)."""
    req = request
    extra = {"planner": True}
    if req.fp8_recipe:  # what Bridge runs (RA-P003/RA-P004: MXFP8 and blockwise FP8 need newer GPUs)
        extra["precision_recipe"] = req.fp8_recipe
    if req.engine == "megatron" and needs_explicit_layout(req, layout) and explicit_layouts(req.model.id):
        extra["pipeline_layout"] = "explicit"
    return Facts(layout=layout, world_size=req.world_size, model=req.model, hardware=req.hardware,
                 gpus_per_node=req.gpus_per_node, global_batch_size=req.global_batch_size,
                 seq_length=req.seq_length, precision=req.precision, mode=req.goal, strategy=strategy,
                 peft=req.peft, extra=extra)


def _with(layout: Layout, micro_batch_size: int, recompute: str) -> Layout:
    # Layout(...) directly: dataclasses.replace is several times slower in this loop.
    return Layout(tp=layout.tp, pp=layout.pp, vp=layout.vp, cp=layout.cp, ep=layout.ep, etp=layout.etp,
                  sp=layout.sp, micro_batch_size=micro_batch_size, recompute=recompute)


def _rows(request: PlanRequest, est: _Estimators, structure: Layout, sizes: list[int],
          options: list[tuple[str, str, tuple]], usable_gib: float) -> list[PlannedLayout]:
    """One row per micro batch: the fastest (recompute, sharding) that fits, else the leanest."""
    dp = structure.dp(request.world_size)
    order = recomputes(request.engine)
    n_order = len(order)
    accumulations = [request.global_batch_size // (mbs * dp) for mbs in sizes]
    all_totals = est.memory.totals(structure, list(zip(sizes, accumulations)), tuple(o[0] for o in options), order)
    lay = structure
    tp, pp, vp, cp, ep, etp, sp = lay.tp, lay.pp, lay.vp or 1, lay.cp, lay.ep, lay.etp, lay.sp
    components, tokens_per_s = est.time.components, est.time.tokens_per_s_per_gpu
    rows = []
    for mbs, accumulation, totals in zip(sizes, accumulations, all_totals):
        best = None
        limit = n_order
        for o, (sharding, strategy, findings) in enumerate(options):
            base = o * n_order
            for index in range(limit):
                total = totals[base + index]
                if total <= usable_gib:
                    step = components(tp, pp, vp, cp, ep, etp, sp, mbs, order[index], sharding)[0]
                    if best is None or step < best[0]:
                        best = (step, order[index], sharding, strategy, findings, total)
                    # Megatron's later sharding (Megatron-FSDP after the distributed optimizer) only wins
                    # with less recompute: it communicates more. The bundled order (FSDP2, then DDP) is the
                    # other way round: DDP needs more memory but communicates less, so it is always timed.
                    if request.engine == "megatron":
                        limit = index
                    break
        if best is not None:
            step, recompute, sharding, strategy, findings, total = best
            rows.append(PlannedLayout(structure, mbs, recompute, sharding, strategy, dp, accumulation, True,
                                      findings, total, tokens_per_s(step), est))
            continue
        leanest = min(range(len(totals)), key=totals.__getitem__)
        sharding, strategy, findings = options[leanest // n_order]
        rows.append(PlannedLayout(structure, mbs, order[leanest % n_order], sharding, strategy, dp, accumulation,
                                  False, findings, totals[leanest], None, est))
    return rows


def plan(request: PlanRequest) -> Plan:
    """Every valid layout of the request with its estimates, best first (see module docstring)."""
    shape = model_shape(request.model)
    est = _Estimators(request, shape)
    usable = usable_memory_gib(request.hardware.memory_gib)
    rows: list[PlannedLayout] = []
    rejections: dict[str, tuple[Finding, int]] = {}
    count = 0
    by_strategy: dict[str, list[str]] = {}
    for sharding, strategy in shardings(request.engine, request.peft):
        by_strategy.setdefault(strategy, []).append(sharding)
    for structure in structures(request, shape):
        count += 1
        sizes = micro_batch_sizes(request, structure.dp(request.world_size))
        probe = _with(structure, sizes[0] if sizes else 1, "none")
        options = []
        for strategy, strategy_shardings in by_strategy.items():
            if not _engine_allows(request, structure, strategy):
                continue
            findings = check_layout(facts_for(request, probe, strategy))
            errors = [f for f in findings if f.severity == "error"]
            for error in errors:
                example, seen = rejections.get(error.code, (error, 0))
                rejections[error.code] = (example, seen + 1)
            if not errors:
                # Only what the engine documents: no Megatron-FSDP with pipeline stages (RA-L017).
                options.extend((sharding, strategy, tuple(findings)) for sharding in strategy_shardings
                               if not megatron_fsdp_with_pp(strategy, sharding, structure.pp))
        if not options:
            continue
        rows.extend(_rows(request, est, structure, sizes, options, usable))
    comfortable = request.hardware.memory_gib * C.MEMORY_COMFORT_FRACTION
    return Plan(request=request, layouts=rank(rows, long_context=request.seq_length > C.LONG_CONTEXT,
                                              comfortable_gib=comfortable, layers=shape.layers,
                                              unlaunchable=est.needs_layout_string,
                                              fsdp_last=request.fsdp_last),
                structures=count, rejections=rejections)


def explain_layout(request: PlanRequest, layout: Layout, strategy: str = "megatron") -> list[Finding]:
    """The rule findings for one specific layout: why it is (or is not) among the valid ones."""
    return check_layout(facts_for(request, layout, strategy))
