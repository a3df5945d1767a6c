"""Keys that name a known key by another spelling: the same words once the usual abbreviations are expanded
(``seq_len`` = ``sequence_length``), or within two edits (``seq_lenght``). For free-form sections, where any key
is accepted and a misspelt one is silently left to its default.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Iterable, Optional

# Abbreviations Megatron, AutoModel and torch users write for the same words.
ABBREVIATIONS = {
    "seq": ("sequence",), "len": ("length",), "num": ("number",), "n": ("number",), "nb": ("number",),
    "mbs": ("micro", "batch", "size"), "gbs": ("global", "batch", "size"), "bs": ("batch", "size"),
    "lr": ("learning", "rate"), "max": ("maximum",), "min": ("minimum",), "tok": ("tokenizer",),
    "sz": ("size",), "dir": ("directory",), "ckpt": ("checkpoint",),
}


@lru_cache(maxsize=4096)
def words(key: str) -> tuple[str, ...]:
    """The key's words with every abbreviation expanded."""
    out: list[str] = []
    for part in key.lower().replace("-", "_").split("_"):
        out.extend(ABBREVIATIONS.get(part, (part,)) if part else ())
    return tuple(out)


def edits(a: str, b: str, limit: int = 2) -> int:
    """Damerau-Levenshtein distance (adjacent swaps count one), capped at ``limit + 1``."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    previous2: Optional[list[int]] = None
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        row = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            row[j] = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (ca != cb))
            if previous2 is not None and i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                row[j] = min(row[j], previous2[j - 2] + 1)
        previous2, previous = previous, row
    return min(previous[-1], limit + 1)


def near_miss(key: str, known: Iterable[str]) -> Optional[str]:
    """The known key ``key`` is another spelling of, or None (``key`` itself known, or too far from all).
    Short keys need a closer match: one edit under 6 characters, none under 4."""
    known = tuple(known)
    if key in known or key.startswith("_"):
        return None
    same_words = [k for k in known if words(k) == words(key)]
    if same_words:
        return same_words[0]
    limit = 2 if min(len(key), 99) >= 6 else 1 if len(key) >= 4 else 0
    if not limit:
        return None
    scored = sorted((edits(key, k, limit), k) for k in known if len(k) >= 4)
    return scored[0][1] if scored and scored[0][0] <= limit else None
