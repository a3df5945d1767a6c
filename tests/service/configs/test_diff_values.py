"""When two written values are the same setting for diff: defaults written out, NaN, another name of one
model or tokenizer, list order, numbers of another type, sections replaced by values, index metadata."""

from __future__ import annotations

from service.cli.app import main
from service.configs.changes import diff, verdict
from tests.paths import RECIPES


def test_an_optimizers_own_defaults_written_out_are_no_change():
    from service.configs.changes import diff
    from trainer.contract.overrides import load_yaml_file

    base = load_yaml_file(RECIPES / "bundled" / "tiny_llama_pretrain.yaml")
    written = {**base, "optimizer": {**base["optimizer"], "amsgrad": False, "maximize": False, "eps": 1e-8}}
    assert diff(base, written) == []
    other = {**base, "optimizer": {**base["optimizer"], "eps": 1e-6, "amsgrad": True}}
    assert [(c.key, c.layer) for c in diff(base, other)] == [("optimizer.amsgrad", "convergence"),
                                                             ("optimizer.eps", "convergence")]


def test_adamw_default_betas_written_out_is_no_change():
    base = {"optimizer": {"_target_": "torch.optim.AdamW", "lr": 1e-4}}
    assert diff(base, {"optimizer": {**base["optimizer"], "betas": [0.9, 0.999], "eps": 1e-8}}) == []
    assert [c.key for c in diff(base, {"optimizer": {**base["optimizer"], "betas": [0.9, 0.95]}})] == [
        "optimizer.betas"]


def test_a_bool_or_a_float_for_a_strict_integer_is_a_change_but_not_for_a_float_setting():
    base = {"distributed": {"tp_size": 1}, "step_scheduler": {"global_batch_size": 32},
            "optimizer": {"_target_": "torch.optim.AdamW", "weight_decay": 0}}
    new = {"distributed": {"tp_size": True}, "step_scheduler": {"global_batch_size": 32.0},
           "optimizer": {"_target_": "torch.optim.AdamW", "weight_decay": 0.0}}
    assert {c.key for c in diff(base, new)} == {"distributed.tp_size", "step_scheduler.global_batch_size"}
    # a bool setting reads 1 as true: no change there
    assert diff({"dataloader": {"shuffle": 1}, "checkpoint": {"enabled": 1}},
                {"dataloader": {"shuffle": True}, "checkpoint": {"enabled": True}}) == []


def test_a_section_replaced_by_a_value_is_one_change_shown_whole():
    [change] = diff({"distributed": {"tp_size": 2}}, {"distributed": 5})
    assert (change.key, change.old, change.new) == ("distributed", {"tp_size": 2}, 5)
    # null is no section: the keys written on the other side are the changes
    [change] = diff({"restore_from": None}, {"restore_from": {"path": "/ckpt/epoch_0_step_4"}})
    assert (change.key, change.old, change.new) == ("restore_from.path", "<absent>", "/ckpt/epoch_0_step_4")


def test_index_metadata_is_not_a_change_except_the_labels_that_are_convergence():
    changes = diff({"metadata": {"name": "a", "description": "x"}}, {"metadata": {"name": "b", "description": "y"}})
    assert changes == [] and verdict(changes) is None
    [change] = diff({"metadata": {"name": "a", "precision_recipe": "fp8cs"}},
                    {"metadata": {"name": "a", "precision_recipe": "fp8mx"}})
    assert (change.key, change.layer) == ("metadata.precision_recipe", "convergence")


def test_lora_target_modules_in_another_order_are_no_change():
    base = {"peft": {"target_modules": ["q_proj", "v_proj"]}}
    assert diff(base, {"peft": {"target_modules": ["v_proj", "q_proj"]}}) == []
    assert [c.key for c in diff(base, {"peft": {"target_modules": ["q_proj", "k_proj"]}})] == ["peft.target_modules"]


def test_nan_equals_nan(tmp_path, capsys):
    path = tmp_path / "n.yaml"
    path.write_text("a: .nan\nb: [.nan, 1]\noptimizer: {lr: .nan}\n")
    assert main(["diff", str(path), str(path)]) == 0
    assert capsys.readouterr().out.startswith("0 change(s)")
    assert [c.key for c in diff({"a": float("nan")}, {"a": 1.0})] == ["a"]


def test_diff_reads_two_names_of_one_bundled_model_as_the_same_model():
    from service.configs.changes import diff

    def config(name: str) -> dict:
        return {"model": {"pretrained_model_name_or_path": name}}

    assert diff(config("llama3-8b"), config("meta-llama/Meta-Llama-3-8B")) == []
    [change] = diff(config("llama3-8b"), config("llama31-8b"))  # another model: a new experiment
    assert change.layer == "convergence"
    [unknown] = diff(config("org/unknown-a"), config("org/unknown-b"))  # not bundled: compared as written
    assert unknown.layer == "convergence"


def test_diff_reads_two_names_of_one_models_tokenizer_as_the_same():
    from service.configs.changes import diff

    assert diff({"dataset": {"tokenizer": "qwen25-7b"}}, {"dataset": {"tokenizer": "Qwen/Qwen2.5-7B"}}) == []
