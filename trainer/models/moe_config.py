"""`MoEConfig`: the mixture-of-experts part of a Hugging Face `config.json`, one dataclass for the
families the bundled trainer builds (Qwen3-MoE, Qwen2-MoE with its shared expert, Mixtral).

Pure Python (no torch) like `DecoderConfig`. The families differ in key names and in where the
expert weights live in the Hub checkpoint; `HUB_LAYOUTS` names the latter, which the checkpoint
conversion (trainer/models/moe_names.py) reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

# model_type -> the transformers class the consolidated checkpoint names.
MOE_ARCHITECTURES = {
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM",
    "mixtral": "MixtralForCausalLM",
}
# Hugging Face model types with experts the trainer does not build (named in the refusal).
KNOWN_UNBUILT_MOE = ("deepseek_v2", "deepseek_v3", "gpt_oss", "glm4_moe", "dbrx", "olmoe")


@dataclass(frozen=True)
class HubLayout:
    """Where a family's Hub checkpoint keeps one expert: ``{block}.experts.{i}.{gate|up|down}.weight``."""

    block: str
    gate: str
    up: str
    down: str


HUB_LAYOUTS = {
    "qwen3_moe": HubLayout(block="mlp", gate="gate_proj", up="up_proj", down="down_proj"),
    "qwen2_moe": HubLayout(block="mlp", gate="gate_proj", up="up_proj", down="down_proj"),
    "mixtral": HubLayout(block="block_sparse_moe", gate="w1", up="w3", down="w2"),
}


class MoEConfigError(ValueError):
    """An MoE config.json the bundled trainer cannot build; the message names the key."""


@dataclass
class MoEConfig:
    num_experts: int
    top_k: int
    expert_intermediate_size: int
    # Qwen3-MoE: renormalise the top-k probabilities (norm_topk_prob); Mixtral always does.
    norm_topk_prob: bool = True
    router_aux_loss_coef: float = 0.001
    # Dense layers inside an MoE model (Qwen2/3-MoE): listed ones, and those off the sparse step.
    mlp_only_layers: list[int] = field(default_factory=list)
    decoder_sparse_step: int = 1
    # Qwen2-MoE: one dense SwiGLU expert every token passes through, scaled by sigmoid(x w); 0 = none.
    shared_expert_intermediate_size: int = 0

    def is_moe_layer(self, layer_idx: int) -> bool:
        return layer_idx not in self.mlp_only_layers and (layer_idx + 1) % self.decoder_sparse_step == 0

    def expert_parameters(self, hidden_size: int) -> int:
        """Parameters of one MoE layer: all experts plus the router, and the shared expert with its gate."""
        routed = 3 * self.num_experts * hidden_size * self.expert_intermediate_size + self.num_experts * hidden_size
        shared = 3 * hidden_size * self.shared_expert_intermediate_size + hidden_size
        return routed + (shared if self.shared_expert_intermediate_size else 0)


def read_moe(cfg: dict[str, Any]) -> Optional[MoEConfig]:
    """The MoE part of a config.json mapping, None for a dense model; refuses families it does not build."""
    model_type = cfg.get("model_type")
    experts = cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts")
    if not experts and model_type not in MOE_ARCHITECTURES:
        return None
    if model_type not in MOE_ARCHITECTURES:
        raise MoEConfigError(
            f"model_type {model_type!r}: mixture-of-experts family not built by the bundled trainer; "
            f"supported MoE families: {', '.join(MOE_ARCHITECTURES)}"
        )
    if model_type == "mixtral":
        if cfg.get("router_jitter_noise"):
            raise MoEConfigError("router_jitter_noise: the bundled trainer routes without jitter; set it to 0")
        moe = MoEConfig(num_experts=_positive(cfg, _experts_key(cfg)), top_k=_positive(cfg, "num_experts_per_tok"),
                        expert_intermediate_size=_positive(cfg, "intermediate_size"), norm_topk_prob=True,
                        router_aux_loss_coef=float(cfg.get("router_aux_loss_coef", 0.02)))
    else:
        moe = _read_qwen_moe(cfg)
    if moe.top_k > moe.num_experts:
        raise MoEConfigError(f"num_experts_per_tok ({moe.top_k}) exceeds the number of experts ({moe.num_experts})")
    return moe


def _read_qwen_moe(cfg: dict[str, Any]) -> MoEConfig:
    """Qwen3-MoE and Qwen2-MoE: dense layers by list and sparse step; Qwen2-MoE adds the shared expert.
    `norm_topk_prob` unset: false for Qwen2-MoE as in transformers; true for Qwen3-MoE, as every Qwen3-MoE
    release sets it (the bundled cards of those releases omit the key)."""
    sparse_step = int(cfg.get("decoder_sparse_step") or 1)
    if sparse_step < 1:
        raise MoEConfigError(f"decoder_sparse_step: {sparse_step} must be >= 1")
    qwen2 = cfg.get("model_type") == "qwen2_moe"
    shared = _positive(cfg, "shared_expert_intermediate_size") if qwen2 else 0
    return MoEConfig(num_experts=_positive(cfg, _experts_key(cfg)), top_k=_positive(cfg, "num_experts_per_tok"),
                     expert_intermediate_size=_positive(cfg, "moe_intermediate_size"),
                     norm_topk_prob=bool(cfg.get("norm_topk_prob", not qwen2)),
                     router_aux_loss_coef=float(cfg.get("router_aux_loss_coef", 0.001)),
                     mlp_only_layers=[int(i) for i in cfg.get("mlp_only_layers") or []],
                     decoder_sparse_step=sparse_step, shared_expert_intermediate_size=shared)


def _experts_key(cfg: dict[str, Any]) -> str:
    """transformers 5 writes `num_local_experts` for every family (an attribute alias of `num_experts`)."""
    return "num_experts" if cfg.get("num_experts") is not None else "num_local_experts"


def _positive(cfg: dict[str, Any], key: str) -> int:
    value = cfg.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise MoEConfigError(f"{key}: {value!r} must be a positive integer for a {cfg.get('model_type')} model")
    return value


def moe_hf_keys(model_type: str, moe: MoEConfig) -> dict[str, Any]:
    """The config.json keys transformers reads for this family's experts."""
    common = {"num_experts_per_tok": moe.top_k, "router_aux_loss_coef": moe.router_aux_loss_coef,
              "output_router_logits": False}
    if model_type == "mixtral":
        return {**common, "num_local_experts": moe.num_experts, "intermediate_size": moe.expert_intermediate_size,
                "router_jitter_noise": 0.0}
    qwen = {**common, "num_experts": moe.num_experts, "moe_intermediate_size": moe.expert_intermediate_size,
            "norm_topk_prob": moe.norm_topk_prob, "mlp_only_layers": list(moe.mlp_only_layers),
            "decoder_sparse_step": moe.decoder_sparse_step}
    if model_type == "qwen2_moe":
        qwen["shared_expert_intermediate_size"] = moe.shared_expert_intermediate_size
    return qwen


# Keys read into MoEConfig (not passed through `DecoderConfig.extra`).
MOE_KEYS = ("num_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob",
            "router_aux_loss_coef", "mlp_only_layers", "decoder_sparse_step", "output_router_logits",
            "router_jitter_noise", "shared_expert_intermediate_size")
