"""`MoEConfig`: the mixture-of-experts part of a Hugging Face `config.json`, one dataclass for the
families the bundled trainer builds (Qwen3-MoE, Qwen2-MoE with its shared expert, Mixtral, DeepSeek-V3).

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
    "deepseek_v3": "DeepseekV3ForCausalLM",
}
# Hugging Face model types with experts the trainer does not build (named in the refusal).
KNOWN_UNBUILT_MOE = ("deepseek_v2", "gpt_oss", "glm4_moe", "dbrx", "olmoe")


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
    "deepseek_v3": HubLayout(block="mlp", gate="gate_proj", up="up_proj", down="down_proj"),
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
    # How the experts are kept in use (Megatron's `moe_router_load_balancing_type`; trainer/models/moe_balance.py):
    # "aux_loss" the Switch loss as transformers' load_balancing_loss_func normalises it (f per token, pooled
    # over the MoE layers), "seq_aux_loss" DeepSeek-V3's sequence-wise loss (per layer, summed), "none".
    load_balancing_type: str = "aux_loss"
    # DeepSeek-V3's aux-loss-free balancing: after each optimizer step the selection bias of each expert moves
    # by this much towards the mean load (Megatron's `moe_router_bias_update_rate`); 0 keeps the bias fixed.
    bias_update_rate: float = 0.0
    # Dense layers inside an MoE model (Qwen2/3-MoE): listed ones, and those off the sparse step.
    mlp_only_layers: list[int] = field(default_factory=list)
    decoder_sparse_step: int = 1
    # Qwen2-MoE: one dense SwiGLU expert every token passes through, scaled by sigmoid(x w); 0 = none.
    shared_expert_intermediate_size: int = 0
    # DeepSeek-V3: the first k layers dense; sigmoid scores, experts chosen in the best `topk_group` of
    # `n_group` groups with a per-expert selection bias (e_score_correction_bias), the chosen scores scaled
    # by routed_scaling_factor; `n_shared_experts` always-on experts as one SwiGLU beside the routed ones.
    first_k_dense_replace: int = 0
    scoring_func: str = "softmax"
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 1.0
    score_correction_bias: bool = False
    n_shared_experts: int = 0

    def is_moe_layer(self, layer_idx: int) -> bool:
        return (layer_idx >= self.first_k_dense_replace and layer_idx not in self.mlp_only_layers
                and (layer_idx + 1) % self.decoder_sparse_step == 0)

    @property
    def shared_intermediate_size(self) -> int:
        return self.n_shared_experts * self.expert_intermediate_size

    def expert_parameters(self, hidden_size: int) -> int:
        """Parameters of one MoE layer: all experts, the shared experts and the router (with its bias), and
        Qwen2-MoE's gated shared expert with its gate."""
        routed = 3 * self.num_experts * hidden_size * self.expert_intermediate_size
        router = self.num_experts * hidden_size + (self.num_experts if self.score_correction_bias else 0)
        gated = 3 * hidden_size * self.shared_expert_intermediate_size + hidden_size
        return (routed + 3 * hidden_size * self.shared_intermediate_size + router
                + (gated if self.shared_expert_intermediate_size else 0))


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
    if model_type == "deepseek_v3":
        moe = read_deepseek_moe(cfg)
    elif model_type == "mixtral":
        if cfg.get("router_jitter_noise"):
            raise MoEConfigError("router_jitter_noise: the bundled trainer routes without jitter; set it to 0")
        moe = MoEConfig(num_experts=positive_int(cfg, _experts_key(cfg)),
                        top_k=positive_int(cfg, "num_experts_per_tok"),
                        expert_intermediate_size=positive_int(cfg, "intermediate_size"), norm_topk_prob=True,
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
    shared = positive_int(cfg, "shared_expert_intermediate_size") if qwen2 else 0
    return MoEConfig(num_experts=positive_int(cfg, _experts_key(cfg)), top_k=positive_int(cfg, "num_experts_per_tok"),
                     expert_intermediate_size=positive_int(cfg, "moe_intermediate_size"),
                     norm_topk_prob=bool(cfg.get("norm_topk_prob", not qwen2)),
                     router_aux_loss_coef=float(cfg.get("router_aux_loss_coef", 0.001)),
                     mlp_only_layers=[int(i) for i in cfg.get("mlp_only_layers") or []],
                     decoder_sparse_step=sparse_step, shared_expert_intermediate_size=shared)


# Keys of DeepSeek's own config.json that transformers' DeepseekV3 reads as fixed: a config that says
# otherwise describes a model neither transformers nor this trainer builds.
DEEPSEEK_FIXED = {"scoring_func": "sigmoid", "topk_method": "noaux_tc", "moe_layer_freq": 1}
# DeepSeek-V3's balancing (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", section 4.2): the bias update
# speed gamma and the sequence-wise balance factor alpha of its pre-training.
DEEPSEEK_BIAS_UPDATE_RATE = 1e-3
DEEPSEEK_SEQ_AUX_ALPHA = 1e-4
# transformers' DeepseekV3Config defaults, which a config.json without the key gets.
DEEPSEEK_MOE_DEFAULTS = {"n_routed_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 2048,
                         "n_shared_experts": 1, "n_group": 8, "topk_group": 4, "first_k_dense_replace": 3,
                         "norm_topk_prob": True, "routed_scaling_factor": 2.5}


def read_deepseek_moe(cfg: dict[str, Any]) -> MoEConfig:
    """DeepSeek-V3's routing as transformers' DeepseekV3TopkRouter computes it, balanced as DeepSeek-V3 trained:
    the aux-loss-free bias update (rate 1e-3, the paper's gamma and Megatron's default) plus a sequence-wise
    auxiliary loss of coefficient `aux_loss_alpha` (DeepSeek's own config.json key; 1e-4, the paper's alpha,
    when absent). `router_aux_loss_coef` (transformers' key) takes precedence over `aux_loss_alpha`;
    DeepSeek's `seq_aux: false` selects the Switch loss instead."""
    if cfg.get("n_routed_experts") is None and cfg.get("num_local_experts") is not None:
        cfg = {**cfg, "n_routed_experts": cfg["num_local_experts"]}  # transformers' attribute alias
    cfg = {**DEEPSEEK_MOE_DEFAULTS, **cfg}
    for key, expected in DEEPSEEK_FIXED.items():
        if cfg.get(key, expected) != expected:
            raise MoEConfigError(f"{key}: {cfg[key]!r}; DeepSeek-V3 as transformers builds it uses {expected!r}: "
                                 f"set {key}: {expected!r} or remove it")
    experts = positive_int(cfg, "n_routed_experts")
    n_group, topk_group = positive_int(cfg, "n_group"), positive_int(cfg, "topk_group")
    if experts % n_group:
        raise MoEConfigError(f"n_group: {n_group} does not divide n_routed_experts ({experts}); use a divisor")
    if experts // n_group < 2:
        raise MoEConfigError(f"n_group: {n_group} leaves fewer than 2 experts per group (a group scores by its "
                             f"top 2); use n_group <= {experts // 2}")
    if topk_group > n_group:
        raise MoEConfigError(f"topk_group: {topk_group} exceeds n_group ({n_group}); set topk_group <= n_group")
    top_k = positive_int(cfg, "num_experts_per_tok")
    if top_k > topk_group * (experts // n_group):
        raise MoEConfigError(f"num_experts_per_tok: {top_k} exceeds the {topk_group * (experts // n_group)} experts "
                             f"of the topk_group ({topk_group}) groups a token may use; raise topk_group")
    return MoEConfig(num_experts=experts, top_k=top_k,
                     expert_intermediate_size=positive_int(cfg, "moe_intermediate_size"),
                     norm_topk_prob=bool(cfg["norm_topk_prob"]),
                     router_aux_loss_coef=_deepseek_aux_coef(cfg),
                     load_balancing_type="seq_aux_loss" if cfg.get("seq_aux", True) else "aux_loss",
                     bias_update_rate=DEEPSEEK_BIAS_UPDATE_RATE,
                     first_k_dense_replace=positive_int(cfg, "first_k_dense_replace", minimum=0),
                     scoring_func="sigmoid", n_group=n_group, topk_group=topk_group,
                     routed_scaling_factor=float(cfg["routed_scaling_factor"]), score_correction_bias=True,
                     n_shared_experts=positive_int(cfg, "n_shared_experts", minimum=0))


def _deepseek_aux_coef(cfg: dict[str, Any]) -> float:
    for key in ("router_aux_loss_coef", "aux_loss_alpha"):
        value = cfg.get(key)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise MoEConfigError(f"{key}: {value!r} must be a number >= 0 (the auxiliary loss's coefficient)")
            return float(value)
    return DEEPSEEK_SEQ_AUX_ALPHA


def _experts_key(cfg: dict[str, Any]) -> str:
    """transformers 5 writes `num_local_experts` for every family (an attribute alias of `num_experts`)."""
    return "num_experts" if cfg.get("num_experts") is not None else "num_local_experts"


def positive_int(cfg: dict[str, Any], key: str, minimum: int = 1) -> int:
    value = cfg.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise MoEConfigError(f"{key}: {value!r} must be {what} for a {cfg.get('model_type')} model")
    return value


def moe_hf_keys(model_type: str, moe: MoEConfig) -> dict[str, Any]:
    """The config.json keys transformers reads for this family's experts."""
    common = {"num_experts_per_tok": moe.top_k, "router_aux_loss_coef": moe.router_aux_loss_coef,
              "output_router_logits": False}
    if model_type == "deepseek_v3":
        return {**common, "n_routed_experts": moe.num_experts, "moe_intermediate_size": moe.expert_intermediate_size,
                "norm_topk_prob": moe.norm_topk_prob, "first_k_dense_replace": moe.first_k_dense_replace,
                "n_group": moe.n_group, "topk_group": moe.topk_group,
                "routed_scaling_factor": moe.routed_scaling_factor, "n_shared_experts": moe.n_shared_experts,
                "seq_aux": moe.load_balancing_type == "seq_aux_loss"}
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
            "router_jitter_noise", "shared_expert_intermediate_size",
            "n_routed_experts", "n_shared_experts", "first_k_dense_replace", "n_group",
            "topk_group", "routed_scaling_factor", "aux_loss_alpha", "seq_aux", *DEEPSEEK_FIXED)
