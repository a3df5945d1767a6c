"""The HTTP Accept header (RFC 9110 12.5.1): which of the service's media types a client takes, and how much."""

from __future__ import annotations

import math


def media_ranges(accept: str) -> list[tuple[str, float]]:
    """(media range, q) of each entry of an Accept header; a q that is no number counts as 0."""
    ranges = []
    for media_range in accept.lower().split(","):
        kind, *params = (part.strip() for part in media_range.split(";"))
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
                q = min(max(q, 0.0), 1.0) if math.isfinite(q) else 0.0  # `q=nan` is no weight
        if kind:
            ranges.append((kind, q))
    return ranges


def quality(ranges: list[tuple[str, float]], media_type: str) -> tuple[float, int]:
    """(q, specificity) of ``media_type`` under the Accept header's ranges: the most specific range that
    matches decides (RFC 9110 12.5.1: `application/json;q=0` beats `*/*`); (0, -1) when none does."""
    main_type = media_type.split("/")[0]
    best = (0.0, -1)
    for kind, q in ranges:
        specificity = 2 if kind == media_type else 1 if kind == f"{main_type}/*" else 0 if kind == "*/*" else -1
        if specificity > best[1] or (specificity == best[1] >= 0 and q > best[0]):
            best = (q, specificity)
    return best
