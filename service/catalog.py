"""The bundled index as both doors list it: `recipe-advisor models|hardware --format json` and GET
/v1/models, /v1/hardware answer the same rows, with the same keys in the same order (the HTTP schemas,
``service.http.schemas.responses``, describe each key)."""

from __future__ import annotations

from typing import Optional

import recipe_index as index

MODEL_KEYS = ("id", "hf_id", "aliases", "family", "architecture", "num_hidden_layers", "hidden_size",
              "num_attention_heads", "num_key_value_heads", "num_experts", "published_total_params")
HARDWARE_KEYS = ("name", "aliases", "description", "arch", "memory_gib", "bf16_tflops", "fp8_tflops", "fp4_tflops",
                 "hbm_tbps", "nvlink_domain", "gpus_per_node", "intra_node_gbps", "inter_node_gbps")


def _row(card, keys: tuple[str, ...]) -> dict:
    data = card.model_dump(mode="json")
    return {key: data[key] for key in keys}


def model_rows(family: Optional[str] = None) -> list[dict]:
    """One row per bundled model card, of a family (the card's or its recipes') when given."""
    return [_row(card, MODEL_KEYS) for card in index.list_models(family=family)]


def hardware_rows() -> list[dict]:
    return [_row(card, HARDWARE_KEYS) for card in index.list_hardware()]
