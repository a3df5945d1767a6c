"""Layout arithmetic below the planner, the estimates and the rules: divisors, where Megatron puts the decoder
layers of a pipeline (the split itself lives with the trainer, which cuts its stages there), and whether
sequence parallelism can split a sequence. Pure functions of numbers; nothing here judges a config.
"""

from __future__ import annotations

from functools import lru_cache
from math import isqrt
from typing import Optional

from trainer.contract.pipeline_split import megatron_split_settings, stage_split

__all__ = ["PIPELINE_SPLIT_KEYS", "divisors", "megatron_split", "megatron_split_settings", "sequence_parallel_splits",
           "split_problem", "stage_split"]


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending."""
    small = [d for d in range(1, isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


@lru_cache(maxsize=4096)
def megatron_split(layers: int, pp: int, vp: int) -> Optional[str]:
    """:func:`megatron_split_settings` as RA-L011's fix writes them (``a=true and b=true``), or None."""
    settings = megatron_split_settings(layers, pp, vp)
    if settings is None:
        return None
    return " and ".join(f"{key}={str(value).lower()}" for key, value in settings.items())


def sequence_parallel_splits(seq: int, tp: int, cp: int) -> bool:
    """Whether sequence parallelism can split this sequence: CP leaves each rank 1/CP of it, and SP
    scatters that share evenly over the TP ranks."""
    return tp == 1 or seq % (tp * cp) == 0



# Megatron's settings for an uneven pipeline split (Megatron Bridge, 3b), which a config writes under `model`.
PIPELINE_SPLIT_KEYS = ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
                       "num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage")


def split_problem(layers: int, pp: int, vp: int, split: dict) -> Optional[str]:
    """Why Megatron's split settings in ``split`` do not place ``layers`` on PP x VP, or None when they do.
    Megatron-Core's TransformerConfig: first/last stage sizes are whole numbers above 0, not combined with
    the embedding/loss accounting; every rank's layers divide by VP; the middle stages are even (counting
    the embedding and the loss as a layer each where asked)."""
    edges = {k: split[k] for k in ("num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage")
             if split.get(k) is not None}
    accounting = [k for k in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")
                  if split.get(k)]
    if edges and accounting:
        return f"{' and '.join(edges)} cannot be set together with {' or '.join(accounting)} (Megatron refuses both)"
    for key, count in edges.items():
        if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
            return f"{key} must be a whole number above 0, got {count!r}"
        if count % vp:
            return f"{key}={count} does not divide by VP={vp} (each rank's layers split into VP chunks)"
    middle_stages = pp - len(edges)
    rest = layers + len(accounting) - sum(edges.values())
    if middle_stages == 0:
        return None if rest == 0 else f"the first and last stages hold {sum(edges.values())} of {layers} layers"
    if rest <= 0 or rest % middle_stages or (rest // middle_stages) % vp:
        counted = f" (embedding and loss counted: {len(accounting)})" if accounting else ""
        return (f"{rest} layers left for {middle_stages} stage(s){counted} do not split evenly in chunks of "
                f"VP={vp}")
    return None
