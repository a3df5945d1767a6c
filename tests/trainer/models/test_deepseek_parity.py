"""Our DeepSeek-V3 (MLA attention, sigmoid group-limited routing with a selection bias, shared experts,
dense first layers) gives transformers' DeepseekV3ForCausalLM logits on random weights, loading the Hub's
per-expert safetensors that `save_pretrained` writes, and transformers loads what the trainer saves."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import transformers

from tests.trainer.models.hub_parity import (
    assert_logits_equal_from_hub,
    assert_transformers_loads_what_we_save,
    hub_names,
    random_hf_model,
)
from trainer.models import CausalLM, DecoderConfig, ModelConfigError, build_causal_lm
from trainer.models.moe import Router

TINY = {"model_type": "deepseek_v3", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 48, "moe_intermediate_size": 16,
        "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1, "n_group": 2, "topk_group": 1,
        "first_k_dense_replace": 1, "routed_scaling_factor": 2.5, "norm_topk_prob": True, "q_lora_rank": 24,
        "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 6,
        "max_position_embeddings": 128, "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
        "rope_interleave": True, "hidden_act": "silu"}
CONFIGS = {
    "q_lora": TINY,
    # No query compression (q_proj), half-split RoPE, biases on the a-projections and o_proj, unnormalised
    # weights, two shared experts, a linearly scaled RoPE and 4 groups of which 2 are used.
    "q_proj": {**TINY, "q_lora_rank": None, "rope_interleave": False, "attention_bias": True,
               "norm_topk_prob": False, "n_shared_experts": 2, "n_group": 4, "topk_group": 2, "num_experts_per_tok": 3,
               "rope_scaling": {"rope_type": "linear", "factor": 2.0}, "first_k_dense_replace": 2},
    # The released DeepSeek-V3's YaRN (factor 40, mscale = mscale_all_dim: cos/sin unscaled, the softmax scale
    # times mscale^2) over an original context of 32, and unequal mscales (cos/sin scaled too).
    "yarn": {**TINY, "rope_scaling": {"type": "yarn", "factor": 40.0, "original_max_position_embeddings": 32,
                                      "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}},
    "yarn_mscales": {**TINY, "rope_interleave": False,
                     "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                                      "mscale": 0.8, "mscale_all_dim": 0.5, "truncate": False}},
}


@pytest.fixture(params=sorted(CONFIGS))
def hub_folder(request, tmp_path: Path) -> tuple[transformers.PreTrainedModel, Path]:
    hf_model = random_hf_model(CONFIGS[request.param])
    hf_model.save_pretrained(tmp_path / "hub")
    return hf_model, tmp_path / "hub"


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_logits_equal_transformers_from_hub_safetensors(hub_folder, attn: str) -> None:
    hf_model, folder = hub_folder
    names = hub_names(folder)
    assert "model.layers.2.mlp.experts.0.gate_proj.weight" in names, "the Hub layout keeps one tensor per expert"
    assert "model.layers.2.mlp.gate.e_score_correction_bias" in names
    assert "model.layers.2.mlp.shared_experts.down_proj.weight" in names
    assert_logits_equal_from_hub(hf_model, folder, attn)


def test_transformers_loads_what_we_save(hub_folder, tmp_path: Path) -> None:
    hf_model, folder = hub_folder
    assert type(hf_model).__name__ == "DeepseekV3ForCausalLM"
    assert_transformers_loads_what_we_save(hf_model, folder, tmp_path / "ours")


def test_layers_follow_first_k_dense_replace_and_shared_experts() -> None:
    model = CausalLM(DecoderConfig.from_hf(TINY))
    names = set(model.state_dict())
    assert "model.layers.0.mlp.gate_proj.weight" in names  # dense: first_k_dense_replace 1
    assert tuple(model.state_dict()["model.layers.0.mlp.gate_proj.weight"].shape) == (48, 32)  # intermediate_size
    assert "model.layers.1.mlp.experts.gate_proj" in names
    shared = model.state_dict()["model.layers.2.mlp.shared_experts.gate_proj.weight"]
    assert tuple(shared.shape) == (16, 32)  # n_shared_experts x moe_intermediate_size
    assert "model.layers.0.self_attn.q_a_proj.weight" in names and "model.layers.0.self_attn.q_proj.weight" not in names


def test_num_parameters_counts_mla_shared_experts_and_bias() -> None:
    for cfg in CONFIGS.values():
        config = DecoderConfig.from_hf(cfg)
        assert config.num_parameters() == sum(p.numel() for p in CausalLM(config).parameters())
    config = DecoderConfig.from_hf(TINY)  # 2 sparse layers, 8 experts of 3 x 32 x 16, top-2
    assert config.num_parameters() - config.active_parameters() == 2 * (8 - 2) * 3 * 32 * 16


def test_selection_bias_takes_no_gradient_and_starts_at_zero() -> None:
    model = build_causal_lm(_folder_config(TINY), seed=3)
    router = next(m for m in model.modules() if isinstance(m, Router))
    assert not router.e_score_correction_bias.requires_grad
    assert torch.equal(router.e_score_correction_bias, torch.zeros(8))
    model.train()
    model(torch.randint(0, 256, (2, 8))).sum().backward()
    assert router.e_score_correction_bias.grad is None and router.weight.grad is not None


def test_groups_limit_the_choice_and_the_bias_only_picks() -> None:
    config = DecoderConfig.from_hf(TINY)  # 2 groups of 4, topk_group 1, top-2
    router = Router(32, config.moe)
    with torch.no_grad():
        router.weight.normal_(0.0, 1.0)
        router.e_score_correction_bias.zero_()
    x = torch.randn(64, 32)
    weights, experts, _ = router(x)
    assert torch.equal(experts // 4 == (experts[:, :1] // 4), torch.ones_like(experts, dtype=torch.bool)), \
        "both chosen experts lie in the one group the token may use"
    torch.testing.assert_close(weights.sum(-1), torch.full((64,), 2.5))  # normalised, then routed_scaling_factor
    with torch.no_grad():
        router.e_score_correction_bias.copy_(torch.tensor([0, 0, 0, 0, 0, 0, 5.0, 5.0]))
    biased_weights, biased_experts, _ = router(x)
    assert torch.equal(biased_experts.sort(-1).values, torch.tensor([[6, 7]]).expand(64, 2))
    scores = torch.sigmoid(x @ router.weight.t())[:, 6:]
    torch.testing.assert_close(biased_weights.sort(-1).values,
                               (2.5 * scores / scores.sum(-1, keepdim=True)).sort(-1).values)


def test_balancing_defaults_to_deepseek_v3s_own() -> None:
    moe = DecoderConfig.from_hf(TINY).moe  # bias update at the paper's gamma, sequence-wise loss at its alpha
    assert (moe.load_balancing_type, moe.router_aux_loss_coef, moe.bias_update_rate) == ("seq_aux_loss", 1e-4, 1e-3)
    assert DecoderConfig.from_hf({**TINY, "aux_loss_alpha": 0.001}).moe.router_aux_loss_coef == 0.001
    assert DecoderConfig.from_hf({**TINY, "router_aux_loss_coef": 0.01}).moe.router_aux_loss_coef == 0.01
    assert DecoderConfig.from_hf({**TINY, "seq_aux": False}).moe.load_balancing_type == "aux_loss"
    with pytest.raises(ModelConfigError, match="aux_loss_alpha: -1"):
        DecoderConfig.from_hf({**TINY, "aux_loss_alpha": -1})


def _folder_config(cfg: dict) -> str:
    import json
    import tempfile

    folder = Path(tempfile.mkdtemp())
    (folder / "config.json").write_text(json.dumps(cfg))
    return str(folder)


@pytest.mark.parametrize("cfg, key", [
    ({**TINY, "rope_scaling": {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}},
     "rope_scaling.rope_type 'longrope'"),
    ({**TINY, "rope_scaling": {"rope_type": "yarn", "original_max_position_embeddings": 32}}, "lacks factor"),
    ({**TINY, "num_key_value_heads": 2}, "num_key_value_heads"),
    ({**TINY, "n_group": 3}, "n_group"),
    ({**TINY, "n_group": 8}, "n_group"),
    ({**TINY, "topk_group": 3}, "topk_group"),
    ({**TINY, "num_experts_per_tok": 5}, "num_experts_per_tok"),
    ({**TINY, "scoring_func": "softmax"}, "scoring_func"),
    ({**TINY, "topk_method": "greedy"}, "topk_method"),
    ({**TINY, "qk_rope_head_dim": 3}, "qk_rope_head_dim"),
    ({**TINY, "kv_lora_rank": 0}, "kv_lora_rank"),
    ({**TINY, "first_k_dense_replace": -1}, "first_k_dense_replace"),
])
def test_unbuildable_deepseek_configs_refused_with_key(cfg: dict, key: str) -> None:
    with pytest.raises(ModelConfigError, match=key):
        DecoderConfig.from_hf(cfg)


def test_missing_keys_take_transformers_defaults() -> None:
    cfg = {k: v for k, v in TINY.items() if k not in ("routed_scaling_factor", "rope_interleave")}
    config = DecoderConfig.from_hf(cfg)
    hf = transformers.AutoConfig.for_model(**cfg)
    assert config.moe.routed_scaling_factor == hf.routed_scaling_factor
    assert config.mla.rope_interleave is hf.rope_interleave is True


def test_yarn_scales_the_softmax_by_mscale_squared() -> None:
    config = DecoderConfig.from_hf(CONFIGS["yarn"])
    mscale = 0.1 * math.log(40.0) + 1.0
    assert config.mla.softmax_scale(config.rope_scaling) == pytest.approx(mscale**2 / math.sqrt(12))
    assert config.mla.softmax_scale(None) == pytest.approx(1 / math.sqrt(12))


def test_lora_adapts_the_latent_attention_and_shared_experts() -> None:
    from trainer.components.peft import apply_lora
    from trainer.contract.model_checks import check_peft_targets

    targets = ["q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj", "shared_experts.up_proj"]
    check_peft_targets(targets, default_loader=True, layers=3)  # the pre-flight knows these names
    model = apply_lora(CausalLM(DecoderConfig.from_hf(TINY)), rank=2, alpha=4.0, target_modules=targets)
    adapted = {n.removesuffix(".lora_A.weight") for n, p in model.named_parameters() if p.requires_grad}
    assert {"model.layers.0.self_attn.kv_b_proj", "model.layers.2.self_attn.q_a_proj",
            "model.layers.1.mlp.shared_experts.up_proj"} <= adapted
    assert "model.layers.0.mlp.up_proj" not in adapted  # the dense layer's MLP is not a shared expert
    ids = torch.randint(0, 256, (1, 6))
    model(ids).sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_resume_signature_holds_the_latent_widths_and_shared_experts() -> None:
    from trainer.contract.resume_checks import model_signature, signature_differences

    base = model_signature(DecoderConfig.from_hf(TINY), None)
    assert base["latent_attention"]["kv_lora_rank"] == 16
    assert base["experts"]["n_shared_experts"] == 1 and base["experts"]["first_k_dense_replace"] == 1
    narrower = model_signature(DecoderConfig.from_hf({**TINY, "kv_lora_rank": 8}), None)
    assert signature_differences(narrower, base) == [
        "latent_attention: checkpoint {'kv_lora_rank': 16, 'q_lora_rank': 24, 'qk_nope_head_dim': 8, "
        "'qk_rope_head_dim': 4, 'v_head_dim': 6}, this run {'kv_lora_rank': 8, 'q_lora_rank': 24, "
        "'qk_nope_head_dim': 8, 'qk_rope_head_dim': 4, 'v_head_dim': 6}"]
