"""Torch-free checks of the ``model`` and ``peft`` sections and of the sequence lengths against the
model's positions, shared by the pre-flight and the workers.

The pre-flight (trainer/contract/preflight.py) runs them before any process starts, so an unknown loader key,
attention implementation or model name stops the launcher with one message instead of every worker
failing after importing torch; the model builder (trainer/recipes/model_io.py) applies the same
rules, so the two never disagree. ``model.dtype`` and ``model.kernels`` are typed by the schema
(trainer/contract/config.py), which every config passes first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from trainer.contract.model_settings import (
    ALL_LINEAR,
    ATTN_IMPLEMENTATIONS,
    DTYPES,
    LATENT_ATTENTION_LINEARS,
    LINEAR_MODULES,
    target_path,
)
from trainer.contract.overrides import ConfigError

# Keyword arguments of the default loader (no model._target_): trainer.models.build_causal_lm's.
DEFAULT_LOADER_KWARGS = ("dtype", "load_weights", "attn_implementation", "kernels")


def dtype_name(value: Any) -> str:
    """The torch dtype attribute a ``model.dtype`` spelling names (``bf16`` -> ``bfloat16``)."""
    name = str(value).removeprefix("torch.")
    if name not in DTYPES:
        raise ConfigError(f"model.dtype: {value!r} is not one of {', '.join(sorted(DTYPES))}")
    return DTYPES[name]


def check_default_loader_kwargs(kwargs: Mapping[str, Any]) -> None:
    unknown = sorted(set(kwargs) - set(DEFAULT_LOADER_KWARGS))
    if unknown:
        raise ConfigError(f"model: unknown key(s) {', '.join(unknown)}; the default loader takes "
                          f"pretrained_model_name_or_path, {', '.join(DEFAULT_LOADER_KWARGS)}")


def check_model_keys(section: Any) -> None:
    """For the default loader: its keys and the attention implementation (no file or network read)."""
    kwargs = section.kwargs()
    if section.target is not None:
        return  # a custom builder reads its own keys
    check_default_loader_kwargs(kwargs)
    attn = kwargs.get("attn_implementation", "sdpa")
    if attn not in ATTN_IMPLEMENTATIONS:
        raise ConfigError(f"model.attn_implementation: {attn!r} is not one of {', '.join(ATTN_IMPLEMENTATIONS)}; "
                          "use one of them, or remove the key for sdpa")


def check_model_source(name: str, weights: bool = False) -> None:
    """Refuse a name the workers certainly cannot resolve (trainer.models.builder.resolve_config's order:
    a local path, a bundled id, the Hugging Face hub). Only with HF_HUB_OFFLINE set is "not on the hub"
    certain (not in the local cache); online, a hub id is left to the workers, which download it.
    ``weights`` (``load_weights: true``): a bundled card ships a config, not weights, which come from the
    Hugging Face cache like any repo's."""
    if Path(name).expanduser().exists():
        return
    try:
        from recipe_index.models import find_bundled_model, hub_offline, model_suggestions
    except ImportError:  # the trainer installed without the index: the workers decide
        return
    card = find_bundled_model(name)
    if not hub_offline():
        return
    repo = card.hf_id if card is not None else name
    if card is not None or hub_cached(name) is not None:
        if weights and repo and not (hub_cached(repo, SINGLE_FILE) or hub_cached(repo, INDEX_FILE)):
            raise ConfigError(f"model.load_weights: {name!r}'s weights ({repo}) are not in the Hugging Face "
                              f"cache (HF_HUB_OFFLINE is set); download them first (huggingface-cli download "
                              f"{repo}), or train from the deterministic initialisation (load_weights: false)")
        return
    close = model_suggestions(name)
    hint = f" (closest bundled ids: {', '.join(close)})" if close else ""
    raise ConfigError(
        f"model.pretrained_model_name_or_path: {name!r} is not a local folder or config.json, not a bundled "
        f"model{hint}, and not in the Hugging Face cache (HF_HUB_OFFLINE is set); name a bundled id "
        "(recipe-advisor models), a model folder, or download the model first"
    )


def hub_cached(repo_id: str, filename: str = "config.json") -> Optional[Path]:
    """A file of a Hugging Face repo as the local cache holds it, without a network call; None when it does not."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, filename)
    except ValueError:  # not a valid repo id (huggingface_hub's HFValidationError)
        return None
    return Path(found) if isinstance(found, str) else None


# The Hugging Face weight files the default loader reads beside a config.json (trainer/components/hf_io.py writes them).
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


def has_hf_weights(folder: Union[str, Path]) -> bool:
    """Whether a model folder holds weights the default loader reads (one file, or an index of shards)."""
    folder = Path(folder)
    return (folder / INDEX_FILE).is_file() or (folder / SINGLE_FILE).is_file()


SEQUENCE_SECTIONS = ("dataset", "validation_dataset")


def check_seq_lengths(cfg: Any, positions: Optional[int], model: str) -> None:
    """Neither the training nor the validation sequences may be longer than the model's
    ``max_position_embeddings``: beyond it RoPE runs at positions the model never saw, and a typo
    (100000 for 1000) makes every step or validation pass run for hours instead of failing.
    ``positions`` None: not known here (the workers check the built model)."""
    if not positions:
        return
    for section_name in SEQUENCE_SECTIONS:
        section = getattr(cfg, section_name)
        seq = section.seq_length if section is not None else None
        if seq is not None and seq > positions:
            raise ConfigError(
                f"{section_name}.seq_length: {seq} is longer than the {positions} positions of {model} "
                f"(max_position_embeddings); use {positions} or less, or a model whose config.json declares a "
                "longer context (a larger max_position_embeddings, e.g. with RoPE scaling)"
            )


# Where a model's context is read without torch or the network (trainer.models.resolve_config's
# order): a local config.json, then a bundled card. Elsewhere (hub, custom builder) the workers check
# the model they build.
LOCAL, BUNDLED, ELSEWHERE = "local", "bundled", "elsewhere"


def declared_positions(section: Any) -> tuple[str, Optional[int]]:
    """(where the model comes from, its declared ``max_position_embeddings`` or None when it declares
    none). Undeclared is not refused: the bundled decoder's RoPE runs at any position, and a card
    without the field (e.g. the Qwen2.5 cards) says nothing about the real context."""
    return declared_size(section, "max_position_embeddings")


def declared_size(section: Any, field: str) -> tuple[str, Optional[int]]:
    """(where the model comes from, the whole number its config.json or bundled card declares for ``field``,
    such as ``max_position_embeddings`` or ``num_hidden_layers``, or None)."""
    where, value = declared_value(section, field)
    return where, (value if isinstance(value, int) and not isinstance(value, bool) and value else None)


def declared_value(section: Any, field: str) -> tuple[str, Any]:
    """(where the model comes from, what its config.json or bundled card declares for ``field``, or None)."""
    name = section.pretrained_model_name_or_path
    if section.target is not None or not name:
        return ELSEWHERE, None
    local = Path(name).expanduser()
    if local.exists():
        try:
            data = json.loads((local / "config.json" if local.is_dir() else local).read_text())
        except (OSError, ValueError):
            return LOCAL, None  # unreadable: the workers report it with the file's name
        return LOCAL, (data.get(field) if isinstance(data, dict) else None)
    try:
        from recipe_index.models import find_bundled_model
    except ImportError:
        return ELSEWHERE, None
    card = find_bundled_model(name)
    return (BUNDLED, getattr(card, field, None)) if card is not None else (ELSEWHERE, None)


def check_peft_targets(target_modules: Union[str, Sequence[str]], *, default_loader: bool,
                       layers: Optional[int] = None) -> None:
    """On the bundled decoder, every entry of ``peft.target_modules`` must name one of its linears
    (trainer.components.peft.apply_lora matches module-name suffixes and refuses an entry that matches none);
    "all-linear" always does."""
    if not default_loader or target_modules == ALL_LINEAR:
        return
    def matches(target: str) -> bool:
        path = target_path(target)
        index = path[2] if path and len(path) > 2 else "N"  # model.layers.<index>...
        return path is not None and (index == "N" or layers is None or int(index) < layers)

    unmatched = [t for t in target_modules if not matches(str(t))]
    if unmatched:
        raise ConfigError(
            f"peft.target_modules: {unmatched} matches no linear layer of the model; "
            f"use names from {', '.join(LINEAR_MODULES)} (DeepSeek-V3: also {', '.join(LATENT_ATTENTION_LINEARS)})"
        )
