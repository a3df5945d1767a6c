"""A run's step times summarised as the store keeps them: warm-up dropped, median with p10 and p90."""

from __future__ import annotations

import statistics
from typing import Optional, Sequence

from service.runs.schema import MAX_LOSS_POINTS


def warmup_count(samples: int) -> int:
    """Logged samples dropped as warm-up: the first two (allocator, autotuning, compilation) when four or more
    were logged, the first when two or three were, none of a single one (the only figure there is)."""
    if samples >= 4:
        return 2
    return 1 if samples >= 2 else 0


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), of sorted ``values``."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def step_summary(step_times: Sequence[float], steps_per_sample: Optional[Sequence[int]] = None) -> dict:
    """timed_steps and step_time_s / p10 / p90 of the samples after warm-up (each sample one logged window)."""
    if not step_times:
        return {"timed_steps": 0}
    skip = warmup_count(len(step_times))
    kept = list(step_times[skip:])
    counts = list(steps_per_sample[skip:]) if steps_per_sample else [1] * len(kept)
    return {"timed_steps": sum(counts), "step_time_s": statistics.median(kept),
            "step_time_p10_s": percentile(kept, 0.1), "step_time_p90_s": percentile(kept, 0.9)}


def thinned(points: list[tuple[int, float]], limit: int = MAX_LOSS_POINTS) -> list[tuple[int, float]]:
    """At most ``limit`` points, evenly spaced, the last one kept."""
    if len(points) <= limit:
        return points
    stride = len(points) / limit
    picked = [points[int(i * stride)] for i in range(limit - 1)]
    return picked + [points[-1]]
