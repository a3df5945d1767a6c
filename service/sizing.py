"""The fewest GPUs of a type on which a request fits: what an impossible request is told."""

from __future__ import annotations

from typing import Optional

from service.planner import PlanRequest, plan


def gpus_needed(request: PlanRequest, max_gpus: int = 1 << 16) -> Optional[int]:
    """The fewest GPUs of the same type on which some layout fits: counts inside one node, then whole
    nodes. Doubling finds a count that fits, bisection the smallest one above the last that did not
    (fit grows with the GPU count; a count between two bisection steps is not tried)."""
    node = request.hardware.gpus_per_node

    def fits(gpus: int) -> bool:
        return plan(request.with_world(gpus)).best is not None

    counts = [g for g in range(request.world_size + 1, node)] + \
        [node * k for k in range(max(1, request.world_size // node + 1), max_gpus // node + 1)]
    if not counts:
        return None
    low, step = -1, 1  # counts[low] does not fit (-1: the request itself)
    high = None
    while high is None:
        probe = min(low + step, len(counts) - 1)
        if fits(counts[probe]):
            high = probe
        elif probe == len(counts) - 1:
            return None
        else:
            low, step = probe, step * 2
    while high - low > 1:
        mid = (low + high) // 2
        if fits(counts[mid]):
            high = mid
        else:
            low = mid
    return counts[high]
