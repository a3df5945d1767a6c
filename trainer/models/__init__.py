"""Llama-family decoders (Llama, Mistral, Qwen2, Qwen3) with Hugging Face parameter names.

The names below load on first use (PEP 562), so ``trainer.models.config`` (pure Python) can be
imported by the torch-free pre-flight checks without importing torch through the builder.
"""

from importlib import import_module
from typing import Any

_SOURCES = {
    "InitSource": "builder",
    "assign_full_tensor": "builder",
    "build_causal_lm": "builder",
    "clean_fqn": "builder",
    "init_weights": "builder",
    "is_meta": "builder",
    "load_weights_into": "builder",
    "materialize": "builder",
    "resolve_config": "builder",
    "unwrap_model": "builder",
    "DecoderConfig": "config",
    "ModelConfigError": "config",
    "CausalLM": "decoder",
    "DecoderBlock": "decoder",
}

__all__ = sorted(_SOURCES)


def __getattr__(name: str) -> Any:
    if name not in _SOURCES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"trainer.models.{_SOURCES[name]}"), name)
    globals()[name] = value
    return value
