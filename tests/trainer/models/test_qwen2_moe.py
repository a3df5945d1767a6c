"""Qwen2-MoE beyond the logits: the router against transformers' returned router logits, the gated
shared expert, its config keys, and LoRA on it."""

from __future__ import annotations

import pytest
import torch
import transformers

from tests.trainer.models.test_moe_parity import MOE_CONFIGS, random_hf_model
from trainer.models import CausalLM, DecoderConfig, load_weights_into
from trainer.models.decoder import SwiGLU
from trainer.models.moe import MoE
from trainer.models.moe_config import MoEConfig

QWEN2_MOE = MOE_CONFIGS["qwen2_moe"]  # layers 0 and 2 sparse, layer 1 dense (mlp_only_layers)


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[transformers.PreTrainedModel, CausalLM]:
    hf_model = random_hf_model(QWEN2_MOE)
    folder = tmp_path_factory.mktemp("qwen2moe")
    hf_model.save_pretrained(folder)
    ours = CausalLM(DecoderConfig.from_file(folder)).eval()
    load_weights_into(ours, folder)
    return hf_model, ours


def routed_inputs(ours: CausalLM, ids: torch.Tensor) -> list[torch.Tensor]:
    """What each MoE layer of ours receives, [tokens, hidden]."""
    seen = []
    hooks = [m.register_forward_pre_hook(lambda _m, args: seen.append(args[0].reshape(-1, args[0].shape[-1])))
             for m in ours.modules() if isinstance(m, MoE)]
    try:
        ours(ids)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def test_router_matches_transformers_router_logits_without_renormalising(pair) -> None:
    hf_model, ours = pair
    ids = torch.randint(0, 256, (2, 11), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        hf_logits = hf_model(ids, output_router_logits=True).router_logits
        inputs = routed_inputs(ours, ids)
        gates = [m.gate for m in ours.modules() if isinstance(m, MoE)]
        assert len(hf_logits) == len(gates) == 2  # the dense layer 1 has no router
        for gate, x, logits in zip(gates, inputs, hf_logits):
            weights, experts, probs = gate(x)
            torch.testing.assert_close(probs, torch.softmax(logits.float(), dim=-1), atol=1e-6, rtol=1e-5)
            torch.testing.assert_close(experts, torch.topk(logits, 2, dim=-1).indices)
            torch.testing.assert_close(weights, probs.gather(1, experts))  # norm_topk_prob unset: false
    assert not gates[0].norm_topk_prob


def test_shared_expert_is_the_dense_swiglu_scaled_by_its_sigmoid_gate() -> None:
    config = DecoderConfig.from_hf(QWEN2_MOE)
    model = CausalLM(config)
    layer = model.model.layers[0].mlp
    assert type(layer.shared_expert) is SwiGLU and layer.shared_expert.up_proj.out_features == 24
    assert tuple(layer.shared_expert_gate.weight.shape) == (1, 32)
    routed_only = MoE(32, MoEConfig(num_experts=6, top_k=2, expert_intermediate_size=16, norm_topk_prob=False))
    x = torch.randn(3, 5, 32, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(0.0, 0.3)
        routed_only.load_state_dict({k: v for k, v in layer.state_dict().items() if "shared" not in k})
        scale = torch.sigmoid(x @ layer.shared_expert_gate.weight.t())
        torch.testing.assert_close(layer.eval()(x), routed_only.eval()(x) + scale * layer.shared_expert(x))


def test_config_round_trips_through_transformers() -> None:
    config = DecoderConfig.from_hf(QWEN2_MOE)
    hf = config.to_hf()
    assert hf["architectures"] == ["Qwen2MoeForCausalLM"] and hf["shared_expert_intermediate_size"] == 24
    assert "attention_bias" not in hf and hf["use_sliding_window"] is False
    loaded = transformers.AutoConfig.for_model(**hf)
    assert (loaded.shared_expert_intermediate_size, loaded.norm_topk_prob, loaded.mlp_only_layers) == (24, False, [1])
    assert DecoderConfig.from_hf(hf).moe == config.moe
    assert config.qkv_bias and not config.o_proj_bias and not config.qk_norm


def test_qkv_bias_false_builds_attention_without_bias() -> None:
    hf_model = random_hf_model({**QWEN2_MOE, "qkv_bias": False})
    assert hf_model.model.layers[0].self_attn.q_proj.bias is None
    attention = CausalLM(DecoderConfig.from_hf({**QWEN2_MOE, "qkv_bias": False})).model.layers[0].self_attn
    assert attention.q_proj.bias is None and attention.o_proj.bias is None


def test_lora_adapts_the_shared_expert_not_the_routed_ones() -> None:
    from trainer.components.peft import apply_lora

    model = apply_lora(CausalLM(DecoderConfig.from_hf(QWEN2_MOE)), rank=2, alpha=4.0, target_modules="all-linear")
    adapted = {n for n, _ in model.named_parameters() if ".lora_A." in n}
    assert "model.layers.0.mlp.shared_expert.down_proj.lora_A.weight" in adapted
    assert not any(".experts." in n or ".mlp.gate." in n for n in adapted)


def test_resume_signature_names_the_shared_expert_width() -> None:
    from trainer.contract.resume_checks import model_signature, signature_differences

    saved = model_signature(DecoderConfig.from_hf(QWEN2_MOE), None)
    wider = model_signature(DecoderConfig.from_hf({**QWEN2_MOE, "shared_expert_intermediate_size": 32}), None)
    assert saved["experts"]["shared_expert_intermediate_size"] == 24
    assert signature_differences(wider, saved)[0].startswith("experts: checkpoint {")
    assert "shared_expert_intermediate_size" not in model_signature(DecoderConfig.from_hf(MOE_CONFIGS["qwen3_moe"]),
                                                                    None)["experts"]


def test_bundled_tiny_qwen2_moe_builds_with_the_index_parameter_count() -> None:
    from recipe_index import find_bundled_model, param_counts
    from trainer.models import build_causal_lm

    model = build_causal_lm("tiny-qwen2-moe", seed=1)
    assert model.config.moe.shared_expert_intermediate_size == 64 and not model.config.moe.norm_topk_prob
    counts = param_counts(find_bundled_model("tiny-qwen2-moe"))
    assert counts.exact and counts.total == sum(p.numel() for p in model.parameters())
    assert counts.active == model.config.active_parameters()
    assert torch.isfinite(model(torch.arange(12).view(2, 6))).all()
