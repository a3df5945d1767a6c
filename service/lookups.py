"""What the HTTP service may resolve from a client's words.

The CLI resolves a model name as a bundled id, a local ``config.json`` path,
then the Hugging Face Hub. A server must not read files named by its clients,
nor call out to the network on their behalf by default, so here a model is a
bundled id or alias, and a Hub repo id only when the operator opts in with
``RECIPE_ADVISOR_ALLOW_HUB=1`` (still honouring ``HF_HUB_OFFLINE`` and the cache).
"""

from __future__ import annotations

import os

from recipe_index.cards import HardwareCard, ModelCard
from recipe_index.errors import UnknownModelError
from recipe_index.hardware import get_hardware
from recipe_index.models import REPO_ID, find_bundled_model, model_suggestions, resolve_hub_model

ALLOW_HUB_ENV = "RECIPE_ADVISOR_ALLOW_HUB"


def hub_allowed() -> bool:
    return os.environ.get(ALLOW_HUB_ENV, "").strip().lower() in ("1", "true", "yes")


def lookup_model(name: str) -> ModelCard:
    """A bundled card (id, alias, Megatron key or HF id), else a Hub card when allowed; never a path."""
    card = find_bundled_model(name)
    if card is not None:
        return card
    if hub_allowed() and REPO_ID.match(name.strip()) and ".." not in name:
        return resolve_hub_model(name.strip())  # not resolve_model: an org/name may be a folder on the server
    raise UnknownModelError(
        name,
        model_suggestions(name),
        reason="not a bundled model id or alias (GET /v1/models lists them)",
    )


def lookup_hardware(name: str) -> HardwareCard:
    return get_hardware(name)
