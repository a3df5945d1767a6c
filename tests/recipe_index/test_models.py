"""Model cards: bundled files, aliases, local config.json, hub cache, and HF-name normalisation."""

from __future__ import annotations

import json

import pytest

from recipe_index import ModelCard, ModelConfigError, UnknownModelError, find_bundled_model, list_models, resolve_model
from recipe_index.models import MODELS_DIR, parse_config_json
from tests.hub_cache import cache_repo

TINY_LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 512,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
}


def test_every_bundled_file_parses_into_a_card():
    files = sorted(MODELS_DIR.glob("*.json"))
    cards = list_models()
    assert len(cards) == len(files) >= 70
    for card in cards:
        assert card.hidden_size > 0 and card.num_hidden_layers > 0 and card.vocab_size > 0
        assert card.num_attention_heads % card.num_key_value_heads == 0, card.id
        assert card.architecture in ("dense", "moe", "mla-moe", "hybrid", "hybrid-moe"), card.id
        if card.is_moe:
            assert 0 < card.num_experts_per_tok <= card.num_experts, card.id
        if card.is_hybrid:
            assert len(card.hybrid_layer_pattern) == card.num_hidden_layers, card.id
        assert card.sources, card.id
        if not card.id.startswith("tiny-") and card.id != "gpt3-175b":  # GPT-3 has no Hub repo
            assert card.hf_id, card.id


def test_model_files_use_hf_keys_and_advisor_metadata():
    raw = json.loads((MODELS_DIR / "deepseek-v3.json").read_text())
    assert raw["n_routed_experts"] == 256 and raw["first_k_dense_replace"] == 3
    assert raw["kv_lora_rank"] == 512 and raw["q_lora_rank"] == 1536
    assert raw["advisor_id"] == "deepseek-v3" and raw["advisor_architecture"] == "mla-moe"
    assert "deepseek_v3" in raw["advisor_aliases"] and "deepseek-ai/DeepSeek-V3" in raw["advisor_aliases"]


def test_no_alias_names_two_models():
    seen: dict[str, str] = {}
    for card in list_models():
        for name in (card.id, card.hf_id, *card.aliases):
            if name:
                key = name.lower().replace("_", "-")
                assert seen.setdefault(key, card.id) == card.id, (name, seen[key], card.id)


@pytest.mark.parametrize("name", ["llama3-8b", "meta-llama/Meta-Llama-3-8B", "llama3_8b", "LLAMA3-8B",
                                  "Meta-Llama-3-8B"])
def test_llama3_8b_aliases_resolve(name):
    card = resolve_model(name)
    assert card.id == "llama3-8b"
    assert (card.hidden_size, card.num_hidden_layers, card.num_key_value_heads) == (4096, 32, 8)


def test_reference_fills_are_applied():
    assert resolve_model("deepseek_v2").num_attention_heads == 128
    assert resolve_model("nvidia/Nemotron-H-8B-Base-8K").vocab_size == 131072
    nano = resolve_model("nemotron_3_nano")
    assert nano.architecture == "hybrid-moe" and nano.hybrid_layer_pattern.count("E") == 23
    assert resolve_model("ministral3_8b").vocab_size == 131072


def test_tiny_models_exist_for_cpu_runs():
    llama = resolve_model("tiny-llama")
    assert (llama.hidden_size, llama.num_hidden_layers, llama.num_attention_heads) == (64, 2, 4)
    assert (llama.num_key_value_heads, llama.intermediate_size, llama.vocab_size) == (2, 128, 512)
    assert llama.max_position_embeddings == 256 and not llama.tie_word_embeddings
    assert resolve_model("tiny-qwen3").qk_norm
    moe = resolve_model("tiny-moe")
    assert (moe.num_experts, moe.num_experts_per_tok) == (8, 2)


def test_local_config_file_and_folder_resolve(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    by_file = resolve_model(str(tmp_path / "config.json"))
    by_folder = resolve_model(str(tmp_path))
    assert by_file.hidden_size == by_folder.hidden_size == 64
    assert by_folder.head_dim == 16  # defaults to hidden / heads
    assert by_folder.hf_id == str(tmp_path)


def test_local_folder_without_config_is_a_clear_error(tmp_path):
    with pytest.raises(ModelConfigError, match="no config.json"):
        resolve_model(str(tmp_path))


def test_local_config_with_bad_json_names_the_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{\n  "hidden_size": 64,\n  oops\n}')
    with pytest.raises(ModelConfigError, match="line 3"):
        resolve_model(str(path))


def test_local_config_missing_sizes_names_them(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    with pytest.raises(ModelConfigError, match="num_hidden_layers.*vocab_size"):
        resolve_model(str(path))


def test_unknown_model_offline_raises_with_suggestions(offline_hub):
    with pytest.raises(UnknownModelError) as info:
        resolve_model("meta-llama/Meta-Llama-3-8b-typo")
    err = info.value
    assert isinstance(err, ValueError)
    assert "llama3-8b" in err.suggestions
    assert "llama3-8b" in str(err) and "meta-llama/Meta-Llama-3-8b-typo" in str(err)


def test_unknown_plain_name_suggests_close_ids():
    with pytest.raises(UnknownModelError) as info:
        resolve_model("qwen3-30b")
    assert "qwen3-30b-a3b" in info.value.suggestions


def test_hub_resolution_reads_a_warm_cache_offline(offline_hub):
    cache_repo(offline_hub, "someorg/tiny-llama-copy", {**TINY_LLAMA, "hidden_size": 128, "num_attention_heads": 8})
    card = resolve_model("someorg/tiny-llama-copy")
    assert card.id == card.hf_id == "someorg/tiny-llama-copy"
    assert (card.hidden_size, card.num_attention_heads, card.head_dim) == (128, 8, 16)


def test_hub_is_not_touched_for_bundled_names(monkeypatch):
    import huggingface_hub

    def fail(*args, **kwargs):
        raise AssertionError("bundled lookup must not reach the hub")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fail)
    assert resolve_model("meta-llama/Meta-Llama-3-8B").id == "llama3-8b"


def test_from_hf_config_normalises_family_names():
    mixtral = ModelCard.from_hf_config(
        {**TINY_LLAMA, "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2}, "m"
    )
    assert mixtral.num_experts == 8 and mixtral.moe_intermediate_size == 128 and mixtral.architecture == "moe"
    deepseek = ModelCard.from_hf_config(
        {**TINY_LLAMA, "model_type": "deepseek_v3", "n_routed_experts": 16, "num_experts_per_tok": 4,
         "moe_intermediate_size": 32, "n_shared_experts": 1, "first_k_dense_replace": 1, "kv_lora_rank": 16,
         "q_lora_rank": 24, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 12},
        "d",
    )
    assert (deepseek.num_experts, deepseek.first_k_dense, deepseek.num_shared_experts) == (16, 1, 1)
    assert deepseek.architecture == "mla-moe" and deepseek.head_dim == 12
    no_kv = dict(TINY_LLAMA)
    del no_kv["num_key_value_heads"]
    assert ModelCard.from_hf_config(no_kv, "x").num_key_value_heads == 4
    assert ModelCard.from_hf_config({**TINY_LLAMA, "model_type": "qwen2"}, "q2").attention_bias
    assert not ModelCard.from_hf_config(TINY_LLAMA, "l").attention_bias
    assert ModelCard.from_hf_config({**TINY_LLAMA, "model_type": "qwen3"}, "q3").qk_norm
    assert not ModelCard.from_hf_config(TINY_LLAMA, "l").qk_norm


def test_from_hf_config_reads_the_text_config_of_multimodal_models():
    vl = {"model_type": "qwen3_vl", "vision_config": {"hidden_size": 32}, "text_config": dict(TINY_LLAMA)}
    card = ModelCard.from_hf_config(vl, "vl")
    assert card.hidden_size == 64 and card.model_type == "qwen3_vl"


def test_from_hf_config_reads_rope_parameters_and_gpt2_names():
    card = ModelCard.from_hf_config(
        {**TINY_LLAMA, "rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0}}, "r"
    )
    assert card.rope_theta == 500000.0 and card.rope_scaling == {"rope_type": "llama3", "factor": 8.0}
    gpt2 = ModelCard.from_hf_config({"model_type": "gpt2", "n_embd": 48, "n_layer": 2, "n_head": 4,
                                     "vocab_size": 100, "n_positions": 64}, "g")
    assert (gpt2.intermediate_size, gpt2.max_position_embeddings, gpt2.tie_word_embeddings) == (192, 64, True)


def test_layers_block_type_becomes_the_hybrid_pattern():
    card = ModelCard.from_hf_config(
        {**TINY_LLAMA, "model_type": "nemotron_h", "num_hidden_layers": None,
         "layers_block_type": ["mamba", "moe", "attention", "mlp"], "n_routed_experts": 4, "num_experts_per_tok": 2},
        "h",
    )
    assert card.hybrid_layer_pattern == "ME*-" and card.num_hidden_layers == 4
    assert card.architecture == "hybrid-moe" and not card.gated_mlp


def test_find_bundled_model_returns_none_for_unknown():
    assert find_bundled_model("no-such-model") is None
    assert find_bundled_model("") is None


@pytest.mark.parametrize("size", ["8B", "70B", "405B"])
def test_llama31_is_found_by_its_current_hub_id(size):
    card = find_bundled_model(f"meta-llama/Llama-3.1-{size}")
    assert card is not None and card.id == f"llama31-{size.lower()}"


def test_an_uncached_hub_model_offline_says_how_to_fetch_it(offline_hub):
    """The message told CLI users to "set 'local_files_only' to False"."""
    from recipe_index.errors import UnknownModelError
    from recipe_index.models import resolve_model

    with pytest.raises(UnknownModelError) as refused:
        resolve_model("some-org/absent")
    text = str(refused.value)
    assert "local_files_only" not in text and "huggingface-cli download some-org/absent config.json" in text


@pytest.mark.parametrize("path", sorted(MODELS_DIR.glob("*.json")), ids=lambda p: p.name)
def test_bundled_model_configs_give_no_key_twice(path):
    parse_config_json(path.read_text(encoding="utf-8"), str(path))  # raises ModelConfigError on a duplicate


def test_the_model_folder_holds_every_json_under_recipe_index():
    """So the test above runs over all of them; the index loads them with the same strict parser."""
    measurements = MODELS_DIR.parent / "data"  # published throughput, not model configs (recipe_index/measurements.py)
    assert {path.parent for path in MODELS_DIR.parent.rglob("*.json") if path.parent != measurements} == {MODELS_DIR}
    assert len(list_models()) == len(list(MODELS_DIR.glob("*.json")))


@pytest.mark.parametrize("model_id", ["moonlight-16b", "deepseek-v2-lite"])
def test_latent_attention_without_query_compression_says_q_lora_rank_null(model_id):
    # transformers' DeepseekV3Config and the bundled trainer read a missing q_lora_rank as 1536.
    raw = json.loads((MODELS_DIR / f"{model_id}.json").read_text())
    assert "q_lora_rank" in raw and raw["q_lora_rank"] is None
    assert json.loads((MODELS_DIR / "deepseek-v3.json").read_text())["q_lora_rank"] == 1536
