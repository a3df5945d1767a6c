"""Recipes: ``setup()`` builds the components from a config, ``run_train_validation_loop()`` trains.

A config names its recipe in ``recipe._target_`` (default ``trainer.recipes.TrainFinetuneRecipe``).
"""

from trainer.recipes.base_recipe import BaseRecipe
from trainer.recipes.train_ft import TrainFinetuneRecipe

__all__ = ["BaseRecipe", "TrainFinetuneRecipe"]
