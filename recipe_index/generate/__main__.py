"""``python -m recipe_index.generate [--models-dir DIR] [--recipes-dir DIR]``: refresh the bundled index.

Model cards are written first: which recipes are generated depends on which models are bundled.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from recipe_index.generate import INDEX_DIR


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recipe_index.generate", description=__doc__)
    parser.add_argument("--models-dir", type=Path, default=INDEX_DIR / "models")
    parser.add_argument("--recipes-dir", type=Path, default=INDEX_DIR / "recipes" / "megatron")
    args = parser.parse_args(argv)

    from recipe_index.generate.model_files import GenerationError, write_model_files
    from recipe_index.generate.recipe_files import write_recipe_files
    from recipe_index.models import _bundled

    try:
        models = write_model_files(args.models_dir)
    except GenerationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    _bundled.cache_clear()  # recipes are selected by the cards just written
    recipes = write_recipe_files(args.recipes_dir)
    print(f"wrote {len(models)} model cards to {args.models_dir} and {len(recipes)} recipes to {args.recipes_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
