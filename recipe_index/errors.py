"""Errors of the index lookups. Each message names what was asked, why it failed and what to do."""

from __future__ import annotations

import difflib
from typing import Callable, Mapping, Sequence, TypeVar

Card = TypeVar("Card")


def closest_names(query: str, index: Mapping[str, Card], name_of: Callable[[Card], str], n: int,
                  cutoff: float = 0.5) -> list[str]:
    """The names of the ``n`` cards whose lookup keys are closest to ``query``, best first, each once.

    An index holds every alias of a card as its own key, so ``h1000`` is close to both ``h100`` and
    ``h100-sxm``; matching all keys before de-duplicating keeps "Did you mean h100, h100, r100?"
    from repeating a card and still fills ``n`` distinct names.
    """
    close = difflib.get_close_matches(query, list(index), n=len(index), cutoff=cutoff)
    return list(dict.fromkeys(name_of(index[key]) for key in close))[:n]


class UnknownModelError(ValueError):
    """A model name that is neither bundled, nor a local config.json, nor reachable on the hub."""

    def __init__(self, name: str, suggestions: Sequence[str] = (), reason: str = ""):
        self.name = name
        self.suggestions = list(suggestions)
        self.reason = reason
        # What went wrong, without the advice (the service and RA-C009 give their own).
        self.problem = f"unknown model {name!r}" + (f" ({reason})" if reason else "")
        hint = f" Closest bundled ids: {', '.join(self.suggestions)}." if self.suggestions else ""
        super().__init__(
            f"{self.problem}.{hint} Pass a bundled id (`recipe-advisor models`), "
            "a path to a config.json or its folder, or a Hugging Face repo id with network access "
            "(or a warm Hugging Face cache when HF_HUB_OFFLINE=1)."
        )


class ModelConfigError(ValueError):
    """A config.json that exists but cannot describe a model (missing sizes, not JSON)."""

    def __init__(self, source: str, problem: str):
        self.source = source
        self.problem = problem
        super().__init__(f"{source}: {problem}")


class UnknownHardwareError(ValueError):
    """A GPU type that has no hardware card."""

    def __init__(self, name: str, known: Sequence[str] = (), suggestions: Sequence[str] = ()):
        self.name = name
        self.known = list(known)
        self.suggestions = list(suggestions)
        near = f" Did you mean {', '.join(self.suggestions)}?" if self.suggestions else ""
        super().__init__(f"unknown GPU type {name!r}.{near} Known: {', '.join(self.known)}.")


class UnknownRecipeError(ValueError):
    """A recipe name that is not in the bundled index."""

    def __init__(self, name: str, suggestions: Sequence[str] = ()):
        self.name = name
        self.suggestions = list(suggestions)
        near = f" Closest: {', '.join(self.suggestions)}." if self.suggestions else ""
        super().__init__(f"unknown recipe {name!r}.{near} List them with `recipe-advisor recipes`.")
