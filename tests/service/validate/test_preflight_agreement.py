"""Every refusal of the bundled trainer's pre-flight is a validate finding on the same key.

The pre-flight and validate run one list of config checks (trainer/contract/preflight_checks.py CONFIG_CHECKS).
The table trips each check on a tiny-llama config for 2 processes; the pre-flight must refuse it naming the key,
and validate must report an error on that key. A check added to the list without a row here fails the test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from service.validate.document import validate_text
from tests.trainer.harness import BASE_CONFIG
from trainer.contract.overrides import ConfigError
from trainer.contract.preflight import declared_model, load_config, preflight
from trainer.contract.preflight_checks import CONFIG_CHECKS, config_refusals, refusal_key

VALIDATION = {"_target_": "trainer.data.MockDataset", "seq_length": 32, "num_samples": 64}

# (the check that refuses, the config's changes, the key both must name)
TRIPS = [
    ("check_latent_attention", {"model": {"pretrained_model_name_or_path": "deepseek-v3"},
                                "distributed": {"tp_size": 2}}, "distributed.tp_size"),
    ("check_moe_family", {"model": {"pretrained_model_name_or_path": "gpt-oss-20b"}},
     "model.pretrained_model_name_or_path"),
    ("check_experts", {"distributed": {"ep_size": 2}}, "distributed.ep_size"),
    # Fewer micro batches than pipeline stages: what recommend once wrote and train refused.
    ("check_parallel_layout", {"distributed": {"pp_size": 2},
                               "step_scheduler": {"global_batch_size": 8, "local_batch_size": 8}},
     "step_scheduler.global_batch_size"),
    ("check_parallel_layout", {"distributed": {"cp_size": 2}, "dataset": {"seq_length": 30}}, "dataset.seq_length"),
    ("check_parallel_layout", {"distributed": {"pp_size": 2, "strategy": "ddp"}}, "distributed.pp_size"),
    ("check_tensor_parallel", {"distributed": {"tp_size": 2, "strategy": "ddp"}}, "distributed.tp_size"),
    ("check_precision", {"precision": "nvfp4"}, "precision"),
    ("check_precision", {"precision": "fp8"}, "precision"),
    ("check_batch_split", {"step_scheduler": {"global_batch_size": 10, "local_batch_size": 2}},
     "step_scheduler.local_batch_size"),
    ("check_targets", {"optimizer": {"_target_": "torch.optim._private.Adam", "lr": 1.0e-3}}, "optimizer._target_"),
    ("check_sections", {"optimizer": {"_target_": None, "lr": 1.0e-3}}, "optimizer._target_"),
    ("check_dataset_targets", {"dataset": {"_target_": "trainer._data.Mock", "seq_length": 32}}, "dataset._target_"),
    ("check_recipe_keywords", {"recipe": {"_target_": "trainer.recipes.TrainFinetuneRecipe", "speed": 2}},
     "recipe.speed"),
    ("check_step_callables", {"optimizer": {"_target_": "torch.optim.Adagrad", "lr": 1.0, "fused": True}},
     "optimizer.fused"),
    ("check_model_loader_keys", {"model": {"attn_implementation": "sparkle"}}, "model.attn_implementation"),
    ("check_sequence_lengths", {"dataset": {"seq_length": 100_000}}, "dataset.seq_length"),
]


def write_config(folder: Path, changes: dict) -> Path:
    cfg = json.loads(json.dumps(BASE_CONFIG))
    cfg["validation_dataset"] = dict(VALIDATION)
    for section, values in changes.items():
        if isinstance(values, dict) and isinstance(cfg.get(section), dict) and "_target_" not in values:
            cfg[section].update(values)
        else:
            cfg[section] = values
    cfg["checkpoint"]["checkpoint_dir"] = str(folder / "ckpt")
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def test_every_check_of_the_list_has_a_row() -> None:
    assert {name for name, _, _ in TRIPS} == {check.name for check in CONFIG_CHECKS}


@pytest.mark.parametrize(("check", "changes", "key"), TRIPS,
                         ids=[f"{name}-{key}" for name, _, key in TRIPS])
def test_each_preflight_refusal_is_a_validate_error_on_its_key(tmp_path: Path, check: str, changes: dict,
                                                               key: str) -> None:
    path = write_config(tmp_path, changes)
    _, cfg = load_config(str(path), [])
    refusals = {name: refusal_key(exc) for name, exc in config_refusals(cfg, 2, declared_model(cfg.model))}
    assert refusals.get(check) == key, refusals  # the row trips the check it is for
    with pytest.raises(ConfigError) as refused:
        preflight(cfg, 2, compare_resume=False)
    assert refusal_key(refused.value) in refusals.values()
    findings = validate_text(path.read_text(), str(path)).findings
    assert key in {f.key for f in findings if f.severity == "error"}, [(f.code, f.key, f.message) for f in findings]


def test_the_base_config_passes_both(tmp_path: Path) -> None:
    """The rows differ from a config that both accept, validation through a pipeline included."""
    for changes in ({}, {"distributed": {"pp_size": 2}}):
        path = write_config(tmp_path, changes)
        _, cfg = load_config(str(path), [])
        preflight(cfg, 2, compare_resume=False)
        assert [f for f in validate_text(path.read_text(), str(path)).findings if f.severity == "error"] == []


PIPELINE = ["recommend", "--model", "tiny-llama", "--gpus", "2", "--gpu-type", "cpu", "--goal", "pretrain",
            "--engine", "bundled", "--distributed.pp_size", "2"]


def test_recommend_writes_no_pipeline_config_the_preflight_refuses(tmp_path: Path, capsys) -> None:
    """Its own micro batch leaves a micro batch per stage, and the validation set runs through the pipeline;
    a local batch that leaves fewer micro batches than stages is refused, naming the key, and not written."""
    from service.cli.app import main

    written = tmp_path / "pp.yaml"
    assert main(PIPELINE + ["-o", str(written)]) == 0
    _, cfg = load_config(str(written), [])
    assert cfg.validation_dataset is not None and cfg.distributed.pp_size == 2
    preflight(cfg, 2, compare_resume=False)
    refused = tmp_path / "pp16.yaml"
    capsys.readouterr()
    assert main(PIPELINE + ["--step_scheduler.local_batch_size", "16", "-o", str(refused)]) == 2
    err = capsys.readouterr().err
    assert "RA-E009 error: step_scheduler.global_batch_size" in err and "nothing written" in err
    assert not refused.exists()
