"""Write ``recipe_index/models/*.json`` from the reference model table plus ``model_overrides``.

Each file is a Hugging Face ``config.json`` (real HF key names) of the language model, plus
``advisor_*`` keys: id, aliases, family, architecture, published parameter counts and the
source of every value.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from recipe_index.generate import load_reference
from recipe_index.generate.model_overrides import OVERRIDES, RENAMED_HUB_IDS, TINY_MODELS

# Reference field -> HF config.json key (the MoE/hybrid keys depend on the family, below).
_PLAIN_KEYS = {
    "num_layers": "num_hidden_layers",
    "hidden_size": "hidden_size",
    "ffn_hidden_size": "intermediate_size",
    "num_attention_heads": "num_attention_heads",
    "num_key_value_heads": "num_key_value_heads",
    "head_dim": "head_dim",
    "vocab_size": "vocab_size",
    "max_position_embeddings": "max_position_embeddings",
    "moe_router_topk": "num_experts_per_tok",
    "moe_ffn_hidden_size": "moe_intermediate_size",
    "q_lora_rank": "q_lora_rank",
    "kv_lora_rank": "kv_lora_rank",
    "mamba_num_heads": "mamba_num_heads",
    "mamba_head_dim": "mamba_head_dim",
    "mamba_state_dim": "ssm_state_size",
    "hybrid_layer_pattern": "hybrid_override_pattern",
}
# DeepSeek-style configs count shared experts (n_shared_experts x moe width) and dense prefix layers.
_DEEPSEEK_STYLE = ("deepseek", "kimi", "glm4", "nemotron_h")
_ARCH = {
    "MLA MoE": "mla-moe",
    "MoE": "moe",
    "dense (non-MoE)": "dense",
    "hybrid Mamba-Transformer": "hybrid",
    "hybrid Mamba-Transformer MoE": "hybrid-moe",
}
CORE_KEYS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
             "intermediate_size", "vocab_size")


class GenerationError(ValueError):
    """The reference and the overrides disagree, or a model lacks a decision."""


def _family_keys(model_type: str) -> dict[str, str]:
    if model_type.startswith(_DEEPSEEK_STYLE):
        keys = {"num_experts": "n_routed_experts", "num_shared_experts": "n_shared_experts",
                "first_k_dense": "first_k_dense_replace"}
        if model_type == "nemotron_h":
            keys["shared_expert_intermediate_size"] = "moe_shared_expert_intermediate_size"
        return keys
    if model_type == "gpt_oss":
        return {"num_experts": "num_local_experts"}
    return {"num_experts": "num_experts", "shared_expert_intermediate_size": "shared_expert_intermediate_size"}


def megatron_model_keys() -> dict[str, list[str]]:
    """Reference model_key -> the Megatron ``model`` keys of the recipes that use it."""
    keys: dict[str, set[str]] = {}
    for rec in load_reference("mbridge_recipes.json"):
        keys.setdefault(rec["model_key"], set()).add(rec["model"])
    return {k: sorted(v) for k, v in keys.items()}


def _bundled_id(model_key: str, override: dict[str, Any], megatron_keys: list[str]) -> str:
    if "id" in override:
        return override["id"]
    if not megatron_keys:
        raise GenerationError(f"{model_key}: no recipe names it; give an 'id' in model_overrides")
    return min(megatron_keys, key=lambda k: (len(k), k)).replace("_", "-")


def _sources(ref: dict[str, Any], override: dict[str, Any], written: Iterable[str]) -> dict[str, str]:
    sources = {field: "; ".join(paths) if isinstance(paths, list) else str(paths)
               for field, paths in sorted(ref.get("field_sources", {}).items())}
    fill = override.get("fill", {})
    for key in sorted(fill):
        if key in written:
            sources[key] = override["sources"]["fill"]
    if "published_source" in override:
        sources["published_params"] = override["published_source"]
    return sources


def model_config(ref: dict[str, Any], override: dict[str, Any], megatron_keys: list[str]) -> dict[str, Any]:
    """The config.json mapping of one bundled model (pure: reference record + override)."""
    model_key, model_type = ref["model_key"], override["model_type"]
    mla = ref.get("kv_lora_rank") is not None or "kv_lora_rank" in override.get("fill", {})
    keys = {**_PLAIN_KEYS, **_family_keys(model_type)}
    cfg: dict[str, Any] = {"model_type": model_type}
    if mla:
        cfg["q_lora_rank"] = None  # replaced below where the reference or the override has one
    for ref_field, hf_key in keys.items():
        value = ref.get(ref_field)
        if value is None or (hf_key == "head_dim" and mla):
            continue  # MLA: Megatron's kv_channels is not an HF head_dim; the card derives v_head_dim
        cfg[hf_key] = value
    if (model_type.startswith(_DEEPSEEK_STYLE) and model_type != "nemotron_h"
            and ref.get("shared_expert_intermediate_size")):
        expected = (ref.get("num_shared_experts") or 0) * (ref.get("moe_ffn_hidden_size") or 0)
        if ref["shared_expert_intermediate_size"] != expected:
            raise GenerationError(f"{model_key}: shared expert width disagrees with n_shared_experts x moe width")
    for key, value in override.get("fill", {}).items():
        if cfg.get(key) is not None and cfg[key] != value:
            raise GenerationError(f"{model_key}: override {key}={value!r} contradicts the reference {cfg[key]!r}")
        cfg[key] = value
    missing = [k for k in CORE_KEYS if cfg.get(k) is None]
    if missing:
        raise GenerationError(f"{model_key}: core sizes missing ({', '.join(missing)}); fill or skip it")

    hf_id = ref.get("hf_model_id")
    bundled_id = _bundled_id(model_key, override, megatron_keys)
    hub_ids = [i for i in (hf_id, RENAMED_HUB_IDS.get(hf_id or "")) if i]
    aliases = [*hub_ids, *(i.split("/")[-1] for i in hub_ids), *megatron_keys]
    total, active = override.get("published", (ref.get("total_params"), ref.get("active_params")))
    pattern = cfg.get("hybrid_override_pattern")
    if pattern is not None and len(pattern) != cfg["num_hidden_layers"]:
        raise GenerationError(f"{model_key}: hybrid pattern has {len(pattern)} letters for "
                              f"{cfg['num_hidden_layers']} layers")
    arch = _ARCH.get(ref.get("architecture") or "", None)
    cfg.update({
        "_name_or_path": hf_id,
        "advisor_id": bundled_id,
        "advisor_aliases": sorted(set(aliases) - {bundled_id}),
        "advisor_family": ref.get("model_family"),
        "advisor_architecture": arch,
        "advisor_published_total_params": total,
        "advisor_published_active_params": active,
        "advisor_sources": _sources(ref, override, cfg),
    })
    # An MLA model without query compression says so: transformers' DeepseekV3Config (and the bundled
    # trainer) read a missing q_lora_rank as 1536.
    explicit_null = {"q_lora_rank"} if mla else set()
    return {k: v for k, v in cfg.items() if v is not None or k in explicit_null}


def tiny_config(model_id: str, fields: dict[str, Any]) -> dict[str, Any]:
    return {
        **fields,
        "advisor_id": model_id,
        "advisor_aliases": [],
        "advisor_family": "tiny",
        "advisor_sources": {"all": "hand-made tiny config for CPU tests of the bundled trainer"},
    }


def build_model_configs() -> dict[str, dict[str, Any]]:
    """Bundled id -> config mapping, for every non-skipped reference model plus the tiny ones."""
    megatron = megatron_model_keys()
    configs: dict[str, dict[str, Any]] = {}
    for ref in load_reference("model_cards.json"):
        override = OVERRIDES.get(ref["model_key"])
        if override is None:
            raise GenerationError(f"{ref['model_key']}: no entry in model_overrides.OVERRIDES (add one or skip it)")
        if "skip" in override:
            continue
        cfg = model_config(ref, override, megatron.get(ref["model_key"], []))
        if cfg["advisor_id"] in configs:
            raise GenerationError(f"{ref['model_key']}: bundled id {cfg['advisor_id']} is taken")
        configs[cfg["advisor_id"]] = cfg
    for model_id, fields in TINY_MODELS.items():
        configs[model_id] = tiny_config(model_id, fields)
    _check_aliases(configs)
    return configs


def _check_aliases(configs: dict[str, dict[str, Any]]) -> None:
    seen: dict[str, str] = {}
    for model_id, cfg in configs.items():
        for name in (model_id, *cfg.get("advisor_aliases", [])):
            key = name.lower().replace("_", "-")
            if seen.setdefault(key, model_id) != model_id:
                raise GenerationError(f"alias {name!r} names both {seen[key]} and {model_id}")


def render(cfg: dict[str, Any]) -> str:
    return json.dumps(cfg, indent=2, sort_keys=True) + "\n"


def write_model_files(out_dir: Path) -> list[Path]:
    """(Re)write every model file into out_dir, removing stale ones. Returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for model_id, cfg in sorted(build_model_configs().items()):
        path = out_dir / f"{model_id}.json"
        path.write_text(render(cfg), encoding="utf-8")
        written.append(path)
    for stale in set(out_dir.glob("*.json")) - set(written):
        stale.unlink()
    return written
