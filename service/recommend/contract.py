"""The convergence contract a request keeps: the base recipe's sequence length, global batch, precision and
gradient reduce dtype, for every field the user left out.

`recommend` plans from it, and `plan` (both doors) starts from the same values, so the two rank the
same layouts for the same request.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional, Sequence, Union

from recipe_index import find_bundled_model, get_hardware, resolve_model
from recipe_index.cards import ModelCard
from recipe_index.recipes import RecipeEntry
from service.configs.yamlio import OverrideError, with_overrides
from service.plan.planner import make_request, refuse_fp8_recipe_for_bundled
from service.plan.types import PlanError, PlanRequest
from service.recommend.config_build import base_config
from service.recommend.recipe_choice import choose_recipe
from service.request import AdviceRequest, Override
from service.validate.rules.precision import fp8_recipe_of, token_runs_on
from trainer.contract.capabilities import CAPABILITIES, supports_precision
from trainer.contract.dotted import get_dotted as _get

# Half precisions a CPU without native units (AVX512-BF16/AMX) emulates, slower than fp32: the trainer
# warns about them (trainer/fused/runtime.py cpu_precision_warning), so recommend does not advise them.
CPU_EMULATED = ("bf16", "fp16")


def contract_source(card: ModelCard, goal: str, engine: str, recipe: Optional[RecipeEntry], hardware: str,
                    world: int, seq: Optional[int], notes: list[str], precision: Optional[str] = None, *,
                    base: Optional[dict] = None) -> dict:
    """The config whose convergence contract (batch, sequence, precision) the request keeps.

    The base recipe's own (``base``: its config, when the caller has loaded it), except on the bundled
    engine with a stand-in recipe of another model: then the model's Megatron library recipe, when the
    index has one, sets the contract; for a model the index does not bundle (a local config.json, a Hub
    repo) on GPUs, the library recipe of the closest size that the Megatron engine starts from, rather than
    the stand-in's CPU smoke-test contract (fp32, 64-token sequences), which the cpu card keeps.
    """
    base = base_config(recipe) if base is None else base
    if engine != "bundled" or (recipe is not None and recipe.model == card.id):
        return base
    library, _ = choose_recipe(card, goal, "megatron", hardware, world, seq, precision)
    smoke_test = find_bundled_model(card.id) is not None or get_hardware(hardware).arch == "cpu"
    if library is None or (library.model != card.id and smoke_test):
        return base
    whose = f"{card.id}'s library recipe" if library.model == card.id else \
        f"the library recipe of the closest size in the index ({library.model})"
    notes.append(f"convergence contract (global batch, sequence length, precision) from {library.name}, {whose}")
    if library.mode != goal:  # the index has no library recipe of this goal for the model
        notes.append(f"{library.name} is a {library.mode} recipe (the index has no {goal} recipe for {card.id}): "
                     f"its LR, steps, warmup and global batch are {library.mode} values; check them for {goal} "
                     "(override --optimizer.lr, --step_scheduler.max_steps, --global-batch-size)")
    return base_config(library)


def _recipe_and_contract(card: ModelCard, goal: str, engine: str, hardware: str, world: int, seq: Optional[int],
                         precision: Optional[str], notes: list[str]) -> tuple[Optional[RecipeEntry], dict, dict]:
    """The base recipe (the recipe decision tree), its config (read once here, passed on to whatever else needs
    it) and the config whose convergence contract the request keeps."""
    recipe, found = choose_recipe(card, goal, engine, hardware, world, seq, precision)
    notes += found
    base = base_config(recipe)
    return recipe, base, contract_source(card, goal, engine, recipe, hardware, world, seq, notes, precision, base=base)


def contract_defaults(model: Union[str, ModelCard], gpus: int, gpu_type: str, *, nodes: Optional[int] = None,
                      goal: str = "pretrain", engine: str = "megatron",
                      seq_length: Optional[int] = None, precision: Optional[str] = None,
                      ) -> tuple[Optional[int], Optional[int], Optional[str], Optional[str], bool]:
    """(sequence length, global batch, precision, gradient reduce dtype, offline packing) of the recipe
    `recommend` would start from, for `plan` requests that leave them out; None (and no packing) when the
    index has no recipe, except the precision: the one `recommend` would plan, the asked one, else the
    recipe's (None without either), and under Megatron a plain fp8 as the FP8 recipe the base recipe runs."""
    hardware = get_hardware(gpu_type)
    card = resolve_model(model) if isinstance(model, str) else model
    world = make_request(card, gpus, hardware.name, nodes=nodes, goal=goal, engine=engine).world_size
    recipe, base, contract = _recipe_and_contract(card, goal, engine, hardware.name, world, seq_length, precision, [])
    seq = _contract_seq(card, contract)
    recipe_precision = contract.get("precision")
    if engine == "megatron":
        recipe_precision = _megatron_precision(precision, contract, base)
    elif recipe_precision and not precision:  # as recommend decides it (fp8 kept where the trainer runs it)
        recipe_precision = _bundled_precision(recipe_precision, hardware, [])
    else:
        recipe_precision = precision or recipe_precision
    return (seq, _get(contract, "step_scheduler.global_batch_size"), recipe_precision,
            _get(contract, "distributed.grad_reduce_dtype"), packs_offline(recipe, base=base))


def plan_request(request: AdviceRequest) -> PlanRequest:
    """What `plan` plans: the request, with the convergence contract of the recipe `recommend` would start
    from for whatever the user left out.

    Only a value the user left out (None) takes the recipe's; a given 0 reaches make_request, which
    rejects it naming the field. Where the index has no recipe either, make_request's defaults apply.
    """
    seq, gbs, precision, grad_reduce, packed = contract_defaults(
        request.model, request.gpus, request.gpu_type, nodes=request.nodes, goal=request.goal, engine=request.engine,
        seq_length=request.seq_length, precision=request.precision)
    values = {"seq_length": _given(request.seq_length, seq),
              "global_batch_size": _given(request.global_batch_size, gbs),
              "precision": precision or request.precision,  # the asked one as recommend resolves it (fp8 -> fp8mx)
              "grad_reduce_dtype": request.grad_reduce_dtype or grad_reduce}
    planned = make_request(request.model, request.gpus, request.gpu_type, nodes=request.nodes, goal=request.goal,
                           engine=request.engine, packed_sequence=packed,
                           **{name: value for name, value in values.items() if value is not None})
    given = frozenset(name for name in ("seq_length", "global_batch_size", "precision")
                      if getattr(request, name) is not None)
    return replace(planned, given=given)


def _megatron_precision(asked: Optional[str], contract: dict, base: dict) -> Optional[str]:
    """The user's precision, else the contract's; a plain fp8 as the FP8 recipe the base recipe runs (its
    metadata.precision_recipe, else its name's token: the label the written config keeps), so that the plan
    ranks the scaling the config trains in (per tensor or per block: service.plan.ranking)."""
    precision = asked or contract.get("precision")
    if precision != "fp8":
        return precision
    return fp8_recipe_of(base) or precision


def _given(value: Optional[int], default: Optional[int]) -> Optional[int]:
    """The user's value when given (0 too, so that make_request rejects it), else the recipe's."""
    return default if value is None else value


def _bundled_precision(precision: str, hardware, notes: list[str], *, asked: bool = False) -> str:
    """The precision the bundled trainer trains in on this hardware, saying why when it differs from the
    recipe's; a precision the user asked for (``asked``) is refused instead, as the planner refuses it."""
    on_cpu = hardware.arch == "cpu"
    if not supports_precision(precision, hardware.arch):
        why = (f"its fp8 (torchao) needs a GPU of {', '.join(CAPABILITIES['fp8']['archs'])}" if precision == "fp8"
               else f"it has no {precision} kernels")
        if asked:
            other = "fp32" if on_cpu else "bf16"
            megatron = ", or --engine megatron" if token_runs_on(precision, hardware) and not on_cpu else ""
            raise PlanError(f"the bundled trainer does not train in {precision} on {hardware.name}: {why}",
                            field="precision", fix=f"use --precision {other}{megatron}")
        fallback = "fp32" if on_cpu else "bf16"
        notes.append(f"the bundled trainer does not train in {precision} on {hardware.name}: {why}; precision "
                     f"{precision} -> {fallback} (a convergence change)")
        return fallback
    if on_cpu and precision in CPU_EMULATED and not asked:
        notes.append(f"precision {precision} -> fp32 on {hardware.name} (a convergence change): a CPU without native "
                     f"{precision} units (AVX512-BF16/AMX) emulates it, slower than fp32; --precision {precision} "
                     "keeps it")
        return "fp32"
    if precision == "fp8":
        notes.append(f"fp8 in the bundled trainer: {CAPABILITIES['fp8']['via']} linears, data parallel only; "
                     f"install the extra: pip install 'recipe-advisor[{CAPABILITIES['fp8']['extra']}]'")
    return precision


def _contract_seq(card: ModelCard, contract: dict) -> Optional[int]:
    """The contract's sequence length, capped at the model's context when the recipe is another
    model's (a stand-in): its length says nothing about this model's positions."""
    seq = _get(contract, "dataset.seq_length") or _get(contract, "model.seq_length")
    stand_in = _get(contract, "metadata.model") not in (None, card.id)
    if seq and stand_in and card.max_position_embeddings:
        return min(seq, card.max_position_embeddings)
    return seq


def packs_offline(recipe: Optional[RecipeEntry], overrides: Sequence[Override] = (), *,
                  base: Optional[dict] = None) -> bool:
    """Whether the advised config will pack its data offline (``dataset.packed_sequence: true``, the
    index's _sft_common/_peft_common recipes), the overrides applied: Bridge then takes micro batch 1 only.
    ``base``: the recipe's config, when the caller has loaded it. The plan needs this before build_config
    applies the overrides to the planned config, so they are applied here to the recipe's."""
    config = base_config(recipe) if base is None else base
    try:
        config = with_overrides(config, overrides)
    except OverrideError:
        pass  # build_config applies them again and reports the error
    return _get(config, "dataset.packed_sequence") is True


def recipe_and_request(card: ModelCard, gpus: int, hardware, goal: str, engine: str, world: int,
                       overrides: Sequence[Override], notes: list[str], *, nodes: Optional[int],
                       seq_length: Optional[int], global_batch_size: Optional[int], precision: Optional[str],
                       grad_reduce_dtype: Optional[str]) -> tuple[Optional[RecipeEntry], dict, PlanRequest, dict]:
    """What `recommend` plans for ``goal`` on ``world`` GPUs: (the base recipe, its config, the plan request,
    the config whose convergence contract the request keeps). The request holds what the user gave and
    the contract's values for the rest; ``notes`` gets what was decided on the way."""
    recipe, base, contract = _recipe_and_contract(card, goal, engine, hardware.name, world, seq_length, precision,
                                                  notes)
    refuse_fp8_recipe_for_bundled(precision, engine, hardware)  # before the bundled check calls it unknown
    if engine == "megatron":
        prec = _megatron_precision(precision, contract, base)
    else:  # as contract_defaults decides it for `plan`
        prec = precision or contract.get("precision")
        prec = _bundled_precision(prec, hardware, notes, asked=precision is not None) if prec else prec
    prec = prec or "bf16"  # no recipe (schema defaults): make_request's default, as `plan` uses it
    request = make_request(
        card, gpus, hardware.name, nodes=nodes, goal=goal, engine=engine, precision=prec,
        seq_length=_given(seq_length, _contract_seq(card, contract)),
        global_batch_size=_given(global_batch_size, _get(contract, "step_scheduler.global_batch_size")),
        grad_reduce_dtype=grad_reduce_dtype or _get(contract, "distributed.grad_reduce_dtype") or "fp32",
        packed_sequence=packs_offline(recipe, overrides, base=base))
    return recipe, base, request, contract
