"""NeMo AutoModel's recipe dialect: detection, the world it is judged at, its schema and mesh rules, mutants."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from service.validate.automodel.dialect import AUTOMODEL, NATIVE, detect, stated_world
from service.validate.document import validate_file, validate_text
from tests.cli import run_cli

RECIPES = Path(__file__).parent / "automodel_recipes"
LLAMA = RECIPES / "llama3_2_1b_squad.yaml"
MOE = RECIPES / "qwen3_moe_30b_ep8.yaml"
HEADER = "# To run it:\n#   automodel recipe.yaml --nproc-per-node 8\n"
# The AutoModel rule codes the tests below make fire (tests/service/validate/test_rules.py checks every code has one).
COVERED = {f"RA-A{n:03d}" for n in range(1, 14)}


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("RECIPE_ADVISOR_ALLOW_HUB", raising=False)


def errors(report) -> list[tuple[str, str]]:
    return [(f.code, f.key) for f in report.findings if f.severity == "error"]


def mutated(path: Path, edit, header: str = HEADER) -> str:
    data = copy.deepcopy(yaml.safe_load(path.read_text()))
    edit(data)
    return header + yaml.safe_dump(data, sort_keys=False)


def test_detects_automodel_from_the_recipe_class_dist_env_or_targets():
    assert detect({"recipe": "TrainFinetuneRecipeForNextTokenPrediction"}) == AUTOMODEL
    assert detect({"recipe": {"_target_": "nemo_automodel.recipes.llm.train_ft.X"}}) == AUTOMODEL
    assert detect({"dist_env": {"backend": "nccl"}}) == AUTOMODEL
    assert detect({"model": {"_target_": "nemo_automodel.NeMoAutoModelForCausalLM.from_pretrained"}}) == AUTOMODEL
    assert detect({"recipe": {"_target_": "trainer.recipes.TrainFinetuneRecipe"}, "model": {}}) == NATIVE


@pytest.mark.parametrize("path", [LLAMA, MOE], ids=lambda p: p.stem)
def test_recipes_in_automodels_dialect_have_no_errors(path):
    report = validate_file(str(path))
    assert errors(report) == []
    assert not [f for f in report.findings if f.code in ("RA-C001", "RA-C002", "RA-S001", "RA-E004")]


def test_batch_not_divisible_names_the_global_batch():
    report = validate_file(str(RECIPES / "batch_not_divisible.yaml"))
    assert errors(report) == [("RA-A009", "step_scheduler.global_batch_size")]
    finding = report.findings[0]
    assert "4·8 = 32" in finding.message and "32" in finding.fix


@pytest.mark.parametrize("edit, gpus, code, key", [
    # Qwen3-30B-A3B: 32 attention heads, 4 KV heads, 128 experts
    (lambda d: d["distributed"].update(tp_size=8), None, "RA-A008", "distributed.tp_size"),
    (lambda d: d["distributed"].update(tp_size=3), 24, "RA-A007", "distributed.tp_size"),
    (lambda d: d["distributed"].update(ep_size=3), 24, "RA-L008", "distributed.ep_size"),
    (lambda d: d["distributed"].update(ep_size=16), None, "RA-A005", "distributed.ep_size"),
    (lambda d: d["step_scheduler"].update(global_batch_size=36), None, "RA-A009", "step_scheduler.global_batch_size"),
    (lambda d: d["distributed"].update(pp_size=2), None, "RA-A010", "distributed.pp_size"),
    (lambda d: d["distributed"].update(dp_replicate_size=8), None, "RA-A006", "distributed.dp_replicate_size"),
    (lambda d: d["distributed"].update(zero_dp_strategy=3), None, "RA-A002", "distributed.zero_dp_strategy"),
    (lambda d: d["step_scheduler"].update(ckpt_every=5), None, "RA-A002", "step_scheduler.ckpt_every"),
    (lambda d: d["distributed"].update(strategy="zero3"), None, "RA-A003", "distributed.strategy"),
    (lambda d: d["loss_fn"].update(chunk_size=4), None, "RA-A011", "loss_fn.chunk_size"),
    (lambda d: d.update(recipe="TrainFinetuneRecipe"), None, "RA-A001", "recipe"),
    (lambda d: d["distributed"].update(pp_size=2, ep_size=4, pipeline={"pp_microbatch_size": 1})
     or d["step_scheduler"].update(local_batch_size=1, global_batch_size=8), None, "RA-A013",
     "step_scheduler.local_batch_size"),
], ids=["tp-kv-heads", "tp-heads", "ep-experts", "ep-mesh", "gbs", "pp-no-pipeline", "dp-replicate",
        "strategy-option", "scheduler-key", "strategy", "loss-kwarg", "recipe-class", "pp-microbatches"])
def test_mutants_are_caught_with_the_key_named(edit, gpus, code, key):
    report = validate_text(mutated(MOE, edit), "mutant.yaml", gpus=gpus)
    assert (code, key) in errors(report), report.findings


def test_world_comes_from_flags_then_the_header_then_the_ci_block_then_eight():
    data = {"ci": {"nodes": 4}}
    assert stated_world("#   automodel x.yaml --nproc-per-node 2\n", data).size == 8  # 2 per node x ci.nodes 4
    assert stated_world("# torchrun --nnodes=2 --nproc-per-node=8 -m app\n", data).size == 16
    assert stated_world("recipe: X\n", data).size == 32  # AutoModel's CI runs it on ci.nodes nodes of 8
    assert stated_world("recipe: X\n", {"ci": {"nodes": 4, "cluster_tag": "gb200"}}).size == 16  # 4 GPUs a node
    assert stated_world("recipe: X\n", {}).size == 8
    assert stated_world("recipe: X\n", {"ci": {"nproc_per_node": 1, "nodes": 1}}).size == 1
    assert stated_world("#   automodel x.yaml --nproc-per-node 2\n", data, gpus=16).size == 16
    assert stated_world("", data, gpus=4, nodes=2).size == 8


def test_a_layout_bigger_than_the_world_names_the_smallest_world_it_needs():
    text = mutated(MOE, lambda d: d["distributed"].update(pp_size=4, ep_size=32, pipeline={}))
    mesh = [f for f in validate_text(text, "big.yaml").findings if f.code in ("RA-A004", "RA-A005")]
    assert [f.code for f in mesh] == ["RA-A005"]
    assert "smallest world this layout needs is 128" in mesh[0].message
    assert not [c for c, _ in errors(validate_text(text, "big.yaml", gpus=128)) if c in ("RA-A004", "RA-A005")]
    odd = mutated(MOE, lambda d: d["distributed"].update(tp_size=3, ep_size=1), header="")
    finding = next(f for f in validate_text(odd, "odd.yaml").findings if f.code == "RA-A004")
    assert "8 GPUs, the default" in finding.message and "smallest world this layout needs is 3" in finding.message


def test_an_unknown_hub_id_is_reported_offline_without_asking_the_hub(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")  # offline by default all the same: the cache only
    called = []
    monkeypatch.setattr("recipe_index.models._hub_unreachable", lambda repo: called.append(repo))
    text = mutated(LLAMA, lambda d: d["model"].update(pretrained_model_name_or_path="no-such-org/no-such-model"))
    report = validate_text(text, "unknown.yaml")
    finding = next(f for f in report.findings if f.code == "RA-C009")
    assert finding.severity == "warning" and "cache only" in finding.message
    assert called == []


def test_native_configs_keep_their_own_rules():
    native = "recipe:\n  _target_: trainer.recipes.TrainFinetuneRecipe\nmodel:\n  pretrained_model_name_or_path: x\n"
    assert detect(yaml.safe_load(native)) == NATIVE
    forced = validate_text(LLAMA.read_text(), "llama.yaml", dialect=NATIVE)
    assert any(f.code == "RA-C001" for f in forced.findings)  # read as this product's schema, it is foreign


def test_cli_dialect_flag_and_rule_table(capsys):
    code, out, _ = run_cli(capsys, "validate", "--dialect", "automodel", str(LLAMA))
    assert code == 0 and "0 error(s)" in out
    code, out, _ = run_cli(capsys, "validate", "--list-rules")
    assert "RA-A009" in out and "RA-A004" in out


def test_targets_outside_automodels_packages_warn_and_names_it_never_had_are_errors():
    def edit(d):
        d["optimizer"]["_target_"] = "flashoptim.FlashAdamW"
        d["loss_fn"]["_target_"] = "nemo_automodel.components.loss.masked_ce.MaskedCrossEntropyy"

    findings = validate_text(mutated(LLAMA, edit), "targets.yaml").findings
    assert [(f.severity, f.key) for f in findings if f.code == "RA-A012"] == [("warning", "optimizer._target_")]
    missing = [f for f in findings if f.code == "RA-A014"]
    assert [(f.severity, f.key) for f in missing] == [("error", "loss_fn._target_")]
    assert "nemo_automodel.components.loss.masked_ce.MaskedCrossEntropy" in missing[0].fix


def test_the_ci_blocks_overrides_apply_where_the_world_is_its_own():
    """AutoModel's CI runs a recipe with ci.local_batch_size over the step scheduler's (tests/ci_tests/README.md)."""
    def edit(d):
        d["ci"] = {"nodes": 2, "local_batch_size": 4}
        d["step_scheduler"].update(global_batch_size=64, local_batch_size=1)
    text = mutated(MOE, edit, header="")
    assert [c for c, _ in errors(validate_text(text, "ci.yaml"))] == []  # 4 x dp 16 = 64 at 16 GPUs
    bad = text.replace("global_batch_size: 64", "global_batch_size: 96")
    (finding,) = [f for f in validate_text(bad, "ci.yaml").findings if f.code == "RA-A009"]
    assert "4·16 = 64" in finding.message and "ci.nodes" in finding.message
