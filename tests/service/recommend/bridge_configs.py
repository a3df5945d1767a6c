"""Configs the Megatron Bridge command tests start from: a library recipe's values, and a copy with sections
merged in."""

from __future__ import annotations

LIBRARY = {"metadata": {"kind": "library", "model": "llama3-8b"}, "optimizer": {"lr": 3e-4},
           "distributed": {"tp_size": 1, "cp_size": 2}, "dataset": {"preset": "mock", "seq_length": 8192}}


def with_sections(base: dict, **sections) -> dict:
    config = {key: dict(value) if isinstance(value, dict) else value for key, value in base.items()}
    for section, values in sections.items():
        config[section] = {**config.get(section, {}), **values}
    return config
