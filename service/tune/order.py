"""Which variant to measure next: the estimate, corrected by what this tune has measured so far.

The first pass measures the recommended layout and one layout per parallel shape in the estimate's order. After
it, every trial is a choice among the remaining variants (micro batch, recompute, data-parallel strategy, fast
path), and the trials already run say where the estimate is wrong on this machine: a shape measured 1.5x faster
than estimated, or DDP faster than FSDP2 where the estimate put them level. ``next_variant`` picks the variant
whose corrected estimate is fastest.

The correction is a small additive model of the estimate's error in log space,

    log(measured / estimated) = intercept + effect[shape] + effect[strategy] + effect[recompute]
                                + effect[micro batch] + effect[fast paths]

fitted on this tune's measured trials by backfitting, with a ridge of ``RIDGE`` trials' weight pulling each
effect towards 0 (the intercept is free: the machine's overall speed does not change the order). A setting no
trial has measured keeps effect 0, so it is ranked by the estimate alone, neither favoured nor penalised. The
ridge is a prior (one trial's worth of belief that the estimate is right), not a fitted constant.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Callable, Hashable, Sequence

from service.tune.candidates import FAST_PATH, Candidate, shape_of

RIDGE = 1.0
SWEEPS = 25

FACTORS: tuple[Callable[[Candidate], Hashable], ...] = (
    lambda c: ("shape", shape_of(c.row)),
    lambda c: ("strategy", c.row.strategy),
    lambda c: ("recompute", c.row.recompute),
    lambda c: ("micro batch", c.row.micro_batch_size),
    lambda c: ("fast paths", c.fast_paths),
)


def levels(candidate: Candidate) -> list[Hashable]:
    return [factor(candidate) for factor in FACTORS]


def fit_correction(measured: Sequence[tuple[Candidate, float]]) -> tuple[float, dict[Hashable, float]]:
    """(intercept, effect per setting) of log(measured / estimated) over ``measured`` (candidate, tokens/s/GPU)."""
    rows = [(levels(c), math.log(speed / c.estimated_tokens_per_s_per_gpu)) for c, speed in measured
            if speed > 0 and c.estimated_tokens_per_s_per_gpu > 0]
    if not rows:
        return 0.0, {}
    effects: dict[Hashable, float] = defaultdict(float)
    intercept = 0.0
    for _ in range(SWEEPS):
        intercept = statistics.fmean(y - sum(effects[lv] for lv in lvs) for lvs, y in rows)
        for position in range(len(FACTORS)):
            sums: dict[Hashable, float] = defaultdict(float)
            counts: dict[Hashable, int] = defaultdict(int)
            for lvs, y in rows:
                others = sum(effects[lv] for i, lv in enumerate(lvs) if i != position)
                sums[lvs[position]] += y - intercept - others
                counts[lvs[position]] += 1
            for level, total in sums.items():
                effects[level] = total / (counts[level] + RIDGE)
    return intercept, dict(effects)


def corrected_estimate(candidate: Candidate, intercept: float, effects: dict[Hashable, float]) -> float:
    """The candidate's estimated tokens/s/GPU, corrected by the fitted effects of its settings."""
    shift = intercept + sum(effects.get(level, 0.0) for level in levels(candidate))
    return candidate.estimated_tokens_per_s_per_gpu * math.exp(shift)


def next_variant(remaining: Sequence[Candidate], measured: Sequence[tuple[Candidate, float]]) -> Candidate:
    """The remaining variant predicted fastest; the candidates' own order breaks ties (and decides when nothing
    is measured yet). Fast-path variants come last, as the candidates order them: their compile time falls outside
    the timed steps, so a measured gain is worth less than the same gain from a layout."""
    intercept, effects = fit_correction(measured)
    return max(enumerate(remaining),
               key=lambda pair: (pair[1].kind != FAST_PATH, corrected_estimate(pair[1], intercept, effects),
                                 -pair[0]))[1]
