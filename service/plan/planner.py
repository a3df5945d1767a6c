"""Rank the parallel layouts of a model on a GPU allocation.

One pass: enumerate TP, PP, VP, CP, EP, ETP and the
micro batch for the world size (``service.plan.search_space``); prune with the same layout rules ``validate`` runs
(``service.validate.checks.check_layout``); for each surviving layout pick the fastest way to make
it fit (recompute none / selective / full, and how data parallelism shards the training
state); estimate memory and step time; rank the layouts that fit, with headroom, by
tokens/s per GPU (estimates within ESTIMATE_TIE_TOLERANCE, the model's own error, are a tie
broken by layout preferences: ``service.plan.ranking``). Layouts that fit nowhere stay in the list
(after the fitting ones) with the memory that rules them out, so a user can see why.

``--engine megatron`` may use every dimension; ``--engine bundled`` only what
``trainer/contract/capabilities.py`` declares (the bundled trainer grows, the planner follows).
"""

from __future__ import annotations

from typing import Optional, Union

from recipe_index import get_hardware, resolve_model
from recipe_index.cards import HardwareCard, ModelCard
from service.estimate import constants as C
from service.estimate.memory import GRAD_REDUCE_DTYPES, model_shape, usable_memory_gib
from service.facts import Facts, Finding, Layout, split_world
from service.layouts.bridge_tables import explicit_layouts, megatron_fsdp_with_pp
from service.plan.ranking import rank, why_first
from service.plan.search_space import micro_batch_sizes, needs_explicit_layout, recomputes, shardings, structures
from service.plan.types import ENGINES, GOALS, Estimators, Plan, PlanError, PlannedLayout, PlanRequest, with_micro_batch
from service.validate.checks import check_layout
from service.validate.rules.precision import FP8_RECIPES, PRECISION_CHOICES, split_precision
from trainer.contract.capabilities import CAPABILITIES, supports_precision
from trainer.contract.config import MIN_SEQ_LENGTH

# Bridge's common templates (Megatron Bridge, section 1): pretrain 4096 tokens and a
# global batch of 32, SFT/PEFT 2048 tokens and 128.
DEFAULT_SEQ_LENGTH = {"pretrain": 4096, "sft": 2048, "peft": 2048}
DEFAULT_GLOBAL_BATCH = {"pretrain": 32, "sft": 128, "peft": 128}


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


# ---------------------------------------------------------------- planning


def _engine_allows(request: PlanRequest, layout: Layout, strategy: str) -> bool:
    """Combinations the bundled trainer declares it refuses (trainer/contract/capabilities.py)."""
    if request.engine != "bundled" or layout.tp == 1:
        return True
    if strategy == "ddp" and not CAPABILITIES.get("tp_with_ddp", True):
        return False
    return not (request.peft and not CAPABILITIES.get("tp_with_lora", True))



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



def _rows(request: PlanRequest, est: Estimators, structure: Layout, sizes: list[int],
          options: list[tuple[str, str, tuple]], usable_gib: float) -> list[PlannedLayout]:
    """One row per micro batch: the fastest (recompute, sharding) that fits, else the leanest."""
    dp = structure.dp(request.world_size)
    order = recomputes(request.engine, structure.ep)
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
                    terms = components(tp, pp, vp, cp, ep, etp, sp, mbs, order[index], sharding)
                    step = terms[0]
                    if best is None or step < best[0]:
                        best = (step, order[index], sharding, strategy, findings, total, terms)
                    # Megatron's later sharding (Megatron-FSDP after the distributed optimizer) only wins
                    # with less recompute: it communicates more. The bundled order (FSDP2, then DDP) is the
                    # other way round: DDP needs more memory but communicates less, so it is always timed.
                    if request.engine == "megatron":
                        limit = index
                    break
        if best is not None:
            step, recompute, sharding, strategy, findings, total, terms = best
            rows.append(PlannedLayout(structure, mbs, recompute, sharding, strategy, dp, accumulation, True,
                                      findings, total, tokens_per_s(step), est, terms))
            continue
        leanest = min(range(len(totals)), key=totals.__getitem__)
        sharding, strategy, findings = options[leanest // n_order]
        rows.append(PlannedLayout(structure, mbs, order[leanest % n_order], sharding, strategy, dp, accumulation,
                                  False, findings, totals[leanest], None, est))
    return rows


def _strategies(request: PlanRequest) -> dict[str, list[str]]:
    """The engine's strategies, each with the shardings it offers."""
    by_strategy: dict[str, list[str]] = {}
    for sharding, strategy in shardings(request.engine, request.peft):
        by_strategy.setdefault(strategy, []).append(sharding)
    return by_strategy


def _structure_rows(request: PlanRequest, est: Estimators, structure: Layout, sizes: list[int],
                    by_strategy: dict[str, list[str]], rejections: dict[str, tuple[Finding, int]],
                    usable: float) -> list[PlannedLayout]:
    """The rows of one parallel shape (one per micro batch size), or none when the rules reject it for every
    strategy (each rejection counted in ``rejections``)."""
    probe = with_micro_batch(structure, sizes[0] if sizes else 1, "none")
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
    return _rows(request, est, structure, sizes, options, usable) if options else []


def plan_one(result: Plan, layout: Layout) -> tuple[Optional[PlannedLayout], list[Finding]]:
    """One given layout of a planned request, estimated as the planner estimates its own rows: its row (the
    plan's own when the search space holds it), or None and the rule findings that reject it."""
    row = result.find(layout)
    if row is not None:
        return row, []
    request = result.request
    rejections: dict[str, tuple[Finding, int]] = {}
    est = result.layouts[0].estimators if result.layouts else Estimators(request, model_shape(request.model))
    if layout.dp(request.world_size) < 1 or request.world_size % (layout.tp * layout.pp * layout.cp):
        rows = []
    else:
        rows = _structure_rows(request, est, with_micro_batch(layout, 1, "none"), [layout.micro_batch_size],
                               _strategies(request), rejections, usable_memory_gib(request.hardware.memory_gib))
    if rows:
        return rows[0], []
    strategy = next(iter(_strategies(request)))
    return None, [f for f in explain_layout(request, layout, strategy) if f.severity == "error"]


def plan(request: PlanRequest) -> Plan:
    """Every valid layout of the request with its estimates, best first (see module docstring)."""
    shape = model_shape(request.model)
    est = Estimators(request, shape)
    usable = usable_memory_gib(request.hardware.memory_gib)
    rows: list[PlannedLayout] = []
    rejections: dict[str, tuple[Finding, int]] = {}
    count = 0
    by_strategy = _strategies(request)
    for structure in structures(request, shape):
        count += 1
        sizes = micro_batch_sizes(request, structure.dp(request.world_size))
        rows.extend(_structure_rows(request, est, structure, sizes, by_strategy, rejections, usable))
    ranking = dict(long_context=request.seq_length > C.LONG_CONTEXT,
                   comfortable_gib=request.hardware.memory_gib * C.MEMORY_COMFORT_FRACTION, layers=shape.layers,
                   unlaunchable=est.needs_layout_string, fsdp_last=request.fsdp_last)
    ranked = rank(rows, **ranking)
    return Plan(request=request, layouts=ranked, structures=count, rejections=rejections,
                why_first=why_first(ranked, **ranking))


def explain_layout(request: PlanRequest, layout: Layout, strategy: str = "megatron") -> list[Finding]:
    """The rule findings for one specific layout: why it is (or is not) among the valid ones."""
    return check_layout(facts_for(request, layout, strategy))
