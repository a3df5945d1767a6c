"""Hardware cards from ``hardware.yaml`` (datasheet figures, each with a source comment there)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

from recipe_index.cards import HardwareCard
from recipe_index.errors import UnknownHardwareError, closest_names

HARDWARE_FILE = Path(__file__).resolve().parent / "hardware.yaml"


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "-")


@lru_cache(maxsize=1)
def _cards() -> tuple[tuple[HardwareCard, ...], dict[str, HardwareCard]]:
    raw = yaml.load(HARDWARE_FILE.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    cards = tuple(HardwareCard.model_validate({"name": name, **fields}) for name, fields in raw.items())
    index: dict[str, HardwareCard] = {}
    for card in cards:
        for key in (card.name, *card.aliases):
            index.setdefault(_key(key), card)
    return cards, index


def list_hardware() -> list[HardwareCard]:
    """Every hardware card, in the order of hardware.yaml."""
    return list(_cards()[0])


def get_hardware(name: str) -> HardwareCard:
    """The card for a GPU type or alias (case-insensitive); UnknownHardwareError lists the known names."""
    cards, index = _cards()
    card = index.get(_key(name or ""))
    if card is None:
        known = [c.name for c in cards]
        raise UnknownHardwareError(name, known, closest_names(_key(name or ""), index, lambda c: c.name, n=3))
    return card
