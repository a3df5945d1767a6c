"""Generators that refresh the bundled index from ``shared/reference`` (run ``python -m recipe_index.generate``).

The generated files are committed; tests regenerate into a temporary folder and compare, so
the index never drifts from its generator.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

INDEX_DIR = Path(__file__).resolve().parents[1]


def reference_dir() -> Path:
    """shared/reference: $RECIPE_ADVISOR_SHARED/reference, else the shared/ beside the checkout."""
    env = os.environ.get("RECIPE_ADVISOR_SHARED")
    shared = Path(env) if env else INDEX_DIR.parent.parent / "shared"
    return shared / "reference"


@lru_cache(maxsize=2)
def _load(name: str, folder: str) -> Any:
    return json.loads((Path(folder) / name).read_text(encoding="utf-8"))


def load_reference(name: str) -> Any:
    """A reference JSON file (model_cards.json, mbridge_recipes.json), parsed once per process."""
    return _load(name, str(reference_dir()))
