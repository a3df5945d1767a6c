"""The bundled recipe index: model cards, hardware cards and recipes, with lookup and hub resolution.

Data only: nothing here imports torch, and huggingface_hub is imported only when a model
has to be fetched from the Hub.
"""

from recipe_index.cards import HardwareCard, ModelCard
from recipe_index.errors import ModelConfigError, UnknownHardwareError, UnknownModelError, UnknownRecipeError
from recipe_index.hardware import get_hardware, list_hardware
from recipe_index.megatron import convert_record
from recipe_index.models import find_bundled_model, model_suggestions, resolve_model
from recipe_index.params import ParamCounts, param_counts, parse_param_count
from recipe_index.recipes import RecipeEntry, get_recipe, list_models, list_recipes, load_recipe_text, recipe_path

__all__ = [
    "HardwareCard",
    "ModelCard",
    "ModelConfigError",
    "ParamCounts",
    "RecipeEntry",
    "UnknownHardwareError",
    "UnknownModelError",
    "UnknownRecipeError",
    "convert_record",
    "find_bundled_model",
    "get_hardware",
    "get_recipe",
    "list_hardware",
    "list_models",
    "list_recipes",
    "load_recipe_text",
    "model_suggestions",
    "param_counts",
    "parse_param_count",
    "recipe_path",
    "resolve_model",
]
