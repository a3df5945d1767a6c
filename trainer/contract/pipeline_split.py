"""Where the decoder layers of a pipeline go: Megatron-Core's split, shared by the planner, validate and
the bundled trainer (trainer/distributed/pipeline.py cuts its stages here). Pure Python, no torch.

Megatron-Core accepts (Megatron Bridge, 3b) an even split, or counting the embedding and/or the loss as
pipeline layers, or uneven first/last stages with the middle stages even; per-rank counts must divide
by VP (virtual stages per rank, interleaved 1F1B).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Optional, Union


def megatron_split_settings(layers: int, pp: int, vp: int) -> Optional[dict[str, Union[bool, int]]]:
    """The Megatron model settings that place ``layers`` on PP ranks x VP chunks when they don't divide evenly,
    and that ``stage_split`` sizes the stages by.

    Megatron-Core accepts (Megatron Bridge, 3b) either counting the embedding
    and/or the loss as pipeline layers, or uneven first/last stages with the
    middle stages even; per-rank counts must divide by VP. None when no split exists.
    """
    accounted = _accounted_split(layers, pp, vp)
    if accounted is not None:
        return {name: True for name, on in zip(("account_for_embedding_in_pipeline_split",
                                                 "account_for_loss_in_pipeline_split"), accounted) if on}
    if pp < 2:
        return None
    best = _balanced_edges(layers, pp, vp)
    if best is None:
        return None
    first, last = best
    return {"num_layers_in_first_pipeline_stage": first, "num_layers_in_last_pipeline_stage": last}


def _accounted_split(layers: int, pp: int, vp: int) -> Optional[tuple[int, int]]:
    """(embedding, loss) counted as pipeline layers, 1 or 0 each, that make the stages even: Megatron's
    account_for_*_in_pipeline_split, tried in this order; None when no such accounting evens them."""
    for emb, loss in ((1, 1), (1, 0), (0, 1)):
        total = layers + emb + loss
        if total % pp == 0 and (total // pp) % vp == 0 and total // pp > emb + loss:
            return emb, loss
    return None


@lru_cache(maxsize=4096)
def _balanced_edges(layers: int, pp: int, vp: int) -> Optional[tuple[int, int]]:
    """(first, last) stage sizes, multiples of VP, with the middle stages even (also multiples of VP),
    that make the fullest stage smallest (then the edge stages, which carry the embedding and the loss,
    the lighter ones); None when no such split exists."""
    middle_stages, best = pp - 2, None
    for middle in range(0 if middle_stages == 0 else vp, layers + 1, vp):
        edges = layers - middle * middle_stages
        if edges < 2 * vp:
            break
        first = edges // 2 // vp * vp
        last = edges - first
        if first < vp or last % vp:
            continue
        key = (max(first, last, middle), first + last)
        if best is None or key < best[0]:
            best = (key, (first, last))
        if middle_stages == 0:
            break
    return None if best is None else best[1]


@lru_cache(maxsize=4096)
def stage_split(layers: int, pp: int, vp: int = 1, explicit: bool = False) -> tuple[int, int, int]:
    """Decoder layers on (the first, each middle (0 when PP is 2), the last) pipeline stage, as Megatron
    places them: even when PP x VP divides the layers; else the split ``megatron_split`` prescribes
    (the embedding and/or the loss counted as a layer, or uneven first and last stages). A model placed by an explicit
    layout string (``explicit``: its recipes' layout builders balance the embedding and the loss with
    the decoder layers), or one no split fits, gets ceil(layers / PP) everywhere. The memory and
    step-time models size the stages from it: an uneven split can put several times the average on
    one stage."""
    if pp == 1:
        return layers, 0, layers
    if explicit:
        return (math.ceil(layers / pp),) * 3
    if layers % (pp * vp) == 0:
        return layers // pp, layers // pp if pp > 2 else 0, layers // pp
    accounted = _accounted_split(layers, pp, vp)
    if accounted is not None:
        emb, loss = accounted
        per = (layers + emb + loss) // pp
        return per - emb, per if pp > 2 else 0, per - loss  # two stages have no middle one
    edges = _balanced_edges(layers, pp, vp)
    if edges is None:
        return (math.ceil(layers / pp),) * 3
    first, last = edges
    return first, (layers - first - last) // (pp - 2) if pp > 2 else 0, last


def stage_layer_counts(layers: int, pp: int, vp: int = 1) -> Optional[list[int]]:
    """Decoder layers of each of the PP x VP pipeline stages in schedule order (stage s runs on rank s % PP,
    as its virtual chunk s // PP), cut at :func:`stage_split`'s per-rank split; the embedding sits on the
    first stage and the norm, LM head and loss on the last, which then may hold no decoder layer (the
    embedding or loss "counted as a layer"). None when no split gives every stage its share: a middle stage
    would be empty, or a rank's layers do not divide by VP."""
    if pp < 1 or vp < 1 or layers < 1:
        return None
    stages = pp * vp
    if layers % stages == 0:
        return [layers // stages] * stages
    accounted = _accounted_split(layers, pp, vp)
    if accounted is not None:
        emb, loss = accounted
        per_chunk = (layers + emb + loss) // pp // vp
        counts = [per_chunk] * stages
        counts[0] -= emb
        counts[-1] -= loss
        return counts if min(counts[1:-1] or [1]) > 0 and min(counts) >= 0 else None
    if pp < 2:
        return None
    edges = _balanced_edges(layers, pp, vp)
    if edges is None:
        return None
    first, last = edges
    middle = (layers - first - last) // (pp - 2) if pp > 2 else 0
    per_rank = [first] + [middle] * (pp - 2) + [last]
    if any(count % vp or count == 0 for count in per_rank):
        return None
    return [per_rank[s % pp] // vp for s in range(stages)]
