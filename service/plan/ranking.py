"""The planner's ranking: fitting layouts by estimated tokens/s per GPU, ties broken by layout preferences."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

from service.estimate import constants as C
from service.layouts.bridge_tables import is_megatron_fsdp

if TYPE_CHECKING:
    from service.facts import Layout
    from service.plan.types import PlannedLayout


def _fsdp_last(row: PlannedLayout, fsdp_last: bool) -> bool:
    """A Megatron-FSDP row of a request whose precision puts it last among ties (MXFP8, NVFP4:
    ``PlanRequest.fsdp_last``). NVIDIA's published MXFP8 and NVFP4 layouts of dense models never use Megatron-FSDP
    while their BF16 and FP8 current-scaling ones do (benchmarks/README.md), and its gather of these formats arrived
    late (Megatron-LM #2239, Megatron Bridge #1213 / #1794); an MXFP8 weight also cannot be transposed from its
    gathered copy as a per-tensor FP8 one can (its scales run along one dimension), so the backward needs a second,
    column-wise copy every micro batch. MoE models are included: NVIDIA runs Megatron-FSDP with MXFP8 there only in
    variants named for it (DeepSeek-V3 `_fsdp`)."""
    return fsdp_last and is_megatron_fsdp(row.strategy, row.sharding)


def _preference(row: PlannedLayout, long_context: bool, comfortable_gib: float, layers: int,
                unlaunchable: Callable[[Layout], bool], fsdp_last: bool = False) -> tuple:
    """Among layouts the estimates cannot tell apart, in order:

    1. a pipeline the recipe can launch as written (``unlaunchable``: the Bridge library recipe's layout table
       lacks it);
    2. under MXFP8 or NVFP4, no Megatron-FSDP (:func:`_fsdp_last`);
    3. no CP unless the context is long (CP is for > 8K);
    4. no pipeline stage thinner than MIN_LAYERS_PER_STAGE layers (whole-layer placement costs such a stage
       more than the estimate resolves);
    5. smaller TP (TP costs collectives on every layer and stays in the node);
    6. memory headroom (above MEMORY_COMFORT_FRACTION of the GPU a layout risks allocator retries and
       fragmentation growth over a long run, and has no room for a longer batch; expert recipes stay below it);
    7. no PP without VP (the pipeline bubble);
    8. larger EP (for MoE, raise EP first);
    9. the faster estimate."""
    lay = row.structure
    thin_stages = lay.pp > 1 and layers < C.MIN_LAYERS_PER_STAGE * lay.pp
    return (unlaunchable(lay), _fsdp_last(row, fsdp_last), 0 if long_context else lay.cp, thin_stages,
            lay.tp, row.memory_total_gib > comfortable_gib, lay.pp > 1 and lay.vp_or_1 == 1, -lay.ep,
            -(row.tokens_per_s or 0.0))


def why_first(ranked: list[PlannedLayout], long_context: bool = False, comfortable_gib: float = float("inf"), *,
              layers: int, unlaunchable: Callable[[Layout], bool] = lambda layout: False,
              fsdp_last: bool = False) -> Optional[str]:
    """One sentence on why the first of ``ranked`` (as :func:`rank` ordered it, with the same arguments) is first
    although a fitting layout with a faster estimate is listed: the tie band, and the first preference of
    :func:`_preference` on which the two differ. None when the first row is the fastest or nothing fits."""
    fitting = [r for r in ranked if r.fits]
    if not fitting or not ranked[0].fits:
        return None
    first, fastest = ranked[0], max(fitting, key=lambda r: r.tokens_per_s)
    if fastest.tokens_per_s <= first.tokens_per_s:
        return None
    ours = _preference(first, long_context, comfortable_gib, layers, unlaunchable, fsdp_last)
    theirs = _preference(fastest, long_context, comfortable_gib, layers, unlaunchable, fsdp_last)
    decided = next(i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b)
    faster = fastest.tokens_per_s / first.tokens_per_s - 1
    return (f"first although {_shape(fastest)} is estimated {faster:.1%} faster ({fastest.tokens_per_s:,.0f} vs "
            f"{first.tokens_per_s:,.0f} tokens/s/GPU): estimates within {C.ESTIMATE_TIE_TOLERANCE:.0%} of the "
            f"fastest are a tie (the estimates' own error), and the tie goes to "
            f"{_preferred(decided, first, fastest, comfortable_gib, layers)}")


def _shape(row: PlannedLayout) -> str:
    lay = row.layout
    return (f"TP {lay.tp} PP {lay.pp}{f' VP {lay.vp}' if lay.vp else ''} CP {lay.cp} EP {lay.ep} ETP {lay.etp} "
            f"(micro batch {lay.micro_batch_size}, recompute {lay.recompute}, {row.sharding} sharding)")


def _preferred(key: int, first: PlannedLayout, other: PlannedLayout, comfortable_gib: float, layers: int) -> str:
    """The preference ``key`` (an index into :func:`_preference`'s tuple) in words, for the two rows."""
    a, b = first.structure, other.structure
    return [
        "a pipeline the Bridge library recipe can launch as written (the faster one needs a layout string, RA-L019)",
        "a layout without Megatron-FSDP, which NVIDIA's published MXFP8 and NVFP4 layouts do not use",
        f"less context parallelism, which is for sequences over {C.LONG_CONTEXT:,} tokens (CP {a.cp} vs {b.cp})",
        f"pipeline stages of at least {C.MIN_LAYERS_PER_STAGE} layers ({layers} layers over PP {a.pp} vs "
        f"PP {b.pp})",
        f"smaller TP, which costs collectives on every layer (TP {a.tp} vs {b.tp})",
        f"memory headroom ({first.memory_total_gib:.1f} GiB per GPU, within {C.MEMORY_COMFORT_FRACTION:.0%} of the "
        f"GPU, vs {other.memory_total_gib:.1f} GiB above it)",
        f"no pipeline without virtual stages, whose bubble the faster one has (PP {b.pp} without VP)",
        f"larger EP (EP {a.ep} vs {b.ep})",
    ][key]


def rank(rows: list[PlannedLayout], long_context: bool = False, comfortable_gib: float = float("inf"), *,
         layers: int, unlaunchable: Callable[[Layout], bool] = lambda layout: False,
         fsdp_last: bool = False) -> list[PlannedLayout]:
    """Fitting layouts by estimated tokens/s per GPU, then the rest by memory.

    Estimates within ESTIMATE_TIE_TOLERANCE of the best of their group are a tie (the model's own
    error is larger than that), broken by :func:`_preference`; ``comfortable_gib`` is the
    memory above which a layout counts as tight (MEMORY_COMFORT_FRACTION of the GPU), ``layers``
    the model's decoder layers (for the stage-depth preference), ``fsdp_last`` whether the precision puts
    Megatron-FSDP last among ties.
    """

    def preference(row: PlannedLayout) -> tuple:
        return _preference(row, long_context, comfortable_gib, layers, unlaunchable, fsdp_last)

    fitting = sorted((r for r in rows if r.fits), key=lambda r: -r.tokens_per_s)
    ranked: list[PlannedLayout] = []
    start = 0
    while start < len(fitting):
        floor = fitting[start].tokens_per_s * (1 - C.ESTIMATE_TIE_TOLERANCE)
        end = start
        while end < len(fitting) and fitting[end].tokens_per_s >= floor:
            end += 1
        ranked.extend(sorted(fitting[start:end], key=preference))
        start = end
    rest = sorted((r for r in rows if not r.fits), key=lambda r: (r.memory_total_gib, preference(r)))
    return ranked + rest
