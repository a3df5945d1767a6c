"""Llama-family decoders (Llama, Mistral, Qwen2, Qwen3) and MoE decoders (Qwen3-MoE, Qwen2-MoE, Mixtral,
DeepSeek-V3) with Hugging Face parameter names."""

from trainer.models.builder import (
    InitSource,
    assign_full_tensor,
    build_causal_lm,
    clean_fqn,
    init_weights,
    is_meta,
    load_weights_into,
    materialize,
    resolve_config,
    unwrap_model,
)
from trainer.models.config import DecoderConfig, ModelConfigError
from trainer.models.decoder import CausalLM, DecoderBlock

__all__ = [
    "CausalLM",
    "DecoderBlock",
    "DecoderConfig",
    "InitSource",
    "ModelConfigError",
    "assign_full_tensor",
    "build_causal_lm",
    "clean_fqn",
    "init_weights",
    "is_meta",
    "load_weights_into",
    "materialize",
    "resolve_config",
    "unwrap_model",
]
