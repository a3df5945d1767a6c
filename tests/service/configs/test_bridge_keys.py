"""Megatron Bridge keys the index does not record: on a Megatron config they compare with Bridge's own
value, elsewhere with the schema default; the list lives in a module that imports nothing of the service."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from service.cli.app import main
from service.configs.bridge_keys import BRIDGE_RECIPE_VALUE, UNRECORDED
from service.configs.changes import diff, verdict
from service.recommend.recommendation import recommend
from tests.paths import REPO

MEGATRON = {"distributed": {"strategy": "megatron"}, "optimizer": {"lr": 3e-4}}


@pytest.mark.parametrize("key,value", [("lr_scheduler.warmup_steps", 0), ("lr_scheduler.min_lr", 0.0),
                                       ("rng.seed", 1234), ("optimizer.weight_decay", 0.1),
                                       ("optimizer.betas", [0.9, 0.95]), ("lr_scheduler.warmup_steps", 2000)])
def test_an_unrecorded_key_written_on_megatron_is_a_convergence_change_from_bridges_value(key, value):
    section, leaf = key.split(".")
    new = yaml.safe_load(yaml.safe_dump(MEGATRON))
    new.setdefault(section, {})[leaf] = value
    changes = diff(MEGATRON, new)
    assert [(c.key, c.old, c.new, c.layer) for c in changes] == [(key, BRIDGE_RECIPE_VALUE, value, "convergence")]
    assert "distributed.strategy: megatron" in changes[0].reason
    assert verdict(changes).startswith("new convergence experiment")
    back = diff(new, MEGATRON)  # the other way round: the dropped key runs Bridge's value
    assert [(c.old, c.new, c.layer) for c in back] == [(value, BRIDGE_RECIPE_VALUE, "convergence")]


def test_unrecorded_keys_outside_megatron_compare_with_the_schema_default():
    base = {"distributed": {"strategy": "fsdp2"}}
    assert diff(base, {**base, "rng": {"seed": 1234}}) == []  # our trainer's own default
    assert diff(MEGATRON, {**MEGATRON, "rng": {"seed": 1234}}) != []
    # Written on both sides: compared as values, as for every key.
    both = {**MEGATRON, "rng": {"seed": 7}}
    assert diff(both, both) == []


def test_a_strategy_of_megatron_on_either_side_is_enough():
    fsdp = {"distributed": {"strategy": "fsdp2"}}
    got = {c.key: c.layer for c in diff(fsdp, {**MEGATRON, "lr_scheduler": {"warmup_steps": 0}})}
    assert got["lr_scheduler.warmup_steps"] == "convergence"


def test_the_key_list_lives_in_a_module_that_imports_nothing_of_the_service():
    code = ("import sys, service.configs.bridge_keys, service.recommend.bridge_command as b; "
            "assert b.UNRECORDED is service.configs.bridge_keys.UNRECORDED")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
    source = (REPO / "service" / "configs" / "bridge_keys.py").read_text(encoding="utf-8")
    assert "import service" not in source and "from service" not in source
    assert {"lr_scheduler.warmup_steps", "lr_scheduler.min_lr", "rng.seed"} <= UNRECORDED


def test_recommend_lists_a_bridge_warmup_override_and_counts_it():
    rec = recommend("llama3-8b", 8, "h100", overrides=["--lr_scheduler.warmup_steps", "0"])
    change = next(c for c in rec.changes if c.key == "lr_scheduler.warmup_steps")
    assert (change.old, change.new, change.layer) == (BRIDGE_RECIPE_VALUE, 0, "convergence")
    assert verdict(rec.changes).startswith("new convergence experiment")
    assert "scheduler.lr_warmup_iters=0" in rec.commands["megatron_bridge"]


def test_diff_cli_shows_the_bridge_value(tmp_path, capsys):
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(MEGATRON))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({**MEGATRON, "lr_scheduler": {"min_lr": 0.0}}))
    assert main(["diff", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml"), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["changes"] == [{"key": "lr_scheduler.min_lr", "old": BRIDGE_RECIPE_VALUE, "new": 0.0,
                               "layer": "convergence"}]


def test_leaving_megatron_lists_the_bridge_valued_keys_neither_side_writes():
    from service.configs.bridge_keys import BRIDGE_RECIPE_VALUE, UNRECORDED
    from service.configs.changes import diff, verdict

    megatron = {"model": {"pretrained_model_name_or_path": "llama3-8b"}, "distributed": {"strategy": "megatron"}}
    fsdp2 = {**megatron, "distributed": {"strategy": "fsdp2"}}
    changes = {c.key: c for c in diff(megatron, fsdp2)}
    assert UNRECORDED <= set(changes) and changes["distributed.strategy"].layer == "execution"
    assert all(changes[k].layer == "convergence" and changes[k].old == BRIDGE_RECIPE_VALUE for k in UNRECORDED)
    assert changes["rng.seed"].new == 1234 and verdict(list(changes.values())).startswith("new convergence")
    assert [c.key for c in diff(megatron, {**megatron, "distributed": {"strategy": "megatron", "tp_size": 2}})] \
        == ["distributed.tp_size"]  # on Megatron both sides run the recipe's values
