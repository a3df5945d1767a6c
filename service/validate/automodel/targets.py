"""Walking a recipe's ``_target_`` mappings, and the keywords of the non-AutoModel loaders recipes name.

``nemo_automodel.*`` targets are judged by AutoModel's source at the recipe's version
(``service.validate.automodel.versions``); ``torch.*`` targets against torch's own source when torch is installed
(``service.validate.rules.targets``); torchdata's ``StatefulDataLoader`` (not installed here) by the keywords below.
"""

from __future__ import annotations

from typing import Iterator, Optional

# AutoModel's loader imports these top-level packages without further opt-in (its ALLOWED_IMPORT_PREFIXES);
# any other must be installed where the recipe runs.
IMPORT_PREFIXES = ("nemo_automodel", "torch", "transformers", "torchdata", "torchao", "liger_kernel")

_DATALOADER = frozenset({
    "dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "num_workers", "collate_fn", "pin_memory",
    "drop_last", "timeout", "worker_init_fn", "multiprocessing_context", "generator", "prefetch_factor",
    "persistent_workers", "pin_memory_device", "in_order", "snapshot_every_n_steps",
    "dataloader_type"})  # the recipe takes this one itself, for a Megatron dataset's sampler

KNOWN_TARGETS: dict[str, Optional[frozenset[str]]] = {
    "torchdata.stateful_dataloader.StatefulDataLoader": _DATALOADER,
    "torch.utils.data.DataLoader": _DATALOADER - {"snapshot_every_n_steps"},
}


def walk_targets(node, key: str = "") -> Iterator[tuple[str, str, dict]]:
    """(dotted key of the mapping, its target, the mapping) for every `_target_` in the recipe."""
    if isinstance(node, dict):
        target = node.get("_target_")
        if isinstance(target, str) and key:
            yield key, target, node
        for name, value in node.items():
            if isinstance(name, str):
                yield from walk_targets(value, f"{key}.{name}" if key else name)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from walk_targets(value, f"{key}[{index}]")


def importable_by_default(target: str) -> bool:
    top = target.split(".", 1)[0]
    return top in IMPORT_PREFIXES


def keywords(node: dict) -> list[str]:
    """The keywords a target is called with (AutoModel passes every other key of the mapping)."""
    return [k for k in node if isinstance(k, str) and k not in ("_target_", "_recursive_", "_convert_")]
