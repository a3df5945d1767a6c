"""Our decoder gives transformers' logits on tiny random configs of every supported family."""

from __future__ import annotations

import pytest
import torch
import transformers

from trainer.models import CausalLM, DecoderConfig
from trainer.models.presets import TINY_FAMILIES, tiny_config


def random_hf_model(config: DecoderConfig) -> transformers.PreTrainedModel:
    hf_config = transformers.AutoConfig.for_model(**config.to_hf())
    hf_config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hf_config).eval()
    with torch.no_grad():
        # Random norms and biases too, so that a missing or misplaced one shows.
        for param in model.parameters():
            param.normal_(0.0, 0.2)
    return model


def ours_from(hf_model: transformers.PreTrainedModel, **config_kwargs) -> CausalLM:
    config = DecoderConfig.from_hf(hf_model.config.to_dict(), **config_kwargs)
    model = CausalLM(config).eval()
    model.load_state_dict(hf_model.state_dict(), strict=True)
    return model


@pytest.mark.parametrize("family", TINY_FAMILIES)
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_logits_equal_transformers(family: str, attn: str) -> None:
    hf_model = random_hf_model(tiny_config(family))
    ours = ours_from(hf_model, attn_implementation=attn)
    ids = torch.randint(0, 256, (2, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf_model(ids).logits
        got = ours(ids)
    assert got.shape == (2, 11, 256)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_hf_class_and_features_match_family() -> None:
    assert type(random_hf_model(tiny_config("qwen2"))).__name__ == "Qwen2ForCausalLM"
    qwen2 = CausalLM(tiny_config("qwen2"))
    assert qwen2.model.layers[0].self_attn.q_proj.bias is not None
    assert qwen2.model.layers[0].self_attn.o_proj.bias is None
    qwen3 = CausalLM(tiny_config("qwen3_tied"))
    assert "model.layers.0.self_attn.q_norm.weight" in qwen3.state_dict()
    assert qwen3.lm_head.weight is qwen3.model.embed_tokens.weight
    llama = CausalLM(tiny_config("llama3"))
    assert not hasattr(llama.model.layers[0].self_attn, "q_norm")
    assert llama.lm_head.weight is not llama.model.embed_tokens.weight


def test_llama3_rope_scaling_changes_logits() -> None:
    """The llama3 scaling is live: the same weights without it give other logits (positions > 16)."""
    hf_model = random_hf_model(tiny_config("llama3"))
    scaled = ours_from(hf_model)
    plain_cfg = DecoderConfig.from_hf({**hf_model.config.to_dict(), "rope_scaling": None, "rope_parameters": None})
    plain = CausalLM(plain_cfg).eval()
    plain.load_state_dict(hf_model.state_dict())
    ids = torch.randint(0, 256, (1, 40), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (scaled(ids) - plain(ids)).abs().max() > 1e-3


@pytest.mark.parametrize("family, scaling", [
    ("llama", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}),
    ("qwen3", {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16, "beta_fast": 16,
               "attention_factor": 1.3, "truncate": False}),
])
def test_yarn_rope_equals_transformers(family: str, scaling: dict) -> None:
    """YaRN: blended frequencies and cos/sin times its attention factor, as transformers' default RoPE module."""
    hf_model = random_hf_model(tiny_config(family, rope_scaling=scaling))
    ours = ours_from(hf_model)
    assert ours.config.rope_type == "yarn"
    ids = torch.randint(0, 256, (1, 40), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), hf_model(ids).logits, atol=1e-5, rtol=1e-5)


def test_sliding_window_masks_beyond_window() -> None:
    """Mistral's window (6) matters past 6 tokens; sdpa and eager agree on it."""
    config = tiny_config("mistral")
    hf_model = random_hf_model(config)
    windowed, eager = ours_from(hf_model), ours_from(hf_model, attn_implementation="eager")
    full = CausalLM(tiny_config("mistral", sliding_window=None)).eval()
    full.load_state_dict(hf_model.state_dict())
    ids = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        a, b, c = windowed(ids), eager(ids), full(ids)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a[:, :6], c[:, :6], atol=1e-5, rtol=1e-5)
    assert (a[:, 6:] - c[:, 6:]).abs().max() > 1e-4


def test_position_ids_and_hidden() -> None:
    hf_model = random_hf_model(tiny_config("qwen3"))
    ours = ours_from(hf_model)
    ids = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(4))
    positions = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3, 4]] * 2)
    with torch.no_grad():
        expected = hf_model(ids, position_ids=positions, output_hidden_states=True)
        logits = ours(ids, position_ids=positions)
        hidden = ours(ids, position_ids=positions, return_hidden=True)
    torch.testing.assert_close(logits, expected.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(hidden, expected.hidden_states[-1], atol=1e-5, rtol=1e-5)
