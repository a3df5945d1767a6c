"""Parameter counts: exact against transformers on tiny configs, close to published totals on real ones."""

from __future__ import annotations

import pytest

from recipe_index import ModelCard, list_models, param_counts, parse_param_count, resolve_model

BASE = dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=96, vocab_size=300, max_position_embeddings=128)
MOE = dict(moe_intermediate_size=32, num_experts_per_tok=2)
MLA = dict(kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=12, n_group=2, topk_group=1,
           num_key_value_heads=4)

TINY_CONFIGS = {
    "llama": dict(BASE),
    "llama-bias-tied": dict(BASE, attention_bias=True, tie_word_embeddings=True),
    "mistral": dict(BASE),
    "qwen2": dict(BASE, tie_word_embeddings=True),
    "qwen3": dict(BASE, head_dim=24),
    "qwen3_moe": dict(BASE, **MOE, num_experts=6, head_dim=16),
    "mixtral": dict(BASE, num_local_experts=4, num_experts_per_tok=2),
    "deepseek_v3": dict(BASE, **MOE, **MLA, n_routed_experts=8, n_shared_experts=2, first_k_dense_replace=1,
                        q_lora_rank=24),
    "deepseek_v3-no-q-rank": dict(BASE, **MOE, **MLA, n_routed_experts=8, n_shared_experts=1,
                                  first_k_dense_replace=0, q_lora_rank=None),
    "gemma2": dict(BASE, head_dim=16),
    "gpt_oss": dict(BASE, num_local_experts=4, num_experts_per_tok=2, head_dim=16,
                    layer_types=["sliding_attention", "full_attention", "sliding_attention"]),
    "nemotron_h": dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                       intermediate_size=96, vocab_size=300, max_position_embeddings=128, num_hidden_layers=5,
                       hybrid_override_pattern="M-M*-", mamba_num_heads=8, mamba_head_dim=16, ssm_state_size=16,
                       n_groups=8, conv_kernel=4),
}


@pytest.fixture(scope="module")
def transformers_models():
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    return transformers


@pytest.mark.parametrize("name", sorted(TINY_CONFIGS))
def test_total_matches_transformers_exactly(name, transformers_models):
    import torch

    model_type = name.split("-")[0]
    config = transformers_models.AutoConfig.for_model(model_type, **TINY_CONFIGS[name])
    with torch.device("meta"):
        model = transformers_models.AutoModelForCausalLM.from_config(config)
    card = ModelCard.from_hf_config(config.to_dict(), name)
    assert param_counts(card).total == model.num_parameters()


def test_moe_active_counts_top_k_experts_only():
    card = ModelCard.from_hf_config({"model_type": "qwen3_moe", **TINY_CONFIGS["qwen3_moe"]}, "m")
    counts = param_counts(card)
    assert counts.num_moe_layers == 3 and counts.num_dense_layers == 0
    assert counts.total - counts.active == 3 * (6 - 2) * counts.per_expert
    assert counts.per_expert == 3 * 64 * 32


def test_first_dense_layers_and_shared_experts():
    counts = param_counts(resolve_model("deepseek-v3"))
    assert (counts.num_dense_layers, counts.num_moe_layers) == (3, 58)
    assert counts.shared_experts == 3 * 7168 * 2048
    assert counts.per_layer_moe > counts.per_layer_dense


def test_hybrid_pattern_counts_layers_by_kind():
    counts = param_counts(resolve_model("nemotronh-8b"))
    assert counts.num_mamba_layers + counts.num_attention_layers + counts.num_dense_layers == 52
    assert counts.num_attention_layers == 4 and counts.mamba > 0 and not counts.exact


# Published totals (model cards); our count must be within 3 %.
PUBLISHED = [
    ("llama3-8b", 8.03e9), ("llama3-70b", 70.6e9), ("llama31-405b", 405e9), ("llama32-1b", 1.23e9),
    ("qwen3-30b-a3b", 30.5e9), ("qwen3-235b-a22b", 235e9), ("deepseek-v3", 671e9), ("deepseek-v2", 236e9),
    ("gpt-oss-120b", 116.8e9), ("gpt-oss-20b", 20.9e9), ("glm45-355b", 355e9), ("moonlight-16b", 16e9),
    ("nemotron-3-nano-30b-a3b", 31.6e9), ("nemotron-nano-9b-v2", 8.89e9), ("qwen3-next-80b-a3b", 80e9),
    ("qwen35-vl-397b-a17b", 397e9), ("gpt3-175b", 175e9), ("kimi-k2", 1.03e12),
]


@pytest.mark.parametrize("model_id,published", PUBLISHED)
def test_total_close_to_published(model_id, published):
    assert param_counts(resolve_model(model_id)).total == pytest.approx(published, rel=0.03)


# Active parameters including embeddings (DeepSeek's convention); published in the model cards.
PUBLISHED_ACTIVE = [("deepseek-v3", 37e9), ("qwen3-235b-a22b", 22e9), ("qwen3-30b-a3b", 3.3e9),
                    ("nemotron-3-nano-30b-a3b", 3.6e9), ("kimi-k2", 32.9e9)]


@pytest.mark.parametrize("model_id,published", PUBLISHED_ACTIVE)
def test_active_close_to_published(model_id, published):
    assert param_counts(resolve_model(model_id)).active == pytest.approx(published, rel=0.03)


def test_every_card_with_a_published_total_is_within_three_percent():
    checked = 0
    for card in list_models():
        published = parse_param_count(card.published_total_params)
        if published:
            assert param_counts(card).total == pytest.approx(published, rel=0.03), card.id
            checked += 1
    assert checked >= 20


def test_parse_param_count():
    assert parse_param_count("671B") == 671e9
    assert parse_param_count("~12B") == 12e9
    assert parse_param_count("120B (README: 117B total)") == 120e9
    assert parse_param_count("1T") == 1e12
    assert parse_param_count(None) is None and parse_param_count("unknown") is None
