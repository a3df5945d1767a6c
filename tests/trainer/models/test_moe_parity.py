"""Our Qwen3-MoE, Qwen2-MoE and Mixtral give transformers' logits on random weights, loading the Hub's per-expert
safetensors that `save_pretrained` writes, and transformers loads what the trainer saves."""

from __future__ import annotations

from pathlib import Path

import pytest
import transformers

from tests.trainer.models.hub_parity import (
    assert_logits_equal_from_hub,
    assert_transformers_loads_what_we_save,
    hub_names,
    random_hf_model,
)
from trainer.models import CausalLM, DecoderConfig, ModelConfigError

BASE = {"vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 128, "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False}
MOE_CONFIGS = {
    # Layer 1 is dense (mlp_only_layers): the dense MLP must stay where the config puts it.
    "qwen3_moe": {**BASE, "model_type": "qwen3_moe", "intermediate_size": 48, "moe_intermediate_size": 16,
                  "num_experts": 6, "num_experts_per_tok": 2, "norm_topk_prob": True, "mlp_only_layers": [1],
                  "decoder_sparse_step": 1, "router_aux_loss_coef": 0.001},
    "qwen3_moe_unnormed": {**BASE, "model_type": "qwen3_moe", "intermediate_size": 48, "moe_intermediate_size": 16,
                           "num_experts": 4, "num_experts_per_tok": 3, "norm_topk_prob": False,
                           "mlp_only_layers": [], "decoder_sparse_step": 2},
    # Qwen2-MoE: a shared expert of its own width beside the routed ones, top-k not renormalised, layer 1 dense.
    "qwen2_moe": {**BASE, "model_type": "qwen2_moe", "intermediate_size": 48, "moe_intermediate_size": 16,
                  "shared_expert_intermediate_size": 24, "num_experts": 6, "num_experts_per_tok": 2,
                  "mlp_only_layers": [1], "decoder_sparse_step": 1, "router_aux_loss_coef": 0.001},
    "mixtral": {**BASE, "model_type": "mixtral", "intermediate_size": 24, "num_local_experts": 4,
                "num_experts_per_tok": 2, "router_aux_loss_coef": 0.02, "sliding_window": None},
}


@pytest.fixture(params=sorted(MOE_CONFIGS))
def hub_folder(request, tmp_path: Path) -> tuple[transformers.PreTrainedModel, Path]:
    hf_model = random_hf_model(MOE_CONFIGS[request.param])
    hf_model.save_pretrained(tmp_path / "hub")
    return hf_model, tmp_path / "hub"


def test_logits_equal_transformers_from_hub_safetensors(hub_folder) -> None:
    hf_model, folder = hub_folder
    assert any(".experts.0." in n for n in hub_names(folder)), "the Hub layout keeps one tensor per expert"
    assert_logits_equal_from_hub(hf_model, folder)


def test_transformers_loads_what_we_save(hub_folder, tmp_path: Path) -> None:
    hf_model, folder = hub_folder
    assert_transformers_loads_what_we_save(hf_model, folder, tmp_path / "ours")


def test_dense_layers_stay_dense() -> None:
    model = CausalLM(DecoderConfig.from_hf(MOE_CONFIGS["qwen3_moe"]))
    names = set(model.state_dict())
    assert "model.layers.0.mlp.experts.gate_proj" in names
    assert "model.layers.1.mlp.gate_proj.weight" in names  # mlp_only_layers
    sparse_step = CausalLM(DecoderConfig.from_hf(MOE_CONFIGS["qwen3_moe_unnormed"]))
    assert "model.layers.0.mlp.gate_proj.weight" in sparse_step.state_dict()  # (0 + 1) % 2 != 0
    assert "model.layers.1.mlp.experts.down_proj" in sparse_step.state_dict()
    qwen2 = CausalLM(DecoderConfig.from_hf(MOE_CONFIGS["qwen2_moe"])).state_dict()
    assert tuple(qwen2["model.layers.0.mlp.shared_expert.gate_proj.weight"].shape) == (24, 32)
    assert tuple(qwen2["model.layers.1.mlp.gate_proj.weight"].shape) == (48, 32)  # dense: intermediate_size
    assert not any(n.startswith("model.layers.1.mlp.") and "expert" in n for n in qwen2)


def test_num_parameters_counts_experts_and_active_parameters_the_top_k() -> None:
    for cfg in MOE_CONFIGS.values():
        config = DecoderConfig.from_hf(cfg)
        assert config.num_parameters() == sum(p.numel() for p in CausalLM(config).parameters())
    config = DecoderConfig.from_hf(MOE_CONFIGS["qwen3_moe"])  # 2 sparse layers, 6 experts of 3 x 32 x 16, top-2
    assert config.num_parameters() - config.active_parameters() == 2 * (6 - 2) * 3 * 32 * 16


@pytest.mark.parametrize("cfg, key", [
    ({**BASE, "model_type": "olmoe", "intermediate_size": 48, "num_experts": 4}, "olmoe"),
    ({k: v for k, v in MOE_CONFIGS["qwen2_moe"].items() if k != "shared_expert_intermediate_size"},
     "shared_expert_intermediate_size"),
    ({**MOE_CONFIGS["qwen2_moe"], "use_sliding_window": True, "sliding_window": 16}, "use_sliding_window"),
    ({**BASE, "model_type": "deepseek_v2", "intermediate_size": 48, "n_routed_experts": 4}, "deepseek_v2"),
    ({**MOE_CONFIGS["mixtral"], "router_jitter_noise": 0.1}, "router_jitter_noise"),
    ({**MOE_CONFIGS["qwen3_moe"], "num_experts_per_tok": 9}, "num_experts_per_tok"),
])
def test_unbuilt_moe_refused_with_key(cfg: dict, key: str) -> None:
    with pytest.raises(ModelConfigError, match=key):
        DecoderConfig.from_hf(cfg)
