"""Dotted keys (``optimizer.lr``) into nested config mappings.

Pure Python, no torch: the trainer's command-line overrides use it, and so do the
service's overrides and recommender (service may import this module; it imports
nothing from the service).
"""

from __future__ import annotations

import copy
from typing import Any, Iterable, Mapping


class NotASection(ValueError):
    """A dotted key runs through a value that is not a mapping (``precision.x`` when precision is a string)."""

    def __init__(self, key: str, prefix: str, value: Any):
        self.key, self.prefix, self.value = key, prefix, value
        kind = type(value).__name__
        article = "an" if kind[:1].lower() in "aeiou" else "a"
        super().__init__(f"{key}: {prefix} is {article} {kind}, not a section")


def get_dotted(data: Mapping, key: str) -> Any:
    """The value at ``key``, or None when any part of the path is missing or not a mapping."""
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def set_dotted(data: dict, key: str, value: Any, *, none_removes: bool = False) -> None:
    """Set ``key`` to ``value`` in place, creating missing (or null) sections on the way.

    With ``none_removes``, a None value deletes the key instead, so that a default
    applies. Raises NotASection when a section on the path holds a scalar or a list.
    """
    *sections, leaf = key.split(".")
    node = data
    for depth, part in enumerate(sections):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            raise NotASection(key, ".".join(sections[: depth + 1]), child)
        node = child
    if value is None and none_removes:
        node.pop(leaf, None)
    else:
        node[leaf] = value


def with_dotted(data: dict, pairs: Iterable[tuple[str, Any]]) -> dict:
    """A deep copy of ``data`` with every ``(dotted key, value)`` of ``pairs`` set, in order (``data`` is untouched)."""
    out = copy.deepcopy(data)
    for key, value in pairs:
        set_dotted(out, key, value)
    return out
