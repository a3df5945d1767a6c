"""Load balancing as each family defines it: the Switch loss equals transformers' load_balancing_loss_func
(value and router gradients, layers pooled) for Qwen3-MoE, Mixtral and Qwen2-MoE; DeepSeek-V3's sequence-wise
loss equals its reference formula; the aux-loss-free bias update moves the bias towards balance."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

from tests.trainer.models.hub_parity import random_hf_model
from tests.trainer.models.test_deepseek_parity import TINY as DEEPSEEK
from tests.trainer.models.test_moe_parity import MOE_CONFIGS
from trainer.models import CausalLM, DecoderConfig, load_weights_into
from trainer.models.moe import MoE, collect_router_stats, moe_layers, update_expert_bias

IDS = torch.randint(0, 256, (3, 10), generator=torch.Generator().manual_seed(5))


def _router_grads(model: torch.nn.Module) -> list[torch.Tensor]:
    """The router weights' gradients, in layer order (transformers' and ours name routers `gate`)."""
    return [p.grad for n, p in model.named_parameters() if n.endswith(".gate.weight") and p.dim() == 2]


@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral", "qwen2_moe"])
def test_switch_loss_and_its_gradient_equal_transformers(family: str, tmp_path: Path) -> None:
    cfg = {**MOE_CONFIGS[family], "num_hidden_layers": 3, "mlp_only_layers": []}  # three MoE layers, pooled
    hf_model = random_hf_model(cfg).train()
    hf_model.save_pretrained(tmp_path)
    ours = CausalLM(DecoderConfig.from_file(tmp_path)).train()
    load_weights_into(ours, tmp_path)
    coef = cfg["router_aux_loss_coef"]
    theirs = hf_model(IDS, output_router_logits=True)
    num_experts = ours.config.moe.num_experts
    expected = load_balancing_loss_func(theirs.router_logits, num_experts, cfg["num_experts_per_tok"])
    (coef * expected).backward()
    (ours(IDS) * 0).sum().backward()  # the loss joins backward through the MoE outputs alone
    stats = collect_router_stats(ours)
    assert stats["moe_aux_loss"] == pytest.approx(expected.item(), abs=1e-6)
    theirs_grads, our_grads = _router_grads(hf_model), _router_grads(ours)
    assert len(theirs_grads) == len(our_grads) == 3
    for mine, reference in zip(our_grads, theirs_grads):
        torch.testing.assert_close(mine, reference, atol=1e-7, rtol=1e-5)


def _sequence_loss_reference(scores: torch.Tensor, experts: torch.Tensor, num_experts: int, top_k: int) -> torch.Tensor:
    """DeepSeek-V3 report, eqs. 17-20, one sequence at a time: f_i = N_r / (K_r T) * #tokens choosing i,
    P_i = mean_t s'_{i,t} with s' the token's scores normalised to sum 1; L = sum_i f_i P_i; mean over sequences."""
    losses = []
    for seq_scores, seq_experts in zip(scores, experts):
        tokens = seq_scores.shape[0]
        normalised = seq_scores / seq_scores.sum(-1, keepdim=True)
        f = torch.stack([(seq_experts == i).any(-1).float().sum() for i in range(num_experts)])
        f = f * num_experts / (top_k * tokens)
        losses.append((f * normalised.mean(0)).sum())
    return torch.stack(losses).mean()


def test_sequence_wise_loss_equals_deepseek_v3s_formula() -> None:
    torch.manual_seed(1)
    config = DecoderConfig.from_hf({**DEEPSEEK, "aux_loss_alpha": 0.3})
    layer = MoE(32, config.moe).train()
    for param in layer.parameters():
        torch.nn.init.normal_(param, 0.0, 0.3)
    x = torch.randn(3, 7, 32)
    (layer(x) * 0).sum().backward()
    flat = x.reshape(-1, 32)
    weight = layer.gate.weight.detach().clone().requires_grad_(True)
    scores = torch.sigmoid(flat @ weight.t())
    _, experts, _ = layer.gate(flat)
    expected = _sequence_loss_reference(scores.view(3, 7, -1), experts.view(3, 7, -1), 8, 2)
    assert collect_router_stats(layer)["moe_aux_loss"] == pytest.approx(expected.item(), abs=1e-6)
    (0.3 * expected).backward()
    torch.testing.assert_close(layer.gate.weight.grad, weight.grad, atol=1e-7, rtol=1e-5)


def test_bias_update_moves_each_expert_towards_the_mean_load() -> None:
    model = CausalLM(DecoderConfig.from_hf(DEEPSEEK)).train()
    for param in model.parameters():
        torch.nn.init.normal_(param, 0.0, 0.2)
    for layer in moe_layers(model):
        layer.gate.e_score_correction_bias.data.zero_()
    model(IDS).sum().backward()
    loads = [layer.step_counts.clone() for layer in moe_layers(model)]
    update_expert_bias(model)
    for layer, load in zip(moe_layers(model), loads):
        expected = 1e-3 * torch.sign(load.mean() - load)
        torch.testing.assert_close(layer.gate.e_score_correction_bias.detach(), expected)
        assert layer.step_counts is None  # the next step counts afresh


def test_bias_update_balances_a_skewed_router() -> None:
    """Aux-loss-free balancing alone, router weights fixed: the bias evens the load of a skewed router out."""
    config = DecoderConfig.from_hf(DEEPSEEK).moe
    config.bias_update_rate, config.router_aux_loss_coef = 0.03, 0.0
    layer = MoE(32, config).train()
    torch.manual_seed(2)
    for param in layer.parameters():
        torch.nn.init.normal_(param, 0.0, 0.3)
    layer.gate.e_score_correction_bias.data.zero_()
    skew = torch.randn(32)

    def cv() -> float:
        (layer(torch.randn(4, 16, 32) + skew) * 0).sum().backward()
        counts = layer.step_counts
        update_expert_bias(layer)
        return float(counts.std(unbiased=False) / counts.mean())

    first = cv()
    later = [cv() for _ in range(40)][-10:]  # one step's load is noisy: the mean of the last ten
    assert sum(later) / len(later) < first / 2


def test_saved_checkpoint_holds_the_updated_bias_and_transformers_loads_it(tmp_path: Path) -> None:
    import transformers

    from trainer.components.hf_io import save_hf_model
    from trainer.distributed.parallelize import full_state_dict

    model = CausalLM(DecoderConfig.from_hf(DEEPSEEK)).train()
    for param in model.parameters():
        torch.nn.init.normal_(param, 0.0, 0.2)
    for _ in range(2):
        model(IDS).sum().backward()
        update_expert_bias(model)
    trained = {n: p.detach().clone() for n, p in model.named_parameters() if n.endswith("e_score_correction_bias")}
    save_hf_model(full_state_dict(model), model.config, tmp_path)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    for name, bias in trained.items():
        assert bias.abs().max() > 0 and torch.equal(hf.get_buffer(name), bias)
    with torch.no_grad():
        torch.testing.assert_close(hf(IDS).logits, model.eval()(IDS), atol=1e-5, rtol=1e-5)


def test_balance_benchmark_smoke_runs_both_arms(tmp_path: Path) -> None:
    """benchmarks/moe_balance.py --smoke: the same model and data with and without the bias update."""
    import importlib.util
    import json

    from tests.paths import REPO

    spec = importlib.util.spec_from_file_location("moe_balance", REPO / "benchmarks" / "moe_balance.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main(["--smoke", "--json", str(tmp_path / "out.json")]) == 0
    rows = json.loads((tmp_path / "out.json").read_text())["rows"]
    without, with_update = sorted(rows, key=lambda r: r["bias_update"])
    assert without["start_cv"] == with_update["start_cv"]  # one init, one held-out set
    assert without["bias_abs_max"] == 0.0 and with_update["bias_abs_max"] > 0.0
