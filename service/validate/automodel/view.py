"""What AutoModel's rules judge: the recipe's data, the world it is judged at, and what resolved from it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Optional

from recipe_index.cards import HardwareCard, ModelCard
from service.facts import Facts
from service.validate.automodel.dialect import StatedWorld
from service.validate.automodel.facts import Sizes
from service.validate.automodel.targets import walk_targets
from service.validate.automodel.versions import Judged


@dataclass
class RecipeView:
    data: dict
    world: StatedWorld
    sizes: Sizes
    facts: Facts
    model: Optional[ModelCard] = None
    hardware: Optional[HardwareCard] = None
    judged: Judged = Judged(())  # the AutoModel versions the recipe is judged under (schema_rules.judged_for)

    @cached_property
    def targets(self) -> list[tuple[str, str, dict]]:
        """(dotted key, target, mapping) of every `_target_` in the recipe, walked once for all the rules."""
        return list(walk_targets(self.data))

    @property
    def dp(self) -> Optional[int]:
        return self.sizes.dp_at(self.world.size)
