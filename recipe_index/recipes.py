"""The recipe index: every YAML under ``recipes/`` (generated Megatron recipes and hand-written
bundled ones), listed by the ``metadata`` block of each file.

Listing reads only the top-level ``metadata``, ``precision`` and ``dataset`` blocks of each
file (the rest of a recipe is the validator's business), so the whole index lists in tens of
milliseconds and is cached for the life of the process.

The listing of models by family is here too: a model answers to its own family and to the family of
each of its recipes, so ``models --family`` and ``recipes --family`` agree.
"""

from __future__ import annotations

import difflib
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field

from recipe_index.cards import ModelCard
from recipe_index.errors import UnknownRecipeError
from recipe_index.models import bundled_models, find_bundled_model

RECIPES_DIR = Path(__file__).resolve().parent / "recipes"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_LISTED_SECTIONS = ("metadata", "precision", "dataset")
# Dataset presets of the index's vision-language recipes (recipe_index/megatron.py writes them).
VISION_DATASET_PRESETS = frozenset({"cord_v2", "mock_vlm", "energon", "flickr8k"})


class RecipeEntry(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    kind: str  # library | benchmark | bundled
    family: Optional[str] = None
    model: Optional[str] = None  # bundled model id (or the Megatron model key when not bundled)
    mode: str = "pretrain"
    hardware: Optional[str] = None
    num_gpus: Optional[int] = None
    megatron_recipe: Optional[str] = None
    megatron_aliases: tuple[str, ...] = ()
    precision: Optional[str] = None
    precision_recipe: Optional[str] = None  # Bridge's token (fp8cs, fp8mx, ...): the scaling it trains with
    seq_length: Optional[int] = None
    description: Optional[str] = None
    path: Path
    dataset_preset: Optional[str] = Field(default=None, exclude=True)  # for choosing a stand-in, not listed

    @property
    def reads_images(self) -> bool:
        """A vision-language recipe: its dataset is image and text (a text model must not start from it)."""
        return self.dataset_preset in VISION_DATASET_PRESETS


def _top_level_blocks(text: str, wanted: tuple[str, ...]) -> Optional[str]:
    """The text of the wanted top-level blocks, or None when the file is not plain block YAML."""
    keep: list[str] = []
    taking = False
    found = False
    for line in text.splitlines():
        if line[:1] not in ("", " ", "\t", "#", "-"):
            key = line.split(":", 1)[0].strip()
            taking = key in wanted
            found = found or key == "metadata"
        if taking:
            keep.append(line)
    return "\n".join(keep) if found else None


_KEY_LINE = re.compile(r"^( {0,2})([A-Za-z_][\w.\-]*):(?: (.*))?$")
_ITEM_LINE = re.compile(r"^ {2,4}- (.*)$")
_INT = re.compile(r"^[-+]?[0-9]+$")
_FLOAT = re.compile(r"^[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][-+]?[0-9]+)?$")
_INDICATORS = frozenset("'\"{}[]&*!|>%@`#,-?:.+~=<")


def _scalar(token: str) -> Any:
    """A plain YAML 1.1 scalar as PyYAML's SafeLoader reads it; raises ValueError on anything else."""
    token = token.strip()
    if token in ("", "~", "null", "Null", "NULL"):
        return None
    if token in ("true", "True", "TRUE", "false", "False", "FALSE"):
        return token.lower() == "true"
    if token == "[]":
        return []
    if _INT.match(token):
        return int(token)
    if _FLOAT.match(token) and any(c in token for c in ".eE"):
        return float(token)
    if token.startswith("'") and token.endswith("'") and "'" not in token[1:-1]:
        return token[1:-1]
    # Plain strings only; anything YAML might read as another type (dates, 1:20, yes/no) is left to PyYAML.
    if (token[0] not in _INDICATORS and not token[0].isdigit() and " #" not in token and ": " not in token
            and not token.endswith(":") and token.lower() not in ("yes", "no", "on", "off", "y", "n")):
        return token
    raise ValueError(token)


def _parse_simple(block: str) -> dict[str, Any]:
    """Two-level block YAML of plain scalars and lists (what the generator and safe_dump write).

    Raises ValueError on anything richer; the caller then lets PyYAML parse the file. About
    twenty times faster than PyYAML's constructor, which matters when listing 500 recipes.
    """
    data: dict[str, Any] = {}
    section: Optional[dict[str, Any]] = None
    last_key: Optional[str] = None
    for line in block.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        item = _ITEM_LINE.match(line)
        if item and section is not None and last_key is not None and isinstance(section.get(last_key), list):
            section[last_key].append(_scalar(item.group(1)))
            continue
        m = _KEY_LINE.match(line)
        if not m:
            raise ValueError(line)
        indent, key, value = m.groups()
        if not indent:
            if value is None:
                section = data.setdefault(key, {})
            else:
                data[key], section = _scalar(value), None
        elif section is None:
            raise ValueError(line)
        else:
            section[key] = _scalar(value) if value is not None else []
            last_key = key
    return data


def _entry(path: Path) -> RecipeEntry:
    text = path.read_text(encoding="utf-8")
    blocks = _top_level_blocks(text, _LISTED_SECTIONS)
    try:
        if blocks is None:
            raise ValueError("not plain block YAML")
        data: Any = _parse_simple(blocks)
    except ValueError:
        data = yaml.load(blocks if blocks is not None else text, Loader=_LOADER) or {}
    if not isinstance(data, dict):
        data = {}
    meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    dataset = data.get("dataset") if isinstance(data.get("dataset"), dict) else {}
    kind = meta.get("kind") or ("bundled" if "bundled" in path.parts else "library")
    return RecipeEntry(
        name=str(meta.get("name") or path.stem),
        kind=kind,
        family=meta.get("family"),
        model=meta.get("model"),
        mode=meta.get("mode") or "pretrain",
        hardware=meta.get("hardware"),
        num_gpus=meta.get("num_gpus"),
        megatron_recipe=meta.get("megatron_recipe"),
        precision_recipe=meta.get("precision_recipe"),
        megatron_aliases=tuple(meta.get("megatron_aliases") or ()),
        precision=data.get("precision"),
        seq_length=dataset.get("seq_length"),
        description=meta.get("description"),
        path=path,
        dataset_preset=dataset.get("preset") if isinstance(dataset.get("preset"), str) else None,
    )


def recipe_files() -> list[Path]:
    """Every recipe YAML of the index, sorted."""
    return sorted(p for p in RECIPES_DIR.rglob("*.yaml") if p.is_file())


@lru_cache(maxsize=1)
def _index() -> tuple[tuple[RecipeEntry, ...], dict[str, RecipeEntry]]:
    entries = tuple(sorted((_entry(p) for p in recipe_files()), key=lambda e: e.name))
    lookup: dict[str, RecipeEntry] = {}
    for entry in entries:
        lookup.setdefault(entry.name.lower(), entry)
    for entry in entries:  # Megatron names and legacy aliases never shadow an index name
        for alias in (entry.megatron_recipe, *entry.megatron_aliases):
            if alias:
                lookup.setdefault(alias.lower(), entry)
    return entries, lookup


def list_recipes(
    family: Optional[str] = None,
    mode: Optional[str] = None,
    hardware: Optional[str] = None,
    num_gpus: Optional[int] = None,
    kind: Optional[str] = None,
) -> list[RecipeEntry]:
    """Recipes matching every filter given (exact, case-insensitive for strings), sorted by name. The family
    is the recipe's (Megatron Bridge's package name, `llama`) or its model card's (`Llama 3`, as `models`
    lists it)."""
    wanted = {"mode": mode, "hardware": hardware, "kind": kind}
    out = []
    for entry in _index()[0]:
        if any(v is not None and (getattr(entry, k) or "").lower() != v.lower() for k, v in wanted.items()):
            continue
        if family is not None and family.lower() not in _families(entry.family, _model_card(entry)):
            continue
        if num_gpus is not None and entry.num_gpus != num_gpus:
            continue
        out.append(entry)
    return out


def _model_card(entry: RecipeEntry) -> Optional[ModelCard]:
    return find_bundled_model(entry.model) if entry.model else None


def _families(recipe_family: Optional[str], card: Optional[ModelCard]) -> set[str]:
    """The families a recipe answers to, lower case: its own (Megatron Bridge's package name, `llama`)
    and its model card's (`Llama 3`, as `models` lists it)."""
    return {name.lower() for name in (recipe_family, card.family if card else None) if name}


@lru_cache(maxsize=1)
def model_families() -> dict[str, frozenset[str]]:
    """Card id -> the families ``list_recipes(family=...)`` finds the card's recipes by: the card's own,
    and the Megatron Bridge package of each of its recipes (so a family filter on models and on
    recipes agree)."""
    families = {card.id: _families(None, card) for card in bundled_models()}
    for entry in _index()[0]:
        card = _model_card(entry)
        if card is not None:
            families[card.id] |= _families(entry.family, card)
    return {model_id: frozenset(names) for model_id, names in families.items()}


def list_models(family: Optional[str] = None) -> list[ModelCard]:
    """Every bundled model card, sorted by id; with ``family`` (case-insensitive), the cards whose own
    family or whose recipes' family it is, as ``list_recipes(family=...)`` filters (``model_families``).
    Here rather than in recipe_index.models because a model's families include its recipes'."""
    cards = bundled_models()
    if family is None:
        return cards
    wanted = family.strip().lower()
    return [card for card in cards if wanted in model_families().get(card.id, ())]


def get_recipe(name: str) -> RecipeEntry:
    """A recipe by index name, Megatron recipe name or legacy alias; UnknownRecipeError otherwise."""
    entries, lookup = _index()
    entry = lookup.get((name or "").strip().lower())
    if entry is None:
        near = difflib.get_close_matches((name or "").lower(), [e.name.lower() for e in entries], n=3, cutoff=0.6)
        raise UnknownRecipeError(name, near)
    return entry


def recipe_path(name: str) -> Path:
    return get_recipe(name).path


def load_recipe_text(name: str) -> str:
    """The YAML text of a recipe, comments included (for positions and display)."""
    return recipe_path(name).read_text(encoding="utf-8")
