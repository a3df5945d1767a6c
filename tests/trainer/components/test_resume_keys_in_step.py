"""The trainer's resume check and `recipe-advisor diff` agree on which keys are convergence.

trainer/contract/resume_checks.py keeps its own key lists (the trainer never imports the service), so nothing but
this test keeps them in step with service/configs/changes.py. Every key of every bundled recipe, schema
defaults included, is judged by both: the trainer's ``_is_convergence`` and ``classify`` for the key
changing away from the recipe's value. The documented exceptions:

- ``validation_dataset.*``: it measures the run, the trained weights do not depend on it, so a resume
  may change it; ``diff`` calls it convergence (the validation losses are not comparable).
- ``NOT_COMPARED`` (``restore_from``, ``metadata``, ``checkpoint.allow_config_change``): the trainer never
  compares them.
- ``RUN_LENGTH_KEYS``: the trainer calls the run's length convergence only where it sets the LR
  schedule's length (``decay_steps`` unset and a decaying schedule); ``diff`` always does.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from service.configs.changes import MISSING, classify, flatten
from tests.paths import REPO
from trainer.contract import resume_checks
from trainer.contract.config import RecipeConfig, parse_config

BUNDLED = sorted((REPO / "recipe_index" / "recipes" / "bundled").glob("*.yaml"))
RESUME_ONLY_EXCEPTIONS = ("validation_dataset",)


def _config(path: Path) -> RecipeConfig:
    return parse_config(yaml.safe_load(path.read_text(encoding="utf-8")))


def _keys(config: RecipeConfig) -> dict[str, object]:
    return flatten(config.model_dump(mode="json", by_alias=True))


def _under(key: str, prefixes: tuple[str, ...]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def _diff_says_convergence(key: str, value: object) -> bool:
    # The key dropped from the recipe: no value-dependent rule (mock data, a check turned on) applies.
    return classify(key, value, MISSING)[0] == "convergence"


def test_there_are_bundled_recipes_to_compare():
    assert len(BUNDLED) >= 3


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: p.stem)
def test_every_key_is_convergence_for_both_or_for_neither(path):
    config = _config(path)
    skipped = (*RESUME_ONLY_EXCEPTIONS, *resume_checks.NOT_COMPARED, *resume_checks.RUN_LENGTH_KEYS)
    disagree = []
    for key, value in sorted(_keys(config).items()):
        if _under(key, skipped):
            continue
        trainer, service = resume_checks._is_convergence(key, config), _diff_says_convergence(key, value)
        if trainer != service:
            disagree.append(f"{key}: trainer {'convergence' if trainer else 'not convergence'}, "
                            f"diff {classify(key, value, MISSING)[0]}")
    assert not disagree, ("trainer/contract/resume_checks.py RESUME_*_KEYS and service/configs/changes.py disagree; "
                          "update the trainer's lists (or this test's documented exceptions):\n" + "\n".join(disagree))


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: p.stem)
def test_the_documented_exceptions_are_real_exceptions(path):
    """Each exception is one on purpose: diff calls it convergence while the resume check lets it pass."""
    config = _config(path)
    for key, value in _keys(config).items():
        if _under(key, RESUME_ONLY_EXCEPTIONS):
            assert _diff_says_convergence(key, value) and not resume_checks._is_convergence(key, config), key


@pytest.mark.parametrize("decay_steps,schedule,convergence", [
    (None, "cosine", True),  # the run's length is the schedule's length
    (None, "constant", False),  # nothing decays: the length only says where the run stops
    (10, "cosine", False),  # decay_steps fixes the schedule: stopping early and resuming equals the straight run
])
def test_the_run_length_is_convergence_exactly_where_it_sets_the_lr_schedule(decay_steps, schedule, convergence):
    raw = yaml.safe_load(BUNDLED[0].read_text(encoding="utf-8"))
    raw["lr_scheduler"] = {**(raw.get("lr_scheduler") or {}), "decay_steps": decay_steps, "schedule": schedule}
    config = parse_config(raw)
    for key in resume_checks.RUN_LENGTH_KEYS:
        assert classify(key, 10, 20)[0] == "convergence"  # diff cannot know the schedule of both sides
        assert resume_checks._is_convergence(key, config) is convergence, key


def test_every_listed_trainer_key_names_a_real_config_key():
    """A renamed schema key would silently drop out of the resume check. (RESUME_EXECUTION_KEYS also
    names builder kwargs, such as model.attn_implementation, that a recipe may leave out; see below.)"""
    keys = set().union(*(_keys(_config(path)) for path in BUNDLED))
    lists = (*resume_checks.RESUME_CONVERGENCE_KEYS, *resume_checks.RUN_LENGTH_KEYS, *resume_checks.NOT_COMPARED)
    assert [entry for entry in lists if not any(_under(key, (entry,)) for key in keys)] == []


@pytest.mark.parametrize("key", resume_checks.RESUME_EXECUTION_KEYS)
def test_what_the_trainer_lets_a_resume_change_is_execution_for_diff_too(key):
    config = _config(BUNDLED[0])
    assert not resume_checks._is_convergence(key, config)
    for old, new in ((True, False), (1, 2), ("a", MISSING)):
        assert classify(key, old, new)[0] == "execution", (key, old, new)
