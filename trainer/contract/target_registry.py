"""The callables a config may name in ``_target_``, per section, each with its signature.

A config is data: it may name only what this registry lists for the section it is in, never any other
callable (``trainer.contract.atomic_files.write_atomic`` with ``path``/``text`` would write a file). validate
(RA-S001), ``recommend`` (which validates what it emits), the launcher's pre-flight and each trainer process
check a ``_target_`` here before anything is imported (trainer/contract/builders.py). A name is matched exactly,
as written in :data:`REGISTRY`: ``torch.optim.AdamW``, not ``torch.optim.adamw.AdamW``.

``keywords`` are the arguments a config may give (checked against the installed callable by validate,
RA-S002); ``supplied`` are those the trainer passes itself (the optimizer's parameters, the dataset's
``vocab_size``, the builder's ``name_or_path``/``dtype``/``device``/``seed``/``kernels``, the loss's batch).
The LR scheduler (``lr_scheduler.schedule``), PEFT (``peft.method``) and the collator (fixed:
``trainer.data.collate``) are closed choices of the schema, so no callable may be named there.

Torch-free and import-free, so that validating and serving never import what a config names.
"""

from __future__ import annotations

from difflib import get_close_matches
from typing import Any, NamedTuple, Optional


class Registered(NamedTuple):
    path: str
    keywords: tuple[str, ...]
    supplied: tuple[str, ...] = ()


_FOREACH = ("foreach", "maximize", "differentiable")
_ADAM = ("lr", "betas", "eps", "weight_decay", "amsgrad", "capturable", "fused", *_FOREACH)
OPTIMIZERS = (
    Registered("torch.optim.AdamW", _ADAM, ("params",)),
    Registered("torch.optim.Adam", _ADAM, ("params",)),
    Registered("torch.optim.SGD", ("lr", "momentum", "dampening", "weight_decay", "nesterov", "fused", *_FOREACH),
               ("params",)),
    Registered("torch.optim.RMSprop", ("lr", "alpha", "eps", "weight_decay", "momentum", "centered", "capturable",
                                       *_FOREACH), ("params",)),
    Registered("torch.optim.Adagrad", ("lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps", "fused",
                                       *_FOREACH), ("params",)),
    Registered("torch.optim.Adadelta", ("lr", "rho", "eps", "weight_decay", "capturable", *_FOREACH), ("params",)),
    Registered("torch.optim.Adamax", ("lr", "betas", "eps", "weight_decay", "capturable", *_FOREACH), ("params",)),
    Registered("torch.optim.NAdam", ("lr", "betas", "eps", "weight_decay", "momentum_decay", "decoupled_weight_decay",
                                     "capturable", *_FOREACH), ("params",)),
    Registered("torch.optim.RAdam", ("lr", "betas", "eps", "weight_decay", "decoupled_weight_decay", "capturable",
                                     *_FOREACH), ("params",)),
    Registered("torch.optim.Adafactor", ("lr", "beta2_decay", "eps", "d", "weight_decay", "foreach", "maximize"),
               ("params",)),  # torch >= 2.5
    Registered("torch.optim.Muon", ("lr", "weight_decay", "momentum", "nesterov", "ns_coefficients", "eps",
                                    "ns_steps", "adjust_lr_fn"), ("params",)),  # torch >= 2.9
)
DATASETS = (
    Registered("trainer.data.MockDataset", ("seq_length", "num_samples", "seed", "learnable", "rule_seed"),
               ("vocab_size",)),
    Registered("trainer.data.JsonlSFTDataset", ("path", "seq_length", "tokenizer", "prompt_key", "answer_key")),
    Registered("trainer.data.JsonlPretrainDataset", ("path", "seq_length", "tokenizer", "text_key")),
)
LOSSES = (
    Registered("trainer.loss.causal_lm_loss", ("position_ids", "ignore_index", "chunked", "chunk_size"),
               ("model", "input_ids", "labels")),
)
MODEL_BUILDERS = (
    Registered("trainer.models.build_causal_lm", ("load_weights", "attn_implementation"),
               ("name_or_path", "dtype", "device", "seed", "kernels")),
)
RECIPES = (Registered("trainer.recipes.TrainFinetuneRecipe", (), ("cfg", "raw_config", "dist_info")),)

# Section (a top-level config key) -> what its `_target_` may name. Absent sections name nothing.
REGISTRY: dict[str, tuple[Registered, ...]] = {
    "optimizer": OPTIMIZERS,
    "dataset": DATASETS,
    "validation_dataset": DATASETS,
    "loss_fn": LOSSES,
    "model": MODEL_BUILDERS,
    "recipe": RECIPES,
    "lr_scheduler": (),
    "peft": (),
    "collator": (),
}
# Why a known callable is left out, for the refusal.
NOT_REGISTERED_BECAUSE = {
    "torch.optim.LBFGS": "its step() re-evaluates the loss through a closure, which a training step does not pass",
    "torch.optim.SparseAdam": "it takes sparse gradients only, and the model's gradients are dense",
}


def registered(section: str, target: Any) -> Optional[Registered]:
    """The registry's entry for ``target`` in ``section`` (a top-level key), or None."""
    if not isinstance(target, str):
        return None
    return next((entry for entry in REGISTRY.get(section, ()) if entry.path == target), None)


def names(section: str) -> list[str]:
    return [entry.path for entry in REGISTRY.get(section, ())]


def nearest_names(section: str, target: Any, n: int = 3) -> list[str]:
    """Registered names of ``section`` whose last part is spelt closest to ``target``'s (``torch.optim.adamw.AdamW``
    -> ``torch.optim.AdamW``), else the section's first names. Compares the short last parts only: cheap."""
    options = names(section)
    if not isinstance(target, str) or not options:
        return options[:n]
    leaves = {name.rsplit(".", 1)[-1].lower(): name for name in options}
    close = get_close_matches(target.rsplit(".", 1)[-1].lower()[:64], list(leaves), n=n, cutoff=0.5)
    return [leaves[leaf] for leaf in close] or options[:n]


def refusal(section: str, target: Any, key: str) -> str:
    """``key._target_: ... is not registered for section ...; fix``: the one-line reason, for validate and train."""
    shown = repr(target) if not isinstance(target, str) else target
    shown = shown if len(shown) <= 80 else shown[:60] + "..." + shown[-10:]
    if not REGISTRY.get(section):
        where = (f"{key} names no callable in this trainer" if section in REGISTRY else
                 f"no callable may be named at {key}")
        return (f"{key}._target_: {shown} is not allowed: {where} (configs are data; the registry of callables a "
                "config may name is in docs/trainer.md); remove the _target_")
    why = NOT_REGISTERED_BECAUSE.get(str(target))
    because = f" ({why})" if why else ""
    return (f"{key}._target_: {shown} is not a registered {section} callable{because}; configs are data and may "
            f"name only the registry's; nearest: {', '.join(nearest_names(section, target))}")
