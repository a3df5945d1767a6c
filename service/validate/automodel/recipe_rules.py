"""AutoModel's recipe schema: the recipe class, the keys its strict sections take, their values, its targets."""

from __future__ import annotations

from difflib import get_close_matches
from typing import Any, Iterator, Optional

from service.validate.automodel.facts import section
from service.validate.automodel.schema import (
    DEFAULT_STRATEGY,
    DIST_ENV_KEYS,
    NONE_WORDS,
    RECIPE_CLASSES,
    SIZE_KEYS,
    STEP_SCHEDULER_POSITIVE,
    STRATEGIES,
)
from service.validate.automodel.schema_rules import across, recipe_missing, strict_keys_check, target_keywords_check
from service.validate.automodel.targets import KNOWN_TARGETS, importable_by_default, keywords
from service.validate.automodel.versions import schema
from service.validate.automodel.view import RecipeView
from service.validate.rules.registry import Violation, automodel_rule

_RECIPE_PACKAGE = "nemo_automodel.recipes."


def _recipe_target(recipe: Any) -> Optional[str]:
    if isinstance(recipe, dict):
        recipe = recipe.get("_target_")
    return recipe.strip() if isinstance(recipe, str) else None


@automodel_rule("RA-A001", "error", "recipe", "`recipe` names an AutoModel recipe class (required from the CLI "
                "refactor, 2026-04-01)", "AutoModel cli/app.py main (`recipe:` a class name, a "
                "nemo_automodel.recipes path or a `_target_`; commit 35b5ed9c9)")
def recipe_class_known(view: RecipeView) -> Iterator[Violation]:
    raw = view.data.get("recipe")
    target = _recipe_target(raw)
    if target is None:
        yield from across(view, recipe_missing)  # before 35b5ed9c9 the command line named the recipe
        return
    name = target.rpartition(".")[2]
    if name in RECIPE_CLASSES and (target == name or target.startswith(_RECIPE_PACKAGE)):
        return
    close = get_close_matches(name, sorted(RECIPE_CLASSES), n=1)
    yield Violation(f"recipe {target!r} is not an AutoModel recipe class",
                    f"use {close[0]}" if close else "use TrainFinetuneRecipeForNextTokenPrediction")


def _unknown(key: str, options) -> Violation:
    name = key.rpartition(".")[2]
    close = get_close_matches(name, sorted(options), n=3)
    hint = f"did you mean {', '.join(close)}?" if close else f"known keys: {', '.join(sorted(options))}"
    return Violation(f"unknown key `{key}`: AutoModel refuses it", f"{hint} (or remove it)", key=key)


@automodel_rule("RA-A002", "error", "distributed", "known keys in the sections AutoModel checks at the recipe's "
                "version (distributed for its strategy, pipeline, moe, step_scheduler), and dist_env",
                "AutoModel's strategy config classes (_STRATEGY_MAP), PipelineConfig, MoEParallelizerConfig, "
                "StepScheduler by version (recipe_index/data/automodel_schema.json); initialize_distributed")
def keys_known(view: RecipeView) -> Iterator[Violation]:
    yield from across(view, strict_keys_check)
    for key in section(view.data, "dist_env"):
        if key not in DIST_ENV_KEYS:
            yield _unknown(f"dist_env.{key}", DIST_ENV_KEYS)


def _bad_size(value: Any, nullable: bool) -> bool:
    if value is None or (nullable and value in NONE_WORDS):
        return False
    return isinstance(value, bool) or not isinstance(value, int) or value < 1


@automodel_rule("RA-A003", "error", "distributed", "values have the type and range AutoModel takes",
                "AutoModel ParallelismSizes, strategy names, StepScheduler")
def values_valid(view: RecipeView) -> Iterator[Violation]:
    dist = section(view.data, "distributed")
    for key in SIZE_KEYS:
        if key in dist and _bad_size(dist[key], nullable=True):
            yield Violation(f"distributed.{key} must be a whole number of at least 1 (got {dist[key]!r})",
                            "use a positive integer" + (", or none to infer it" if key.startswith("dp") else ""),
                            key=f"distributed.{key}")
    strategy = dist.get("strategy", DEFAULT_STRATEGY)
    if not isinstance(strategy, str) or strategy.lower() not in STRATEGIES | schema().strategies():
        yield Violation(f"distributed.strategy {strategy!r} is not an AutoModel strategy",
                        f"use one of {sorted(STRATEGIES)}", key="distributed.strategy")
    scheduler = section(view.data, "step_scheduler")
    for key in ("global_batch_size", "local_batch_size"):
        if key not in scheduler:
            yield Violation(f"step_scheduler.{key} is missing: AutoModel's step scheduler needs it",
                            "add the key", key=f"step_scheduler.{key}" if scheduler else "step_scheduler")
    for key in STEP_SCHEDULER_POSITIVE:
        if key in scheduler and _bad_size(scheduler[key], nullable=key not in ("global_batch_size",
                                                                              "local_batch_size")):
            yield Violation(f"step_scheduler.{key} must be a whole number above 0 (got {scheduler[key]!r})",
                            "use a positive integer", key=f"step_scheduler.{key}")


@automodel_rule("RA-A011", "error", "", "a `_target_` is called only with keywords its signature takes at the recipe's "
                "version (never imported)", "AutoModel's source by version, read with ast "
                "(recipe_index/data/automodel_schema.json); torch's and torchdata's signatures")
def target_keywords(view: RecipeView) -> Iterator[Violation]:
    from service.validate.rules.targets import TargetNotFound, unknown_kwargs

    yield from across(view, target_keywords_check)
    for key, target, node in view.targets:
        names = KNOWN_TARGETS.get(target, None)
        if names is not None:
            bad = [(k, get_close_matches(k, sorted(names), n=3)) for k in keywords(node) if k not in names]
        elif target.startswith("torch."):
            try:
                bad = unknown_kwargs(target, keywords(node))
            except (TargetNotFound, SyntaxError, OSError):
                continue  # not installed here, or not statically readable: the name alone is judged
        else:
            continue
        for kwarg, close in bad:
            hint = f"did you mean {', '.join(close)}?" if close else "remove it"
            yield Violation(f"{target} takes no keyword `{kwarg}`", hint, key=f"{key}.{kwarg}")


@automodel_rule("RA-A012", "warning", "", "a `_target_` AutoModel imports by default (its loader's allowed "
                "packages)", "AutoModel config loader (_resolve_target)")
def target_importable(view: RecipeView) -> Iterator[Violation]:
    for key, target, _ in view.targets:
        if key == "recipe":
            continue  # RA-A001
        if not importable_by_default(target):
            yield Violation(f"`{target}` is outside the packages AutoModel's loader imports by default "
                            "(nemo_automodel, torch, transformers, torchdata, torchao, liger_kernel): it must be "
                            "installed where the recipe runs; never imported here",
                            f"install {target.split('.', 1)[0]} on the training hosts, or use a target from those "
                            "packages", key=f"{key}._target_")
