"""What AutoModel's rules judge: the recipe's data, the world it is judged at, and what resolved from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from recipe_index.cards import HardwareCard, ModelCard
from service.facts import Facts
from service.validate.automodel.dialect import StatedWorld
from service.validate.automodel.facts import Sizes


@dataclass
class RecipeView:
    data: dict
    world: StatedWorld
    sizes: Sizes
    facts: Facts
    model: Optional[ModelCard] = None
    hardware: Optional[HardwareCard] = None

    @property
    def dp(self) -> Optional[int]:
        return self.sizes.dp_at(self.world.size)
