"""The MoE layer's parts: the grouped GEMM against its per-expert fallback, the router's top-k, the
load-balancing loss by hand, the router statistics, and the Hub-layout names."""

from __future__ import annotations

import pytest
import torch

from trainer.models import moe as moe_module
from trainer.models.moe import MoE, Router, RouterLinear, collect_router_stats, grouped_matmul
from trainer.models.moe_config import MoEConfig
from trainer.models.moe_names import hub_expert_names, hub_name, to_hub_layout

CONFIG = MoEConfig(num_experts=4, top_k=2, expert_intermediate_size=8, router_aux_loss_coef=0.5)


def test_router_logits_are_fp32_and_keep_only_the_bf16_input_for_backward() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 16, generator=gen).bfloat16().requires_grad_()
    weight = torch.randn(4, 16, generator=gen).bfloat16().requires_grad_()
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        logits = RouterLinear.apply(x, weight)
    assert logits.dtype == torch.float32 and [t.dtype for t in saved] == [torch.bfloat16, torch.bfloat16]
    grad = torch.randn(6, 4, generator=gen)
    logits.backward(grad)
    reference_x, reference_w = x.detach().float().requires_grad_(), weight.detach().float().requires_grad_()
    torch.nn.functional.linear(reference_x, reference_w).backward(grad)
    assert torch.equal(logits, torch.nn.functional.linear(x.float(), weight.float()))
    assert x.grad.dtype == torch.bfloat16 and weight.grad.dtype == torch.bfloat16
    assert torch.equal(x.grad, reference_x.grad.bfloat16()) and torch.equal(weight.grad, reference_w.grad.bfloat16())


def test_grouped_mm_equals_the_per_expert_fallback(monkeypatch) -> None:
    gen = torch.Generator().manual_seed(0)
    counts_list = [5, 0, 7, 4]  # an expert without tokens too
    x = torch.randn(16, 8, generator=gen, requires_grad=True)
    weight = torch.randn(4, 12, 8, generator=gen, requires_grad=True)
    grad = torch.randn(16, 12, generator=gen)
    counts = torch.tensor(counts_list)
    assert moe_module.grouped_mm_supported(x, weight)  # CPU fp32, 16-byte rows
    grouped = grouped_matmul(x, weight, counts, counts_list)
    grouped.backward(grad)
    grads = x.grad.clone(), weight.grad.clone()
    x.grad = weight.grad = None
    monkeypatch.setattr(moe_module, "grouped_mm_supported", lambda *_: False)
    looped = grouped_matmul(x, weight, counts, counts_list)
    looped.backward(grad)
    torch.testing.assert_close(grouped, looped)
    torch.testing.assert_close(grads[0], x.grad)
    torch.testing.assert_close(grads[1], weight.grad)
    rows = torch.split(x.detach(), counts_list)
    torch.testing.assert_close(looped[:5], rows[0] @ weight[0].detach().t())


def test_router_renormalises_the_top_k_only_when_asked() -> None:
    x = torch.randn(6, 16, generator=torch.Generator().manual_seed(1))
    router = Router(16, CONFIG)
    torch.nn.init.normal_(router.weight)
    weights, experts, probs = router(x)
    assert weights.dtype == torch.float32 and experts.shape == (6, 2)
    torch.testing.assert_close(weights.sum(-1), torch.ones(6))
    torch.testing.assert_close(probs.gather(1, experts) / probs.gather(1, experts).sum(-1, keepdim=True), weights)
    raw = Router(16, MoEConfig(num_experts=4, top_k=2, expert_intermediate_size=8, norm_topk_prob=False))
    raw.weight = router.weight
    torch.testing.assert_close(raw(x)[0], probs.gather(1, experts))


def test_aux_loss_is_switch_transformers_and_joins_backward() -> None:
    torch.manual_seed(0)
    layer = MoE(16, CONFIG).train()
    for p in layer.parameters():
        torch.nn.init.normal_(p, 0, 0.3)
    x = torch.randn(2, 5, 16, requires_grad=True)
    out = layer(x)
    _, experts, probs = layer.gate(x.reshape(-1, 16))
    # transformers' normalisation: f per token (top_k when balanced), not per (token, slot) pair.
    fraction = torch.bincount(experts.reshape(-1), minlength=4).float() / 10
    expected = 4 * (fraction * probs.mean(0)).sum()
    # Backward through the output alone carries coefficient x d(aux)/d(router weight).
    (out * 0).sum().backward()
    manual = torch.autograd.grad(0.5 * expected, layer.gate.weight)[0]
    torch.testing.assert_close(layer.gate.weight.grad, manual)
    stats = collect_router_stats(layer)  # the pooled loss's value is known once backward has run
    assert stats["moe_aux_loss"] == pytest.approx(expected.item(), rel=1e-6)
    assert stats["expert_load_min"] + stats["expert_load_max"] <= 20
    assert collect_router_stats(layer) is None  # reset after reading


def test_expert_load_is_summarised_per_layer() -> None:
    torch.manual_seed(0)
    layer = MoE(16, CONFIG).train()
    for p in layer.parameters():
        torch.nn.init.normal_(p, 0, 0.3)
    layer(torch.randn(2, 5, 16)).sum().backward()
    counts = layer.step_counts.double()
    stats = collect_router_stats(layer)
    (row,) = stats["expert_load"]
    assert row["min"] == counts.min() and row["max"] == counts.max()
    assert row["cv"] == pytest.approx(float(counts.std(unbiased=False) / counts.mean()))
    assert stats["expert_load_cv"] == row["cv"]


def test_eval_forward_adds_no_aux_loss_and_no_stats() -> None:
    layer = MoE(16, CONFIG).eval()
    for p in layer.parameters():
        torch.nn.init.normal_(p, 0, 0.3)
    layer(torch.randn(1, 3, 16))
    assert collect_router_stats(layer) is None


def test_hub_names_per_family() -> None:
    assert hub_expert_names("model.layers.3.mlp.experts.up_proj", 2, "qwen3_moe") == [
        "model.layers.3.mlp.experts.0.up_proj.weight", "model.layers.3.mlp.experts.1.up_proj.weight"]
    assert hub_expert_names("model.layers.0.mlp.experts.gate_proj", 1, "mixtral") == [
        "model.layers.0.block_sparse_moe.experts.0.w1.weight"]
    assert hub_name("model.layers.0.mlp.gate.weight", "mixtral") == "model.layers.0.block_sparse_moe.gate.weight"
    assert hub_name("model.layers.0.mlp.gate_proj.weight", "qwen3_moe") == "model.layers.0.mlp.gate_proj.weight"
    state = {"model.layers.0.mlp.experts.down_proj": torch.arange(6.0).reshape(2, 3, 1)}

    class Config:
        model_type, moe = "mixtral", CONFIG

    out = to_hub_layout(state, Config)
    assert list(out) == ["model.layers.0.block_sparse_moe.experts.0.w2.weight",
                         "model.layers.0.block_sparse_moe.experts.1.w2.weight"]
    assert out["model.layers.0.block_sparse_moe.experts.1.w2.weight"].flatten().tolist() == [3.0, 4.0, 5.0]


def test_lora_adapts_attention_of_an_moe_and_refuses_its_experts() -> None:
    from trainer.components.peft import apply_lora
    from trainer.models import build_causal_lm

    adapted = apply_lora(build_causal_lm("tiny-moe"), rank=4, alpha=8.0, dropout=0.0, target_modules="all-linear")
    names = {n for n, _ in adapted.named_parameters() if ".lora_A." in n}
    assert "model.layers.0.self_attn.q_proj.lora_A.weight" in names
    assert not any(".mlp." in n for n in names)
    with pytest.raises(ValueError, match="the experts of an MoE model .* take no adapters"):
        apply_lora(build_causal_lm("tiny-moe"), rank=4, alpha=8.0, dropout=0.0, target_modules=["down_proj"])


def test_backward_keeps_the_expert_inputs_and_outputs_once() -> None:
    """What the layer saves for backward per routed copy: the permuted input, the gate and up outputs, the
    SwiGLU output and the expert output (the weighted combine's), nothing of size [N k, H] twice; the memory
    model's MoE activation term (service/estimate/memory_shape.py) counts these."""
    hidden, width, tokens = 32, 16, 64
    layer = MoE(hidden, MoEConfig(num_experts=4, top_k=2, expert_intermediate_size=width))
    for param in layer.parameters():
        torch.nn.init.normal_(param, std=0.1)
    x = torch.randn(tokens, hidden, requires_grad=True)
    own = {p.untyped_storage()._cdata for p in layer.parameters()} | {x.untyped_storage()._cdata}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage()._cdata not in own:
            saved[t.untyped_storage()._cdata] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        layer.train()(x).sum().backward()
    routed = tokens * 2
    per_copy = 4 * (hidden + 2 * width + width + hidden)  # fp32: input, gate + up, SwiGLU out, expert out
    router = tokens * 4 * 4 + routed * (3 * 8 + 4 + 4)  # probabilities; ids, order, token index, weights
    assert sum(saved.values()) <= routed * per_copy + router + 4096  # the top-k weights' sums and counts
    assert sum(saved.values()) >= routed * per_copy
