"""The launch pre-flight refuses, before any worker starts, what the workers would: sequences beyond the
model's positions, optimizers and losses the step cannot drive, tokenizers and weights the cache lacks,
foreign targets, and overrides blamed on their flag."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.paths import BUNDLED_RECIPES, RECIPES, REPO
from tests.trainer.distributed.test_training_runs import PEFT_WITH_VALIDATION
from tests.trainer.harness import write_config
from trainer.contract.config import parse_config
from trainer.contract.overrides import ConfigError
from trainer.contract.preflight import load_config, preflight


def _config(tmp_path: Path, **sections) -> object:
    data = yaml.safe_load(write_config(tmp_path).read_text())
    data.update(sections)
    return parse_config(data)


@pytest.mark.parametrize("key, value", [("validation_dataset.seq_length", 100000), ("dataset.seq_length", 1000)])
def test_preflight_refuses_sequences_beyond_the_models_positions(key, value):
    _, cfg = load_config(str(BUNDLED_RECIPES / "tiny_llama_pretrain.yaml"), [f"--{key}", str(value)])
    with pytest.raises(ConfigError) as err:
        preflight(cfg, 2)
    assert str(err.value).startswith(f"{key}: {value} is longer than the 256 positions of tiny-llama")


def test_preflight_reads_the_positions_of_a_local_model(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(dict(
        model_type="llama", vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=48)))
    base = ["--model.pretrained_model_name_or_path", str(folder), "--validation_dataset.seq_length"]
    preflight(load_config(str(BUNDLED_RECIPES / "tiny_llama_pretrain.yaml"),
                          base + ["48", "--dataset.seq_length", "48"])[1], 2)
    with pytest.raises(ConfigError, match="validation_dataset.seq_length: 49 is longer than the 48 positions"):
        preflight(load_config(str(BUNDLED_RECIPES / "tiny_llama_pretrain.yaml"),
                              base + ["49", "--dataset.seq_length", "48"])[1], 2)


def test_the_workers_check_the_positions_of_the_model_they_built():
    """A hub model or a custom builder is known only once built: trainer/recipes/model_io.py checks it."""
    from trainer.models.presets import tiny_config
    from trainer.recipes.model_io import check_layout

    _, cfg = load_config(str(BUNDLED_RECIPES / "tiny_llama_pretrain.yaml"), ["--validation_dataset.seq_length", "65"])
    cfg.model.pretrained_model_name_or_path = "some-org/hub-model"  # neither local nor bundled
    with pytest.raises(ConfigError, match="validation_dataset.seq_length: 65 is longer than the 64 positions"):
        check_layout(tiny_config(), cfg)
    cfg.validation_dataset.seq_length = 64
    check_layout(tiny_config(), cfg)


def test_a_model_that_declares_no_positions_is_not_refused(tmp_path):
    # 12 bundled cards (Qwen2/2.5, ...) declare none; the trainer read them as 2048 and
    # refused the seq 4096 configs recommend writes for them, while validate passed them.
    from trainer.contract.model_checks import BUNDLED as FROM_BUNDLED
    from trainer.contract.model_checks import declared_positions

    _, cfg = load_config(str(BUNDLED_RECIPES / "tiny_llama_pretrain.yaml"),
                         ["--model.pretrained_model_name_or_path", "qwen25-7b", "--dataset.seq_length", "4096"])
    assert declared_positions(cfg.model) == (FROM_BUNDLED, None)
    preflight(cfg, 2)


@pytest.mark.parametrize("optimizer, why", [
    ({"_target_": "torch.optim.LBFGS", "lr": 0.1}, "re-evaluates the loss through a closure"),
    ({"_target_": "torch.optim.SparseAdam", "lr": 0.001}, "takes sparse gradients only"),
])
def test_optimizers_the_step_cannot_drive_are_refused_before_launch(tmp_path, optimizer, why):
    with pytest.raises(ConfigError, match=rf"^optimizer\._target_: {optimizer['_target_']} is not a registered "
                                          rf"optimizer callable \(.*{why}.*\); .*nearest: torch\.optim\."):
        preflight(_config(tmp_path, optimizer=optimizer), 2)


def test_a_fused_flag_the_optimizer_does_not_take_is_dropped_not_set_false(tmp_path):
    rmsprop = {"_target_": "torch.optim.RMSprop", "lr": 0.003, "fused": True}
    with pytest.raises(ConfigError, match=r"drop optimizer\.fused \(torch\.optim\.RMSprop takes no such keyword\): "
                                          r"write the section without it, e.g. --optimizer "
                                          r"\"\{_target_: torch\.optim\.RMSprop, lr: 0\.003\}\""):
        preflight(_config(tmp_path, optimizer=rmsprop), 2)
    sgd = {"_target_": "torch.optim.SGD", "lr": 0.003, "fused": True}  # SGD takes `fused`: false is the fix
    with pytest.raises(ConfigError, match=r"set optimizer\.fused: false, or distributed\.strategy: ddp$"):
        preflight(_config(tmp_path, optimizer=sgd), 2)
    preflight(_config(tmp_path, optimizer={"_target_": "torch.optim.RMSprop", "lr": 0.003}), 2)


def test_a_loss_outside_the_trainers_signature_and_chunking_under_tp_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"^loss_fn\._target_: torch\.nn\.CrossEntropyLoss is not a registered "
                                          r"loss_fn callable; .*nearest: trainer\.loss\.causal_lm_loss$"):
        preflight(_config(tmp_path, loss_fn={"_target_": "torch.nn.CrossEntropyLoss"}), 2)
    tp = {"strategy": "fsdp2", "backend": "gloo", "tp_size": 2}
    with pytest.raises(ConfigError, match=r"^loss_fn\.chunked: true does not run with tensor parallel \(tp_size 2"):
        preflight(_config(tmp_path, distributed=tp, loss_fn={"chunked": True}), 2)
    preflight(_config(tmp_path, distributed=tp, loss_fn={"chunked": "auto"}), 2)
    preflight(_config(tmp_path, loss_fn={"_target_": "trainer.loss.causal_lm_loss", "chunked": True}), 2)


def test_a_recipe_keyword_the_trainer_would_ignore_is_refused(tmp_path):
    recipe = {"_target_": "trainer.recipes.TrainFinetuneRecipe", "junk": 1}
    with pytest.raises(ConfigError, match=r"^recipe\.junk: the recipe class takes no keyword arguments"):
        preflight(_config(tmp_path, recipe=recipe), 2)
    preflight(_config(tmp_path, recipe={"_target_": "trainer.recipes.TrainFinetuneRecipe"}), 2)


@pytest.mark.parametrize("spelling, registered", [("torch.optim.adamw.AdamW", "torch.optim.AdamW"),
                                                  ("torch.optim.sgd.SGD", "torch.optim.SGD")])
def test_an_optimizer_spelt_by_its_module_is_refused_naming_the_registered_spelling(tmp_path, spelling, registered):
    """The registry matches names exactly; the nearest name it offers is the class's registered spelling."""
    with pytest.raises(ConfigError, match=rf"^optimizer\._target_: {spelling} is not a registered optimizer callable"
                                          rf".*nearest: {registered}"):
        preflight(_config(tmp_path, optimizer={"_target_": spelling, "lr": 0.1}), 2)
    preflight(_config(tmp_path, optimizer={"_target_": registered, "lr": 0.001}), 2)


def test_the_preflight_refuses_a_chunked_loss_that_would_leave_an_lm_head_adapter_untrained(tmp_path):
    from service.validate.document import validate_text
    from trainer.contract.preflight import load_config, preflight

    updates = {**PEFT_WITH_VALIDATION,
               "peft": {**PEFT_WITH_VALIDATION["peft"], "target_modules": ["lm_head", "q_proj"]},
               "loss_fn": {"_target_": "trainer.loss.causal_lm_loss", "chunked": True}}
    path = write_config(tmp_path, updates)
    _, cfg = load_config(str(path), [])
    with pytest.raises(ConfigError, match=r"^loss_fn.chunked: true multiplies by lm_head.weight alone"):
        preflight(cfg, 1)
    [finding] = [f for f in validate_text(path.read_text(), "c.yaml").findings if f.code == "RA-E004"]
    assert finding.key == "loss_fn.chunked" and "drop lm_head from peft.target_modules" in finding.fix


def test_the_pre_flight_refuses_a_foreign_target_first_and_messages_keep_their_fix():
    from trainer.contract.config import parse_config
    from trainer.contract.overrides import ConfigError, load_yaml_file
    from trainer.contract.preflight import preflight

    raw = load_yaml_file(RECIPES / "bundled" / "tiny_llama_pretrain.yaml")
    both = {**raw, "optimizer": {"_target_": None}, "loss_fn": {"_target_": "os.system"}}
    with pytest.raises(ConfigError, match="loss_fn._target_: os.system is not a registered loss_fn callable"):
        preflight(parse_config(both), 2, compare_resume=False)
    attn = {**raw, "model": {**raw["model"], "attn_implementation": "flash_attention_9"}}
    with pytest.raises(ConfigError) as err:
        preflight(parse_config(attn), 2, compare_resume=False)
    assert str(err.value).endswith("; use one of them, or remove the key for sdpa")


def test_offline_a_hub_repo_without_cached_weights_is_refused_before_launch(offline_hub):
    """Only bundled cards had their weights looked up."""
    from tests.hub_cache import cache_repo
    from trainer.contract.model_checks import check_model_source
    from trainer.contract.overrides import ConfigError

    cache_repo(offline_hub, "acme/weightless", {})
    check_model_source("acme/weightless")  # its config is cached: enough without load_weights
    with pytest.raises(ConfigError, match="model.load_weights"):
        check_model_source("acme/weightless", weights=True)


@pytest.mark.parametrize("flag, value, says", [
    ("--optimizer.lr", "abc", "--optimizer.lr: Input should be a valid number"),
    ("--step_scheduler.max_stepz", "3", "--step_scheduler.max_stepz: unknown key")])
def test_a_bad_override_is_blamed_on_its_flag_not_the_file(flag, value, says):
    """The error named the config file, whose own value was fine."""
    from trainer.contract.overrides import ConfigError
    from trainer.contract.preflight import load_config

    path = str(REPO / "recipe_index" / "recipes" / "bundled" / "tiny_llama_pretrain.yaml")
    with pytest.raises(ConfigError) as refused:
        load_config(path, [flag, value])
    assert str(refused.value).startswith(says) and path not in str(refused.value)


@pytest.mark.parametrize("name, says", [("-", "train reads its config from a file"), (".", "a folder, not a config")])
def test_train_names_why_a_path_is_no_config(name, says):
    from trainer.contract.overrides import ConfigError, load_yaml_file

    with pytest.raises(ConfigError, match=says):
        load_yaml_file(name)


def test_train_says_a_pipe_is_no_config_file():
    """`train <(recommend ... -o -)` was "config file not found"."""
    from trainer.contract.overrides import ConfigError, load_yaml_file

    read, write = os.pipe()
    try:
        with pytest.raises(ConfigError, match="train reads its config from a file"):
            load_yaml_file(f"/proc/self/fd/{read}")
    finally:
        os.close(read)
        os.close(write)
