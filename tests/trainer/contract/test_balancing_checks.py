"""The MoE load-balancing keys of a config (Megatron's names): typed in the schema, refused where the trainer cannot
run them (before launch and in validate's RA-E005), a Megatron Bridge coefficient converted with a warning, and
applied by the trainer over the family's own settings."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.trainer.resume_cases import config_dict
from trainer.contract.balancing_checks import aux_loss_coefficient, balancing_problems
from trainer.contract.config import parse_config
from trainer.contract.preflight import section_problems


def _config(model: str, **keys):
    return parse_config(config_dict(model={"pretrained_model_name_or_path": model, **keys}))


def _as_bridge_config(cfg, version: str = "0.2.0"):
    """`metadata.bridge_version` as the validate issue's schema carries it."""
    cfg.metadata = SimpleNamespace(bridge_version=version)
    return cfg


def test_schema_types_the_keys_and_names_the_allowed_types() -> None:
    assert _config("tiny-moe", moe_router_load_balancing_type="seq_aux_loss").model.moe_router_load_balancing_type \
        == "seq_aux_loss"
    with pytest.raises(ValueError, match="moe_router_load_balancing_type"):
        _config("tiny-moe", moe_router_load_balancing_type="sinkhorn")
    with pytest.raises(ValueError, match="moe_aux_loss_coeff"):
        _config("tiny-moe", moe_aux_loss_coeff=-0.1)
    with pytest.raises(ValueError, match="moe_router_bias_update_rate"):
        _config("tiny-deepseek-v3", moe_router_bias_update_rate=float("nan"))


def test_a_dense_model_and_a_bias_without_a_selection_bias_are_refused() -> None:
    (problem,) = section_problems(_config("tiny-llama", moe_aux_loss_coeff=0.01))
    assert problem.key == "model.moe_aux_loss_coeff" and "no experts" in problem.why and not problem.warning
    (problem,) = section_problems(_config("tiny-moe", moe_router_enable_expert_bias=True))
    assert problem.key == "model.moe_router_enable_expert_bias" and "qwen3_moe" in problem.why
    assert section_problems(_config("tiny-deepseek-v3", moe_router_enable_expert_bias=True,
                                    moe_router_bias_update_rate=0.01)) == []


def test_a_megatron_bridge_coefficient_is_converted_with_a_warning() -> None:
    plain = _config("tiny-deepseek-v3", moe_router_load_balancing_type="aux_loss", moe_aux_loss_coeff=0.01)
    assert aux_loss_coefficient(plain, 4, 2, "aux_loss") == 0.01 and balancing_problems(plain) == []
    bridge = _as_bridge_config(_config("tiny-deepseek-v3", moe_router_load_balancing_type="aux_loss",
                                       moe_aux_loss_coeff=0.01))
    assert aux_loss_coefficient(bridge, 4, 2, "aux_loss") == pytest.approx(0.02)  # x MoE layers / top_k
    ((key, why, _fix, warning),) = balancing_problems(bridge)
    assert key == "model.moe_aux_loss_coeff" and warning
    assert "2 MoE layers and top_k 2" in why and "bridge_version 0.2.0" in why
    # DeepSeek-V3's sequence-wise loss is one loss per layer on both sides: nothing to convert.
    seq = _as_bridge_config(_config("tiny-deepseek-v3", moe_aux_loss_coeff=0.01))  # the family's seq_aux_loss
    assert aux_loss_coefficient(seq, 4, 2, "seq_aux_loss") == 0.01 and balancing_problems(seq) == []


def test_the_trainer_applies_the_keys_over_the_family_settings() -> None:
    from trainer.models import build_causal_lm
    from trainer.models.moe import moe_layers
    from trainer.recipes.model_io import configure_balancing

    model = build_causal_lm("tiny-deepseek-v3", device="meta")
    assert {(m.load_balancing, m.aux_loss_coef, m.bias_update_rate) for m in moe_layers(model)} == {
        ("seq_aux_loss", 1e-4, 1e-3)}  # DeepSeek-V3's own
    configure_balancing(model, _config("tiny-deepseek-v3", moe_router_load_balancing_type="aux_loss",
                                       moe_aux_loss_coeff=0.02, moe_router_bias_update_rate=0.005))
    assert {(m.load_balancing, m.aux_loss_coef, m.bias_update_rate) for m in moe_layers(model)} == {
        ("aux_loss", 0.02, 0.005)}
    assert model.config.moe.router_aux_loss_coef == 0.02  # what the checkpoint's config.json says
    configure_balancing(model, _config("tiny-deepseek-v3", moe_router_enable_expert_bias=False))
    assert {m.bias_update_rate for m in moe_layers(model)} == {0.0}
    qwen = build_causal_lm("tiny-moe", device="meta")
    with pytest.raises(ValueError, match="moe_router_enable_expert_bias: a qwen3_moe model has no selection bias"):
        configure_balancing(qwen, _config("tiny-moe", moe_router_enable_expert_bias=True))
