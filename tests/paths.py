"""Paths the tests read files from, found from this file wherever a test module sits."""

from __future__ import annotations

from pathlib import Path


def _repo_root() -> Path:
    for folder in Path(__file__).resolve().parents:
        if (folder / "pyproject.toml").is_file():
            return folder
    raise RuntimeError("no pyproject.toml above tests/")


REPO = _repo_root()
"""The repository root (the folder holding pyproject.toml)."""
RECIPES = REPO / "recipe_index" / "recipes"
"""The recipe index: bundled/, megatron/, ..."""
BUNDLED_RECIPES = RECIPES / "bundled"
"""The bundled trainer's own recipes."""
