"""Normalise a Hugging Face ``config.json`` into the field names of ``ModelCard``.

Families spell the same dimension differently (``n_routed_experts`` in DeepSeek,
``num_local_experts`` in Mixtral, ``num_experts`` in Qwen; ``n_embd`` in GPT-2), and
multimodal configs keep the language model under ``text_config``. This module holds
only that spelling knowledge, so ``cards.py`` stays a plain schema.
"""

from __future__ import annotations

import json
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

# Keys by which a config.json says it also reads images (its language model may sit under text_config).
_VISION_KEYS = ("vision_config", "vision_tower", "visual", "mm_vision_tower", "image_token_index", "image_token_id")

# Block names of ``layers_block_type`` (Nemotron configs and transformers' NemotronHConfig,
# which calls a Mamba mixer "linear_attention") -> letters of ``hybrid_override_pattern``.
_LAYER_BLOCK_LETTERS = {
    "mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*", "mlp": "-", "moe": "E",
}


def _whole(value: Any) -> Any:
    """A count as written: an int, or a float with no fraction as that int. Anything else (a string,
    a bool, 8.5) passes through unchanged for ``dimension_problem`` to name, never coerced."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
    if pattern is not None and not isinstance(pattern, str):
        return None  # not a letter pattern; the layer count must then come from num_hidden_layers
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

    # Whole floats (`512.0`) become ints before anything is derived from them (head_dim, GPT-2's width).
    hidden = _whole(_first(cfg, "hidden_size", "n_embd", "d_model"))
    heads = _whole(_first(cfg, "num_attention_heads", "n_head", "num_heads"))
    pattern = _hybrid_pattern(cfg)
    layers = _whole(_first(cfg, "num_hidden_layers", "n_layer", "num_layers"))
    if layers is None and pattern:
        layers = len(pattern)

    num_experts = _whole(_first(cfg, "n_routed_experts", "num_local_experts", "num_experts", "moe_num_experts",
                                default=0))
    shared_size = _first(cfg, "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size")
    num_shared = _first(cfg, "n_shared_experts", "num_shared_experts")
    if num_shared is None:
        num_shared = 1 if shared_size else 0

    intermediate = _whole(_first(cfg, "intermediate_size", "ffn_hidden_size", "n_inner"))
    if intermediate is None and mt in ("gpt2", "gpt3") and _is_count(hidden):
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
    if head_dim is None and _is_count(hidden) and _is_count(heads) and heads > 0 and hidden % heads == 0:
        head_dim = hidden // heads  # else None, for dimension_problem to refuse as the trainer does

    # Flags stay as written (`"yes"` is no JSON boolean): dimension_problem names them; absent ones
    # take the family's default.
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
    fields = {
        "id": id,
        "hf_id": hf_id or name_or_path,
        "name_or_path": name_or_path if isinstance(name_or_path, str) else None,
        "vision_language": any(key in raw for key in _VISION_KEYS),
        "aliases": tuple(cfg.get("advisor_aliases") or ()),
        "family": cfg.get("advisor_family") or model_type,
        "model_type": model_type,
        "architecture": cfg.get("advisor_architecture") or _architecture(num_experts, kv_lora_rank, pattern),
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": _first(cfg, "num_key_value_heads", "num_query_groups", "multi_query_group_num",
                                     default=heads),
        "head_dim": head_dim,
        "intermediate_size": intermediate,
        "vocab_size": cfg.get("vocab_size"),
        "max_position_embeddings": _first(cfg, "max_position_embeddings", "n_positions"),
        "tie_word_embeddings": tied,
        "rope_theta": rope_theta,
        "rope_scaling": rope_scaling,
        "attention_bias": attention_bias,
        "qk_norm": qk_norm,
        "num_experts": num_experts,
        "num_experts_per_tok": _first(cfg, "num_experts_per_tok", "moe_topk", "moe_router_topk", "num_selected_experts",
                                      default=0),
        "moe_intermediate_size": moe_intermediate if num_experts else None,
        "num_shared_experts": num_shared if num_experts else 0,
        "shared_expert_intermediate_size": shared_size if num_experts else None,
        "first_k_dense": _first(cfg, "first_k_dense_replace", "first_k_dense", default=0) if num_experts else 0,
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
    for name, _, _ in _BOUNDS:  # every size as a count: a whole float is that int, anything else stays
        fields[name] = _whole(fields[name])
    return fields


CORE_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")


def missing_core_fields(normalised: Mapping[str, Any]) -> list[str]:
    """Core dimensions a card cannot do without, that the config does not give."""
    return [f for f in CORE_FIELDS if normalised.get(f) is None]


# Upper bounds far beyond any published model (the largest bundled: 126 layers, hidden 16384, 512
# experts, vocab 262k), below what would exhaust memory or time when sizes multiply: a bound catches a
# typo (`1000000000000` layers) before the estimator allocates per layer. (field, smallest, largest).
_BOUNDS = (
    ("hidden_size", 1, 1_000_000), ("num_hidden_layers", 1, 10_000), ("num_attention_heads", 1, 100_000),
    ("num_key_value_heads", 1, 100_000), ("head_dim", 1, 100_000), ("intermediate_size", 1, 10_000_000),
    ("vocab_size", 1, 100_000_000), ("max_position_embeddings", 1, 1 << 40), ("num_experts", 0, 100_000),
    ("num_experts_per_tok", 0, 100_000), ("moe_intermediate_size", 1, 10_000_000), ("num_shared_experts", 0, 10_000),
    ("shared_expert_intermediate_size", 1, 10_000_000), ("first_k_dense", 0, 10_000), ("q_lora_rank", 1, 1_000_000),
    ("kv_lora_rank", 1, 1_000_000), ("qk_rope_head_dim", 1, 100_000), ("qk_nope_head_dim", 1, 100_000),
    ("v_head_dim", 1, 100_000), ("mamba_num_heads", 1, 100_000), ("mamba_head_dim", 1, 100_000),
    ("mamba_state_dim", 1, 100_000),
)


def dimension_problem(normalised: Mapping[str, Any]) -> Optional[tuple[str, str]]:
    """(field, "why; fix: how") for the first size of a normalised config that is no usable count:
    not a whole number (a string, a bool, 8.5), out of bounds, a hidden size the heads do not divide
    without an explicit head_dim, KV heads that do not divide the attention heads, an MoE whose top-k
    is not 1..num_experts (absent counts as 0), or a flag that is no JSON boolean; None when every
    size is usable. Optional sizes may be absent (None)."""
    for name, low, high in _BOUNDS:
        value = normalised.get(name)
        if value is None and name not in CORE_FIELDS:
            continue
        if not _is_count(value):
            kind = (f"{str(value).lower()} (a boolean)" if isinstance(value, bool) else
                    f"the string {value!r}" if isinstance(value, str) else
                    "null" if value is None else json.dumps(value) if isinstance(value, (float, list, dict))
                    else repr(value))[:80]
            return name, (f"{kind} is not a whole number; fix: write the count as a JSON integer, "
                          f"e.g. \"{name}\": {_example(name, value)}")
        if not low <= value <= high:
            return name, (f"{value:,} is outside {low:,}..{high:,}; fix: write the model's real {name} "
                          "(its Hugging Face config.json has it)")
    heads, kv_heads = normalised["num_attention_heads"], normalised["num_key_value_heads"]
    hidden = normalised["hidden_size"]
    if normalised.get("head_dim") is None and hidden % heads:  # trainer/models/config.py refuses the same
        return "hidden_size", (f"{hidden} is not a multiple of num_attention_heads ({heads}) and the config gives "
                               "no head_dim; fix: set \"head_dim\" explicitly, or use a hidden_size that "
                               f"num_attention_heads divides (e.g. {hidden // heads * heads or heads})")
    if heads % kv_heads:
        return "num_key_value_heads", (f"{kv_heads} does not divide num_attention_heads {heads} (each KV head "
                                       "serves a whole group of query heads); fix: use a divisor of "
                                       f"{heads}, e.g. {heads} (multi-head) or 1 (multi-query)")
    experts, top_k = normalised.get("num_experts") or 0, normalised.get("num_experts_per_tok") or 0
    if experts and not 1 <= top_k <= experts:  # a missing top-k reads as 0: no expert would run
        stated = "0 (or not given)" if top_k == 0 else f"{top_k} is more than the {experts} experts"
        return "num_experts_per_tok", (f"{stated}; an MoE routes each token to 1..num_experts ({experts}) experts; "
                                       "fix: write the model's top-k as \"num_experts_per_tok\" (its Hugging Face "
                                       "config.json has it)")
    for name in FLAG_FIELDS:
        value = normalised.get(name)
        if not isinstance(value, bool):
            return name, (f"{json.dumps(value)[:80]} is not a JSON boolean; fix: write \"{name}\": true or "
                          f"\"{name}\": false (unquoted)")
    return None


# Flags a config.json writes as JSON booleans; anything else ("yes", 1) would be read by truthiness.
FLAG_FIELDS = ("tie_word_embeddings", "attention_bias", "qk_norm")

_EXAMPLES = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
             "vocab_size": 128256, "intermediate_size": 14336}


def _example(name: str, value: Any) -> int:
    """The number a bad value meant, where it is plain (`"512"` -> 512), else a typical one."""
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit() and len(value) < 12:
        return int(value)
    return _EXAMPLES.get(name, 8)
