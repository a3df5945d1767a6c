"""Tiny configs of each supported family, for tests, mock-data runs and benchmarks on CPU."""

from __future__ import annotations

from typing import Any

from trainer.models.config import DecoderConfig

_TINY = dict(
    vocab_size=256,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)
LLAMA3_ROPE_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}
_FAMILIES: dict[str, dict[str, Any]] = {
    "llama": dict(model_type="llama"),
    "llama3": dict(model_type="llama", rope_theta=500000.0, rope_scaling=LLAMA3_ROPE_SCALING),
    "mistral": dict(model_type="mistral", sliding_window=6),
    "qwen2": dict(model_type="qwen2"),
    "qwen3": dict(model_type="qwen3", head_dim=16),
    "qwen3_tied": dict(model_type="qwen3", head_dim=16, tie_word_embeddings=True),
}
TINY_FAMILIES = tuple(_FAMILIES)


def tiny_config(family: str = "llama", **overrides: Any) -> DecoderConfig:
    """A two-layer, 32-wide decoder of `family` (one of TINY_FAMILIES) with GQA (4 heads, 2 KV)."""
    if family not in _FAMILIES:
        raise KeyError(f"unknown tiny family {family!r}; one of {', '.join(_FAMILIES)}")
    return DecoderConfig(**{**_TINY, **_FAMILIES[family], **overrides})
