"""The MoE load-balancing keys of a config's `model` section (Megatron's names), checked without torch: the
pre-flight refuses what the trainer cannot run, validate reports the same (RA-E005), and the trainer reads the
coefficient through `aux_loss_coefficient`.

The bundled trainer's Switch loss is transformers' (`load_balancing_loss_func`: f per token, top_k when balanced,
pooled over the MoE layers), so a model's `router_aux_loss_coef` means what it means upstream. A config written
for Megatron Bridge (`metadata.bridge_version` set) means Megatron's `moe_aux_loss_coeff`: one loss per layer with
f per routed (token, slot) pair (1 when balanced), the layers' losses summed. Its coefficient is converted:
x (MoE layers) / top_k gives the same loss at balance and, where the layers route alike, the same gradient.
DeepSeek-V3's sequence-wise loss is defined alike on both sides (one per layer, summed): not converted.
"""

from __future__ import annotations

from typing import Any, Optional

from trainer.contract.model_checks import declared_value
from trainer.contract.overrides import ConfigError

BALANCING_KEYS = ("moe_router_load_balancing_type", "moe_aux_loss_coeff", "moe_router_enable_expert_bias",
                  "moe_router_bias_update_rate")
# The family whose transformers model has a selection bias (`e_score_correction_bias`) to update.
EXPERT_BIAS_MODEL_TYPES = ("deepseek_v3",)


def bridge_version(cfg: Any) -> Optional[str]:
    """`metadata.bridge_version`: the Megatron Bridge release a config was written for, or None."""
    metadata = getattr(cfg, "metadata", None)
    version = getattr(metadata, "bridge_version", None) if metadata is not None else None
    if version is None and metadata is not None and isinstance(getattr(metadata, "model_extra", None), dict):
        version = metadata.model_extra.get("bridge_version")
    return None if version is None else str(version)


def megatron_coefficient_factor(moe_layers: int, top_k: int) -> float:
    """What a Megatron `moe_aux_loss_coeff` is multiplied by to mean the same in transformers' normalisation."""
    return moe_layers / top_k


def family_load_balancing(model_type: Optional[str]) -> str:
    """The loss a family trains with when the config does not say (trainer/models/moe_config.py read_moe)."""
    return "seq_aux_loss" if model_type == "deepseek_v3" else "aux_loss"


def converts_megatron_coefficient(cfg: Any, load_balancing_type: str) -> bool:
    """A Megatron Bridge config's `moe_aux_loss_coeff` for the Switch loss: Megatron's normalisation."""
    return (cfg.model.moe_aux_loss_coeff is not None and bridge_version(cfg) is not None
            and load_balancing_type == "aux_loss")


def aux_loss_coefficient(cfg: Any, moe_layers: int, top_k: int, load_balancing_type: str) -> Optional[float]:
    """`model.moe_aux_loss_coeff` in transformers' normalisation (converted from Megatron's for a Megatron
    Bridge config using the Switch loss), or None when the config leaves the family's own."""
    coeff = cfg.model.moe_aux_loss_coeff
    if coeff is not None and converts_megatron_coefficient(cfg, load_balancing_type):
        return coeff * megatron_coefficient_factor(moe_layers, top_k)
    return coeff


def check_expert_bias(model_type: Optional[str], enabled: Optional[bool]) -> None:
    if enabled and model_type is not None and model_type not in EXPERT_BIAS_MODEL_TYPES:
        raise ConfigError(f"model.moe_router_enable_expert_bias: a {model_type} model has no selection bias in "
                          "transformers (only DeepSeek-V3's e_score_correction_bias), so its checkpoint could not "
                          "keep it; remove the key, or balance with moe_router_load_balancing_type: aux_loss")


def balancing_problems(cfg: Any) -> list[tuple[str, str, str, bool]]:
    """(key, why, fix, warning only) for the balancing keys: set on a dense model, a bias update on a family
    without a selection bias, and (a warning) a Megatron coefficient the trainer converts."""
    model = cfg.model
    written = [key for key in BALANCING_KEYS if getattr(model, key, None) is not None]
    if not written or model.target is not None:
        return []
    from trainer.contract.expert_checks import declared_experts

    if declared_experts(model) == 0:
        return [(f"model.{written[0]}", "the model has no experts, so nothing to balance", "remove the key", False)]
    problems = []
    model_type = declared_value(model, "model_type")[1]
    try:
        check_expert_bias(model_type, model.moe_router_enable_expert_bias)
    except ConfigError as exc:
        key, _, rest = str(exc).partition(": ")
        why, _, fix = rest.partition("; ")
        problems.append((key, why, fix, False))
    if converts_megatron_coefficient(cfg, model.moe_router_load_balancing_type or family_load_balancing(model_type)):
        problems.append(("model.moe_aux_loss_coeff", _conversion_note(cfg),
                         "nothing to do if that is meant; to give transformers' coefficient itself, set "
                         "router_aux_loss_coef in the model's config.json and remove moe_aux_loss_coeff", True))
    return problems


def _conversion_note(cfg: Any) -> str:
    coeff, model = cfg.model.moe_aux_loss_coeff, cfg.model
    layers, top_k = declared_moe_layers(model), declared_value(model, "num_experts_per_tok")[1]
    converted = (f" = {coeff * megatron_coefficient_factor(layers, top_k):.6g} for this model's {layers} MoE layers "
                 f"and top_k {top_k}" if layers and isinstance(top_k, int) and top_k > 0 else "")
    return (f"{coeff} is Megatron's coefficient (metadata.bridge_version {bridge_version(cfg)}: one loss per layer, "
            f"f per routed slot, summed over layers); the bundled trainer uses transformers' normalisation (f per "
            f"token, pooled over layers) and runs it as {coeff} x MoE layers / top_k{converted}")


def declared_moe_layers(model: Any) -> Optional[int]:
    """The MoE layers the model's config.json or card declares (trainer.models.moe_config.MoEConfig.is_moe_layer's
    rule), or None when they are not readable before the model is built."""
    layers = declared_value(model, "num_hidden_layers")[1]
    if not isinstance(layers, int):
        return None
    dense_first = declared_value(model, "first_k_dense_replace")[1] or declared_value(model, "first_k_dense")[1] or 0
    mlp_only = declared_value(model, "mlp_only_layers")[1] or []
    step = declared_value(model, "decoder_sparse_step")[1] or 1
    return sum(1 for i in range(layers) if i >= dense_first and i not in mlp_only and (i + 1) % step == 0)
