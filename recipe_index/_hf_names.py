"""Normalise a Hugging Face ``config.json`` into the field names of ``ModelCard``.

Families spell the same dimension differently (``n_routed_experts`` in DeepSeek,
``num_local_experts`` in Mixtral, ``num_experts`` in Qwen; ``n_embd`` in GPT-2), and
multimodal configs keep the language model under ``text_config``. This module holds
only that spelling knowledge, so ``cards.py`` stays a plain schema.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

# Plain two-matrix MLPs (no gate projection): GPT-2/GPT-3 (GELU), Nemotron-H (squared ReLU).
NON_GATED_MODEL_TYPES = frozenset({"gpt2", "gpt3", "nemotron", "nemotron_h", "starcoder2", "gpt_bigcode"})

# Families whose attention normalises q and k per head even when the config has no flag for it.
_QK_NORM_PREFIXES = ("qwen3", "olmoe", "olmo2", "gemma3")

# Families with q/k/v projection biases even when the config has no ``attention_bias`` key.
_QKV_BIAS_PREFIXES = ("qwen2",)

# Families whose config class defaults ``tie_word_embeddings`` to true.
_TIED_BY_DEFAULT_PREFIXES = ("gemma", "gpt2", "gpt3")

_TEXT_SUBCONFIGS = ("text_config", "llm_config", "language_config", "language_model_config")

# Block names of ``layers_block_type`` (Nemotron configs and transformers' NemotronHConfig,
# which calls a Mamba mixer "linear_attention") -> letters of ``hybrid_override_pattern``.
_LAYER_BLOCK_LETTERS = {
    "mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*", "mlp": "-", "moe": "E",
}


def _first(cfg: Mapping[str, Any], *names: str, default: Any = None) -> Any:
    for name in names:
        value = cfg.get(name)
        if value is not None:
            return value
    return default


def language_model_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The language-model part of a config: the config itself, or its ``text_config``-like child.

    Top-level ``advisor_*`` keys and ``_name_or_path`` are kept, and so is the top-level
    ``model_type`` (the name users know, e.g. ``qwen3_vl`` rather than ``qwen3_vl_text``).
    """
    if any(k in cfg for k in ("hidden_size", "n_embd", "d_model")):
        return dict(cfg)
    for key in _TEXT_SUBCONFIGS:
        sub = cfg.get(key)
        if isinstance(sub, Mapping):
            merged = dict(sub)
            for k, v in cfg.items():
                if k.startswith("advisor_") or k in ("_name_or_path", "model_type"):
                    merged[k] = v
            return merged
    return dict(cfg)


def _hybrid_pattern(cfg: Mapping[str, Any]) -> Optional[str]:
    pattern = _first(cfg, "hybrid_override_pattern", "hybrid_layer_pattern")
    if pattern is None and isinstance(cfg.get("layers_block_type"), list):
        # Newer Nemotron configs list block names instead of the letter pattern.
        pattern = "".join(_LAYER_BLOCK_LETTERS.get(str(b), "?") for b in cfg["layers_block_type"])
    return pattern


def _rope(cfg: Mapping[str, Any]) -> tuple[Optional[float], Optional[dict[str, Any]]]:
    # transformers >= 5 folds rope_theta and rope_scaling into one `rope_parameters` mapping.
    params = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), Mapping) else {}
    theta = _first(cfg, "rope_theta", default=params.get("rope_theta"))
    scaling = cfg.get("rope_scaling")
    if scaling is None and params:
        rest = {k: v for k, v in params.items() if k != "rope_theta"}
        if rest and (rest.get("rope_type") not in (None, "default") or set(rest) - {"rope_type"}):
            scaling = rest
    return (float(theta) if theta is not None else None), (dict(scaling) if scaling else None)


def _architecture(num_experts: int, kv_lora_rank: Any, pattern: Optional[str]) -> str:
    if pattern is not None:
        return "hybrid-moe" if num_experts else "hybrid"
    if num_experts and kv_lora_rank is not None:
        return "mla-moe"
    return "moe" if num_experts else "dense"


def normalise_hf_config(raw: Mapping[str, Any], id: str, hf_id: Optional[str] = None) -> dict[str, Any]:
    """Map a config.json (or its text part) onto ModelCard's fields. Missing core sizes stay None."""
    cfg = language_model_config(raw)
    model_type = cfg.get("model_type")
    mt = str(model_type or "")

    hidden = _first(cfg, "hidden_size", "n_embd", "d_model")
    heads = _first(cfg, "num_attention_heads", "n_head", "num_heads")
    pattern = _hybrid_pattern(cfg)
    layers = _first(cfg, "num_hidden_layers", "n_layer", "num_layers")
    if layers is None and pattern:
        layers = len(pattern)

    num_experts = int(_first(cfg, "n_routed_experts", "num_local_experts", "num_experts", "moe_num_experts", default=0))
    shared_size = _first(cfg, "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size")
    num_shared = _first(cfg, "n_shared_experts", "num_shared_experts")
    if num_shared is None:
        num_shared = 1 if shared_size else 0

    intermediate = _first(cfg, "intermediate_size", "ffn_hidden_size", "n_inner")
    if intermediate is None and mt in ("gpt2", "gpt3") and hidden is not None:
        intermediate = 4 * hidden  # GPT-2 config: n_inner None means 4 * n_embd
    moe_intermediate = _first(cfg, "moe_intermediate_size", "expert_intermediate_size")
    if num_experts and moe_intermediate is None:
        moe_intermediate = intermediate  # Mixtral / gpt-oss: intermediate_size is the expert width
    if intermediate is None:
        intermediate = moe_intermediate

    kv_lora_rank = cfg.get("kv_lora_rank")
    head_dim = _first(cfg, "head_dim", "attention_head_dim", "kv_channels")
    if head_dim is None and kv_lora_rank is not None:
        head_dim = cfg.get("v_head_dim")  # MLA: the value head width, Megatron's kv_channels
    if head_dim is None and hidden and heads:
        head_dim = hidden // heads

    attention_bias = cfg.get("attention_bias")
    if attention_bias is None:
        attention_bias = mt.startswith(_QKV_BIAS_PREFIXES) or mt in ("gpt2", "gpt3")
    qk_norm = _first(cfg, "qk_norm", "use_qk_norm", "qk_layernorm")
    if qk_norm is None:
        qk_norm = mt.startswith(_QK_NORM_PREFIXES)
    tied = cfg.get("tie_word_embeddings")
    if tied is None:
        tied = mt.startswith(_TIED_BY_DEFAULT_PREFIXES)
    rope_theta, rope_scaling = _rope(cfg)

    name_or_path = cfg.get("_name_or_path") or None
    return {
        "id": id,
        "hf_id": hf_id or name_or_path,
        "aliases": tuple(cfg.get("advisor_aliases") or ()),
        "family": cfg.get("advisor_family") or model_type,
        "model_type": model_type,
        "architecture": cfg.get("advisor_architecture") or _architecture(num_experts, kv_lora_rank, pattern),
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": _first(cfg, "num_key_value_heads", "num_query_groups", "multi_query_group_num", default=heads),
        "head_dim": head_dim,
        "intermediate_size": intermediate,
        "vocab_size": cfg.get("vocab_size"),
        "max_position_embeddings": _first(cfg, "max_position_embeddings", "n_positions"),
        "tie_word_embeddings": bool(tied),
        "rope_theta": rope_theta,
        "rope_scaling": rope_scaling,
        "attention_bias": bool(attention_bias),
        "qk_norm": bool(qk_norm),
        "num_experts": num_experts,
        "num_experts_per_tok": int(_first(cfg, "num_experts_per_tok", "moe_topk", "moe_router_topk", "num_selected_experts", default=0)),
        "moe_intermediate_size": moe_intermediate if num_experts else None,
        "num_shared_experts": int(num_shared) if num_experts else 0,
        "shared_expert_intermediate_size": shared_size if num_experts else None,
        "first_k_dense": int(_first(cfg, "first_k_dense_replace", "first_k_dense", default=0)) if num_experts else 0,
        "q_lora_rank": cfg.get("q_lora_rank"),
        "kv_lora_rank": kv_lora_rank,
        "qk_rope_head_dim": cfg.get("qk_rope_head_dim"),
        "qk_nope_head_dim": cfg.get("qk_nope_head_dim"),
        "v_head_dim": cfg.get("v_head_dim"),
        "hybrid_layer_pattern": pattern,
        "mamba_num_heads": cfg.get("mamba_num_heads"),
        "mamba_head_dim": cfg.get("mamba_head_dim"),
        "mamba_state_dim": _first(cfg, "ssm_state_size", "mamba_state_dim", "mamba_d_state"),
        "published_total_params": cfg.get("advisor_published_total_params"),
        "published_active_params": cfg.get("advisor_published_active_params"),
        "sources": dict(cfg.get("advisor_sources") or {}),
    }


CORE_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")


def missing_core_fields(normalised: Mapping[str, Any]) -> list[str]:
    """Core dimensions a card cannot do without, that the config does not give."""
    return [f for f in CORE_FIELDS if normalised.get(f) is None]
