"""Torch-free check of what DeepSeek-V3's multi-head latent attention (MLA, trainer/models/deepseek.py) does
not combine with, shared by the pre-flight (the model's config.json or bundled card) and the workers (the
built config, trainer/recipes/model_io.py), so the two never disagree.

The bundled trainer's tensor parallel plan splits q/k/v/o projections by heads and its context parallel
exchanges the keys and values of the decoder's GQA attention; MLA's latent projections are neither split
nor exchanged, so a deepseek_v3 model runs with data, expert and pipeline parallel only.
"""

from __future__ import annotations

from typing import Optional

from trainer.contract.overrides import ConfigError

LATENT_ATTENTION_MODEL_TYPES = ("deepseek_v3",)


def check_latent_attention_layout(model_type: Optional[str], *, tp_size: int, cp_size: int) -> None:
    if model_type not in LATENT_ATTENTION_MODEL_TYPES:
        return
    for key, size, what, split in (("tp_size", tp_size, "tensor", "split"),
                                   ("cp_size", cp_size, "context", "exchange")):
        if size > 1:
            raise ConfigError(f"distributed.{key}: {size}: {what} parallel does not {split} the multi-head latent "
                              f"attention (MLA) of a {model_type} model in the bundled trainer; set {key}: 1 "
                              "(shard with FSDP2, and the experts with ep_size)")
