"""GPU counts of a type on which a request fits: what an impossible request is told."""

from __future__ import annotations

from dataclasses import replace
from itertools import islice
from typing import Optional

from service.plan.planner import plan
from service.plan.types import Plan, PlanRequest

# Consecutive counts tried past one whose layouts the rules all reject (the global batch does not
# split over it, heads do not divide, ...): such a count says nothing about memory.
RULE_REJECTED_SKIPS = 8
# Counts tried below the request when its own count has no valid layout.
MAX_PROBES_BELOW = 16
# Counts tried below the first fitting one bisection finds: fit is not monotonic in the count (EP, PP
# and the batch must divide it), so a smaller count between may fit where bisection's midpoint did not.
MAX_PROBES_BETWEEN = 32

# The largest GPU count a search for one that fits goes to (the requests' own bound).
MAX_GPUS_TRIED = 1 << 16

FIT, TOO_SMALL, NO_VALID_LAYOUT = "fit", "too small", "no valid layout"


def _unit(request: PlanRequest) -> int:
    """The step between counts: whole nodes, or the user's own GPUs per node when they asked for
    several partly used nodes (--gpus 4 --nodes 4 grows by nodes of 4)."""
    node = request.hardware.gpus_per_node
    return request.gpus_per_node if request.num_nodes > 1 and request.gpus_per_node < node else node


def _at(request: PlanRequest, gpus: int) -> PlanRequest:
    unit = _unit(request)
    if unit != request.hardware.gpus_per_node:
        return replace(request, num_nodes=gpus // unit)
    return request.with_world(gpus)


def _probe(request: PlanRequest, gpus: int) -> str:
    result = plan(_at(request, gpus))
    if result.best is not None:
        return FIT
    return TOO_SMALL if result.layouts else NO_VALID_LAYOUT


def _counts_above(request: PlanRequest, max_gpus: int) -> list[int]:
    """Counts larger than the request's: inside one node, then whole nodes (or the user's nodes)."""
    unit, world = _unit(request), request.world_size
    inside = list(range(world + 1, unit)) if unit == request.hardware.gpus_per_node else []
    return inside + [unit * k for k in range(max(1, world // unit + 1), max_gpus // unit + 1)]


def gpus_needed(request: PlanRequest, max_gpus: int = MAX_GPUS_TRIED) -> Optional[int]:
    """The fewest GPUs above the request's count on which some layout fits.

    Memory fit grows with the GPU count, but the rules do not: a count the global batch does not
    split over has no valid layout at all (with data parallelism only, only divisors of the batch
    do). Doubling finds a count that fits, skipping up to ``RULE_REJECTED_SKIPS`` rule-rejected
    counts at each probe; bisection then finds the smallest fitting one above the last too small.
    """
    counts = _counts_above(request, max_gpus)
    status: dict[int, str] = {}

    def probe(index: int) -> str:
        if index not in status:
            status[index] = _probe(request, counts[index])
        return status[index]

    def informative(indices) -> Optional[int]:
        """The first of ``indices`` (at most RULE_REJECTED_SKIPS + 1) the rules do not reject entirely."""
        for i in islice(indices, RULE_REJECTED_SKIPS + 1):
            if probe(i) != NO_VALID_LAYOUT:
                return i
        return None

    low, step, high = -1, 1, None  # counts[low] does not fit (-1: the request itself)
    while high is None:
        start = min(low + step, len(counts) - 1)
        if start <= low:
            return None
        found = informative(range(start, len(counts)))
        if found is not None and status[found] == FIT:
            high = found
        elif start == len(counts) - 1:
            return None
        else:
            low = found if found is not None else low  # rule-rejected counts say nothing about memory
            step *= 2
    while high - low > 1:
        mid = (low + high) // 2
        found = informative(range(mid, high))
        if found is None:
            found = informative(range(mid - 1, low, -1))
        if found is None:
            break  # the counts between are all rule-rejected (as far as the skips reach)
        if status[found] == FIT:
            high = found
        else:
            low = found
    for index in range(high - 1, max(low, high - 1 - MAX_PROBES_BETWEEN), -1):
        if probe(index) == FIT:
            high = index
    return counts[high]


def gpus_that_fit_below(request: PlanRequest) -> Optional[int]:
    """The largest count below the request's on which some layout fits (whole nodes first, then
    counts inside one node), trying at most ``MAX_PROBES_BELOW`` counts: for a request whose own
    count the rules reject (the batch or the heads do not divide it) while fewer GPUs would do."""
    unit, world = _unit(request), request.world_size
    inside = list(range(min(world, unit) - 1, 0, -1)) if unit == request.hardware.gpus_per_node else []
    below = [unit * k for k in range((world - 1) // unit, 0, -1)] + inside
    for gpus in dict.fromkeys(below[:MAX_PROBES_BELOW]):
        if _probe(request, gpus) == FIT:
            return gpus
    return None


def counts_that_fit(request: PlanRequest) -> list[int]:
    """The nearest GPU counts below and above the request's on which some layout fits."""
    return [c for c in (gpus_that_fit_below(request), gpus_needed(request)) if c]


# Rules that reject every layout of a request whatever the GPU count: the precision on this hardware
# (RA-P), a model family the bundled engine does not build (RA-E002).
COUNT_INDEPENDENT_RULES = ("RA-P", "RA-E002")


def count_can_help(codes) -> bool:
    """Whether another GPU count could clear rule rejections with these codes (else no search)."""
    return not any(code.startswith(COUNT_INDEPENDENT_RULES) for code in codes)


def gpus_option(gpus: int, request: PlanRequest) -> str:
    """How to ask for ``gpus`` GPUs on the command line, both ways --gpus reads (total, or per node)."""
    node, unit = request.hardware.gpus_per_node, _unit(request)
    if unit != node:
        return f"--gpus {unit} --nodes {gpus // unit}"
    if gpus > node and gpus % node == 0:
        return f"--gpus {gpus} (or --gpus {node} --nodes {gpus // node})"
    return f"--gpus {gpus}"


def memory_only(rejection_codes) -> bool:
    """Whether only the memory rules (RA-M) rejected layouts: a question of GPU count, like not fitting."""
    codes = list(rejection_codes)
    return bool(codes) and all(code.startswith("RA-M") for code in codes)


def gpus_that_fit(result: Plan) -> list[int]:
    """When nothing fits: the GPU counts of the same type that would. Memory (layouts that do not fit,
    or only RA-M rejections): the fewest found above; rules: the nearest below and above, unless no
    count can help. What `plan` (text and JSON) and `recommend` answer."""
    if result.fitting:
        return []
    req = result.request
    if result.layouts or memory_only(result.rejections):
        return [c for c in (gpus_needed(req),) if c]
    return counts_that_fit(req) if count_can_help(result.rejections) else []
