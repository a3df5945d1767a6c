"""MoE layouts the bundled trainer cannot run stop before launch, naming the key: EP that does not divide
the experts or the world, EP with DDP or on a dense model, expert tensor parallel, TP on an MoE, and an
MoE family the trainer does not build."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.paths import BUNDLED_RECIPES
from trainer.contract.capabilities import CAPABILITIES
from trainer.contract.overrides import ConfigError
from trainer.contract.preflight import load_config, preflight
from trainer.models.moe_config import MOE_ARCHITECTURES

MOE_RECIPE = str(BUNDLED_RECIPES / "tiny_moe_pretrain.yaml")


def _preflight(recipe: str, world: int, *overrides: str) -> None:
    preflight(load_config(recipe, list(overrides))[1], world)


def test_the_bundled_moe_recipe_passes() -> None:
    _preflight(MOE_RECIPE, 2)
    _preflight(MOE_RECIPE, 4)  # EP 2 x EDP 2


@pytest.mark.parametrize("world, overrides, message", [
    (3, ["--distributed.ep_size", "3"], "distributed.ep_size: 3 does not divide the model's 8 experts; "
                                        "use ep_size in [1]"),
    (6, ["--distributed.ep_size", "3"], "distributed.ep_size: 3 does not divide the model's 8 experts"),
    (3, ["--distributed.ep_size", "2"], "distributed.ep_size: 2 does not divide the world size 3"),
    (2, ["--distributed.strategy", "ddp"], "distributed.ep_size: 2 needs strategy fsdp2"),
    (4, ["--distributed.etp_size", "2"], "distributed.etp_size: 2: the bundled trainer keeps each expert whole"),
    (4, ["--distributed.ep_size", "1", "--distributed.tp_size", "2"], "distributed.tp_size: 2: tensor parallel "
                                                                       "does not split the MoE layers"),
    (2, ["--distributed.activation_checkpointing", "selective"], "distributed.activation_checkpointing: selective"),
])
def test_bad_expert_layouts_stop_before_launch(world: int, overrides: list, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        _preflight(MOE_RECIPE, world, *overrides)
    assert str(err.value).startswith(message), str(err.value)


def test_ep_on_a_dense_model_stops_before_launch() -> None:
    with pytest.raises(ConfigError, match="distributed.ep_size: 2 but the model is dense"):
        _preflight(str(BUNDLED_RECIPES / "tiny_llama_pretrain.yaml"), 2, "--distributed.ep_size", "2")


def _moe_folder(tmp_path: Path, model_type: str, **extra) -> str:
    folder = tmp_path / model_type
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(dict(
        model_type=model_type, vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, num_experts=8, num_experts_per_tok=2,
        moe_intermediate_size=32, max_position_embeddings=256, **extra)))
    return str(folder)


def test_an_moe_family_the_trainer_does_not_build_stops_before_launch(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        _preflight(MOE_RECIPE, 2, "--model.pretrained_model_name_or_path", _moe_folder(tmp_path, "olmoe"))
    assert str(err.value).startswith("model.pretrained_model_name_or_path: ")
    assert ("'olmoe', which the bundled trainer does not build; supported MoE families: qwen3_moe, qwen2_moe, "
            "mixtral, deepseek_v3") in str(err.value)


def test_a_qwen2_moe_with_expert_parallel_passes(tmp_path: Path) -> None:
    folder = _moe_folder(tmp_path, "qwen2_moe", shared_expert_intermediate_size=64)
    _preflight(MOE_RECIPE, 2, "--model.pretrained_model_name_or_path", folder)
    with pytest.raises(ConfigError, match="distributed.ep_size: 3 does not divide the model's 8 experts"):
        _preflight(MOE_RECIPE, 3, "--model.pretrained_model_name_or_path", folder, "--distributed.ep_size", "3")


def test_capabilities_name_the_built_moe_families() -> None:
    assert CAPABILITIES["moe"] and CAPABILITIES["expert_parallel"]
    assert not CAPABILITIES["expert_tensor_parallel"]
    assert sorted(CAPABILITIES["moe_model_types"]) == sorted(MOE_ARCHITECTURES)
    assert set(MOE_ARCHITECTURES) <= set(CAPABILITIES["model_types"])


def _deepseek_folder(tmp_path: Path) -> str:
    folder = tmp_path / "deepseek"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(dict(
        model_type="deepseek_v3", vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8, num_experts_per_tok=2, n_group=2,
        topk_group=1, first_k_dense_replace=1, moe_intermediate_size=32, q_lora_rank=None, kv_lora_rank=16,
        qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, max_position_embeddings=256)))
    return str(folder)


def test_a_deepseek_v3_model_passes_with_data_and_expert_parallel(tmp_path: Path) -> None:
    _preflight(MOE_RECIPE, 4, "--model.pretrained_model_name_or_path", _deepseek_folder(tmp_path))


@pytest.mark.parametrize("overrides, message", [
    (["--distributed.ep_size", "1", "--distributed.tp_size", "2"],
     "distributed.tp_size: 2: tensor parallel does not split the multi-head latent attention (MLA) of a deepseek_v3"),
    (["--distributed.ep_size", "1", "--distributed.cp_size", "2"],
     "distributed.cp_size: 2: context parallel does not exchange the multi-head latent attention (MLA)"),
])
def test_tp_or_cp_on_deepseek_v3_latent_attention_stops_before_launch(tmp_path: Path, overrides: list,
                                                                      message: str) -> None:
    with pytest.raises(ConfigError) as err:
        _preflight(MOE_RECIPE, 4, "--model.pretrained_model_name_or_path", _deepseek_folder(tmp_path), *overrides)
    assert str(err.value).startswith(message), str(err.value)
    assert "set " + overrides[-2].removeprefix("--distributed.") + ": 1" in str(err.value)


def test_capabilities_list_deepseek_v3_among_moe_families() -> None:
    assert "deepseek_v3" in CAPABILITIES["moe_model_types"] and "deepseek_v3" in CAPABILITIES["model_types"]
    assert not CAPABILITIES["mla_with_tp"] and not CAPABILITIES["mla_with_cp"]
