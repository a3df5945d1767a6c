"""One helper where two places used to spell the same rule, and work passed along instead of redone:
the sizes a fix grows a layout to (memory_fit and sizes), a section of the config schema (trainer.contract.config
and request_overrides), the Bridge command's values read once (bridge_command), and the recipe config
read once (recommend, recommend_config)."""

from __future__ import annotations

import copy

import pytest

from recipe_index import list_recipes
from service.configs.yamlio import OverrideError, parse_overrides
from service.facts import Layout
from service.plan.planner import make_request, plan
from service.recommend.bridge_command import bridge_command, bridge_gaps, bridge_overrides
from service.recommend.config_build import base_config, build_config
from service.recommend.contract import packs_offline
from service.recommend.recommendation import recommend
from service.recommend.request_overrides import request_fields
from service.validate.rules.sizes import grown
from trainer.contract.config import RecipeConfig, section_type

# ---------------------------------------------------------------- the expert mesh follows TP


def test_raising_tp_without_experts_raises_the_expert_tp_with_it():
    assert grown(Layout(tp=2, etp=2), "tp", 4) == {"tp": 4, "etp": 4}


@pytest.mark.parametrize("layout", [Layout(tp=2, ep=2, etp=2), Layout(tp=2, etp=1)])
def test_an_expert_layout_keeps_its_expert_tp_when_tp_grows(layout):
    assert grown(layout, "tp", 4) == {"tp": 4}


@pytest.mark.parametrize("name", ["pp", "cp", "ep"])
def test_other_sizes_grow_alone(name):
    assert grown(Layout(tp=2, etp=2), name, 4) == {name: 4}


# ---------------------------------------------------------------- sections of the schema


def test_section_type_names_each_sections_model_and_none_for_a_value():
    assert section_type("precision") is None
    assert section_type("dataset").__name__ == "DatasetSection"
    assert section_type("peft").__name__ == "PeftSection"  # Optional[PeftSection] is a section too
    sections = {name for name in RecipeConfig.model_fields if section_type(name) is not None}
    assert sections == set(RecipeConfig.model_fields) - {"precision"}


def test_overrides_read_sections_and_values_through_the_schema():
    fields = {"gpu_type": "h100", "seq_length": None, "precision": None, "global_batch_size": None,
              "grad_reduce_dtype": None}
    with pytest.raises(OverrideError, match="expected a mapping"):
        request_fields(parse_overrides(["--dataset", "x"]), dict(fields))
    with pytest.raises(OverrideError, match="takes a single value"):
        request_fields(parse_overrides(["--precision", "{a: 1}"]), dict(fields))


# ---------------------------------------------------------------- the Bridge command, one reading

LIBRARY = {"metadata": {"kind": "library", "model": "llama3-8b"}, "optimizer": {"lr": 3e-4},
           "distributed": {"tp_size": 1, "cp_size": 2}, "dataset": {"preset": "mock", "seq_length": 8192}}


@pytest.mark.parametrize("changes", [
    {"distributed": {"tp_size": 2, "cp_size": 2}},  # a command with a layout override
    {"optimizer": {"lr": None}},  # a gap: no Bridge value for a cleared LR
    {"lr_scheduler": {"decay_steps": 9}},  # a gap with its own reason
])
def test_bridge_command_is_bridge_overrides_and_bridge_gaps_in_one_pass(changes):
    config = copy.deepcopy(LIBRARY)
    for section, values in changes.items():
        config.setdefault(section, {}).update(values)
    args, gaps = bridge_command(LIBRARY, config, [])
    assert gaps == bridge_gaps(LIBRARY, config, [])
    assert args == ([] if gaps else bridge_overrides(LIBRARY, config))


def test_recommend_renders_the_bridge_overrides_it_computed():
    rec = recommend("llama3-8b", 8, "h100", overrides=["--optimizer.lr=1e-4"])
    base = base_config(rec.recipe)
    bridge = rec.commands["megatron_bridge"]
    assert "optimizer.lr=0.0001" in bridge
    assert all(arg in bridge for arg in bridge_overrides(base, rec.config))


# ---------------------------------------------------------------- the recipe config, read once


def _sft_recipe():
    return next(e for e in list_recipes(kind="library") if e.name.startswith("llama3_8b_sft"))


def test_packs_offline_reads_a_loaded_config_as_it_reads_the_recipe():
    entry = _sft_recipe()
    base = base_config(entry)
    before = copy.deepcopy(base)
    for overrides in ([], ["--dataset.packed_sequence", "false"], ["--dataset", "{preset: squad}"]):
        pairs = parse_overrides(overrides)
        assert packs_offline(entry, pairs, base=base) == packs_offline(entry, pairs)
    assert base == before  # the overrides are applied to a copy


def test_build_config_from_a_loaded_base_equals_reading_it_and_leaves_it_unchanged():
    entry = _sft_recipe()
    request = make_request("llama3-8b", 8, "h100", goal="sft", packed_sequence=True)
    best = plan(request).best
    card = request.model
    base = base_config(entry)
    before = copy.deepcopy(base)
    overrides = parse_overrides(["--optimizer.lr=1e-5"])
    given = build_config(card, "sft", "megatron", entry, best, request, overrides, [], base=base)
    read = build_config(card, "sft", "megatron", entry, best, request, overrides, [])
    assert given == read and given[0] is base
    assert base == before
