"""Our Qwen3-MoE and Mixtral give transformers' logits on random weights, loading the Hub's per-expert
safetensors that `save_pretrained` writes, and transformers loads what the trainer saves."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers
from safetensors import safe_open

from trainer.components.hf_io import save_hf_model
from trainer.distributed.parallelize import full_state_dict
from trainer.models import CausalLM, DecoderConfig, ModelConfigError, load_weights_into

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
    "mixtral": {**BASE, "model_type": "mixtral", "intermediate_size": 24, "num_local_experts": 4,
                "num_experts_per_tok": 2, "router_aux_loss_coef": 0.02, "sliding_window": None},
}


def random_hf_model(cfg: dict) -> transformers.PreTrainedModel:
    hf_config = transformers.AutoConfig.for_model(**cfg)
    hf_config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hf_config).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.2)
    return model


@pytest.fixture(params=sorted(MOE_CONFIGS))
def hub_folder(request, tmp_path: Path) -> tuple[transformers.PreTrainedModel, Path]:
    hf_model = random_hf_model(MOE_CONFIGS[request.param])
    hf_model.save_pretrained(tmp_path / "hub")
    return hf_model, tmp_path / "hub"


def test_logits_equal_transformers_from_hub_safetensors(hub_folder) -> None:
    hf_model, folder = hub_folder
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        names = list(f.keys())
    assert any(".experts.0." in n for n in names), "the Hub layout keeps one tensor per expert"
    config = DecoderConfig.from_file(folder)
    ours = CausalLM(config).eval()
    load_weights_into(ours, folder)
    ids = torch.randint(0, 256, (2, 13), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), hf_model(ids).logits, atol=1e-5, rtol=1e-5)


def test_transformers_loads_what_we_save(hub_folder, tmp_path: Path) -> None:
    hf_model, folder = hub_folder
    ours = CausalLM(DecoderConfig.from_file(folder)).eval()
    load_weights_into(ours, folder)
    save_hf_model(full_state_dict(ours), ours.config, tmp_path / "ours")
    with safe_open(str(tmp_path / "ours" / "model.safetensors"), "pt") as f:
        with safe_open(str(folder / "model.safetensors"), "pt") as hub:
            assert sorted(f.keys()) == sorted(hub.keys()), "our checkpoint uses the Hub's names"
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "ours").eval()
    assert type(reloaded).__name__ == type(hf_model).__name__
    ids = torch.randint(0, 256, (1, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids).logits, ours(ids), atol=1e-5, rtol=1e-5)


def test_dense_layers_stay_dense() -> None:
    model = CausalLM(DecoderConfig.from_hf(MOE_CONFIGS["qwen3_moe"]))
    names = set(model.state_dict())
    assert "model.layers.0.mlp.experts.gate_proj" in names
    assert "model.layers.1.mlp.gate_proj.weight" in names  # mlp_only_layers
    sparse_step = CausalLM(DecoderConfig.from_hf(MOE_CONFIGS["qwen3_moe_unnormed"]))
    assert "model.layers.0.mlp.gate_proj.weight" in sparse_step.state_dict()  # (0 + 1) % 2 != 0
    assert "model.layers.1.mlp.experts.down_proj" in sparse_step.state_dict()


def test_num_parameters_counts_experts_and_active_parameters_the_top_k() -> None:
    for cfg in MOE_CONFIGS.values():
        config = DecoderConfig.from_hf(cfg)
        assert config.num_parameters() == sum(p.numel() for p in CausalLM(config).parameters())
    config = DecoderConfig.from_hf(MOE_CONFIGS["qwen3_moe"])  # 2 sparse layers, 6 experts of 3 x 32 x 16, top-2
    assert config.num_parameters() - config.active_parameters() == 2 * (6 - 2) * 3 * 32 * 16


@pytest.mark.parametrize("cfg, key", [
    ({**BASE, "model_type": "qwen2_moe", "intermediate_size": 48, "num_experts": 4}, "qwen2_moe"),
    ({**BASE, "model_type": "deepseek_v2", "intermediate_size": 48, "n_routed_experts": 4}, "deepseek_v2"),
    ({**MOE_CONFIGS["mixtral"], "router_jitter_noise": 0.1}, "router_jitter_noise"),
    ({**MOE_CONFIGS["qwen3_moe"], "num_experts_per_tok": 9}, "num_experts_per_tok"),
])
def test_unbuilt_moe_refused_with_key(cfg: dict, key: str) -> None:
    with pytest.raises(ModelConfigError, match=key):
        DecoderConfig.from_hf(cfg)
