"""A model outside the index starts from a stand-in recipe of another model: the same modality (text or
vision) and architecture kind (dense or MoE) first, then the same family, then the closest size. The config
is named after the model (not the file path), labelled as built from a stand-in, and the notes say why."""

import json

import pytest

from recipe_index import resolve_model
from service.recommend.recommendation import recommend
from trainer.contract.config import RecipeConfig

MIXTRAL = {"_name_or_path": "mistralai/Mixtral-8x7B-v0.1", "architectures": ["MixtralForCausalLM"],
           "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
           "max_position_embeddings": 32768, "num_local_experts": 8, "num_experts_per_tok": 2}
LLAMA_13B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 5120,
             "intermediate_size": 13824, "num_hidden_layers": 40, "num_attention_heads": 40,
             "num_key_value_heads": 40, "vocab_size": 32000, "max_position_embeddings": 4096}
VISION_9B = {"_name_or_path": "acme/Vision-Chat-9B", "model_type": "acme_vl",
             "vision_config": {"depth": 32, "hidden_size": 1280},
             "text_config": {"model_type": "acme_text", "hidden_size": 3584, "intermediate_size": 18944,
                             "num_hidden_layers": 36, "num_attention_heads": 28, "num_key_value_heads": 4,
                             "vocab_size": 152064, "max_position_embeddings": 32768}}


def _model_folder(tmp_path, folder: str, config: dict) -> str:
    path = tmp_path / folder
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    return str(path / "config.json")


def _stand_in_note(rec) -> str:
    return next(n for n in rec.notes if "stand-in recipe of another model" in n)


def test_a_text_moe_config_starts_from_a_text_moe_recipe_named_after_the_model(tmp_path):
    rec = recommend(_model_folder(tmp_path, "mixtral", MIXTRAL), 8, "a100-80gb", goal="peft")
    base = rec.recipe
    assert not base.reads_images and resolve_model(base.model).is_moe
    assert rec.config["dataset"]["preset"] == "squad"
    meta = rec.config["metadata"]
    assert meta["name"] == "mixtral_8x7b_v0_1_peft_8gpu_a100_80gb_bf16"
    assert "config.json" not in meta["name"]
    assert meta["description"].startswith(f"stand-in: built from {base.name}")
    RecipeConfig.model_validate(rec.config)  # the label keeps the schema valid
    note = _stand_in_note(rec)
    assert "a text MoE recipe like the model" in note and "the closest size" in note


def test_a_llama_13b_config_starts_from_a_text_llama_recipe(tmp_path):
    rec = recommend(_model_folder(tmp_path, "my-llama-13b", LLAMA_13B), 8, "a100-80gb", goal="peft")
    base_model = resolve_model(rec.recipe.model)
    assert base_model.model_type == "llama" and not base_model.is_moe
    assert not rec.recipe.reads_images
    assert rec.config["metadata"]["name"].startswith("my_llama_13b_peft_")  # the folder's name
    note = _stand_in_note(rec)
    assert "a text dense recipe like the model" in note and "of the same family" in note


@pytest.mark.parametrize("goal", ["sft", "peft"])
def test_a_vision_config_starts_from_a_vision_recipe(tmp_path, goal):
    rec = recommend(_model_folder(tmp_path, "vision", VISION_9B), 8, "h100", goal=goal)
    assert rec.recipe.reads_images
    assert rec.config["metadata"]["name"].startswith(f"vision_chat_9b_{goal}_")
    assert "a vision-language dense recipe like the model" in _stand_in_note(rec)
