"""Shared checks of the parity tests: a transformers model on random weights, our logits from its Hub
safetensors, and transformers loading what the trainer saves."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers
from safetensors import safe_open

from trainer.components.hf_io import save_hf_model
from trainer.distributed.parallelize import full_state_dict
from trainer.models import CausalLM, DecoderConfig, load_weights_into


def random_hf_model(cfg: dict, attn: str = "eager") -> transformers.PreTrainedModel:
    """transformers' model for `cfg`, weights N(0, 0.2); a DeepSeek-V3 selection bias N(0, 0.3), since a
    non-zero bias must change the choice of experts."""
    hf_config = transformers.AutoConfig.for_model(**cfg)
    hf_config._attn_implementation = attn
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hf_config).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.2)
        for name, buffer in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buffer.normal_(0.0, 0.3)
    return model


def hub_names(folder: Path) -> set[str]:
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        return set(f.keys())


def assert_logits_equal_from_hub(hf_model, folder: Path, attn: str = "sdpa") -> None:
    ours = CausalLM(DecoderConfig.from_file(folder, attn_implementation=attn)).eval()
    load_weights_into(ours, folder)
    ids = torch.randint(0, 256, (2, 13), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), hf_model(ids).logits, atol=1e-5, rtol=1e-5)


def assert_transformers_loads_what_we_save(hf_model, folder: Path, out: Path) -> None:
    ours = CausalLM(DecoderConfig.from_file(folder)).eval()
    load_weights_into(ours, folder)
    save_hf_model(full_state_dict(ours), ours.config, out)
    assert hub_names(out) == hub_names(folder), "our checkpoint uses the Hub's names"
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(reloaded).__name__ == type(hf_model).__name__
    ids = torch.randint(0, 256, (1, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids).logits, ours(ids), atol=1e-5, rtol=1e-5)
