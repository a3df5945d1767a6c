"""Building, initialising, saving and loading decoders (Hugging Face files in and out)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers

from trainer.components.hf_io import INDEX_FILE, SINGLE_FILE, WeightsNotFoundError, load_hf_state_dict, save_hf_model
from trainer.models import DecoderConfig, ModelConfigError, build_causal_lm, init_weights, materialize
from trainer.models.presets import tiny_config


def write_config(folder: Path, config: DecoderConfig) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config.to_hf()))
    return folder


def test_config_round_trips_through_hf_and_autoconfig(tmp_path: Path) -> None:
    for family in ("llama3", "qwen2", "qwen3_tied", "mistral"):
        config = tiny_config(family)
        assert DecoderConfig.from_hf(config.to_hf()).to_hf() == config.to_hf()
        hf = transformers.AutoConfig.from_pretrained(write_config(tmp_path / family, config))
        back = DecoderConfig.from_hf(hf.to_dict())
        assert (back.model_type, back.rope_scaling, back.rope_theta) == (
            config.model_type, config.rope_scaling, config.rope_theta,
        )
        assert (back.num_key_value_heads, back.head_dim, back.tie_word_embeddings, back.sliding_window) == (
            config.num_key_value_heads, config.head_dim, config.tie_word_embeddings, config.sliding_window,
        )


def test_legacy_rope_keys_read_like_rope_parameters() -> None:
    base = tiny_config("llama").to_hf()
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16}
    legacy = {**base, "rope_theta": 5e5, "rope_scaling": scaling, "rope_parameters": None}
    v5 = {**base, "rope_scaling": None, "rope_theta": None, "rope_parameters": {**scaling, "rope_theta": 5e5}}
    a, b = DecoderConfig.from_hf(legacy), DecoderConfig.from_hf(v5)
    assert (a.rope_theta, a.rope_scaling) == (b.rope_theta, b.rope_scaling) == (5e5, scaling)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model_type": "gpt2"}, "model_type 'gpt2'"),
        ({"num_local_experts": 8}, "mixture-of-experts"),
        ({"rope_scaling": {"rope_type": "longrope", "factor": 4.0}}, "rope_type 'longrope'"),
        ({"rope_scaling": {"rope_type": "yarn"}}, "rope_scaling (yarn) lacks factor"),
        ({"num_key_value_heads": 3}, "num_key_value_heads (3)"),
        ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
        ({"vocab_size": None}, "lacks vocab_size"),
    ],
)
def test_unsupported_configs_are_named(change: dict, message: str) -> None:
    with pytest.raises(ModelConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        DecoderConfig.from_hf({**tiny_config("llama").to_hf(), **change})


def test_bad_config_file_names_the_line(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "llama",\n "vocab_size": }')
    with pytest.raises(ModelConfigError, match=r"config.json:2: not valid JSON"):
        build_causal_lm(str(tmp_path))
    with pytest.raises(ModelConfigError, match="no such file"):
        DecoderConfig.from_file(tmp_path / "absent")


def test_meta_init_equals_direct_init_and_seed_decides(tmp_path: Path) -> None:
    folder = write_config(tmp_path, tiny_config("qwen3_tied"))
    direct = build_causal_lm(str(folder), seed=3)
    meta = build_causal_lm(str(folder), device="meta", seed=3)
    assert all(p.is_meta for p in meta.parameters())
    materialize(meta, "cpu")
    assert meta.lm_head.weight is meta.model.embed_tokens.weight
    for (name, a), (_, b) in zip(direct.state_dict().items(), meta.state_dict().items()):
        assert torch.equal(a, b), name
    other = build_causal_lm(str(folder), seed=4)
    assert not torch.equal(other.model.embed_tokens.weight, direct.model.embed_tokens.weight)
    # Norms start at one, weights with the config's std.
    assert torch.equal(direct.model.norm.weight, torch.ones(32))
    std = direct.model.layers[0].mlp.up_proj.weight.std().item()
    assert 0.015 < std < 0.025
    init_weights(other, seed=3)
    assert torch.equal(other.model.embed_tokens.weight, direct.model.embed_tokens.weight)


def test_dtype_is_applied(tmp_path: Path) -> None:
    model = build_causal_lm(str(write_config(tmp_path, tiny_config("llama"))), dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


@pytest.mark.parametrize("family", ["llama3", "qwen2", "qwen3_tied"])
@pytest.mark.parametrize("max_shard_bytes", [10**9, 20_000])
def test_saved_model_loads_in_transformers(tmp_path: Path, family: str, max_shard_bytes: int) -> None:
    model = build_causal_lm(str(write_config(tmp_path / "src", tiny_config(family))), seed=5).eval()
    out = tmp_path / "hf"
    files = save_hf_model(model.state_dict(), model.config, out, max_shard_bytes=max_shard_bytes)
    sharded = max_shard_bytes < 10**9
    assert (out / INDEX_FILE).is_file() == sharded and (out / SINGLE_FILE).is_file() != sharded
    if sharded:
        index = json.loads((out / INDEX_FILE).read_text())
        assert len(set(index["weight_map"].values())) > 1
        assert set(index["weight_map"]) == set(load_hf_state_dict(out))
    assert all(f.is_file() for f in files)

    hf_model = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    ids = torch.randint(0, 256, (2, 10), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        torch.testing.assert_close(hf_model(ids).logits, model(ids), atol=1e-5, rtol=1e-5)

    # And back: our builder loads the saved folder to the same weights.
    loaded = build_causal_lm(str(out), load_weights=True)
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


def test_load_weights_requires_all_tensors(tmp_path: Path) -> None:
    model = build_causal_lm(str(write_config(tmp_path / "src", tiny_config("llama"))))
    state = {k: v for k, v in model.state_dict().items() if k != "model.norm.weight"}
    save_hf_model(state, model.config, tmp_path / "partial")
    with pytest.raises(WeightsNotFoundError, match="model.norm.weight"):
        build_causal_lm(str(tmp_path / "partial"), load_weights=True)
    with pytest.raises(WeightsNotFoundError, match="no model.safetensors"):
        build_causal_lm(str(tmp_path / "src"), load_weights=True)


def test_weights_from_hub_cache_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A repo id resolves to its snapshot in the Hugging Face cache with HF_HUB_OFFLINE=1."""
    cache = tmp_path / "hub"
    repo_dir = cache / "models--tiny-org--tiny-llama"
    snapshot = repo_dir / "snapshots" / ("a" * 40)
    source = build_causal_lm(str(write_config(tmp_path / "src", tiny_config("llama3"))), seed=9)
    save_hf_model(source.state_dict(), source.config, snapshot)
    (repo_dir / "refs").mkdir(parents=True)
    (repo_dir / "refs" / "main").write_text("a" * 40)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    model = build_causal_lm("tiny-org/tiny-llama", load_weights=True)
    assert model.config.rope_type == "llama3"
    assert torch.equal(model.lm_head.weight, source.lm_head.weight)
    with pytest.raises(WeightsNotFoundError, match="HF_HUB_OFFLINE"):
        build_causal_lm("tiny-org/absent-model", load_weights=True)


def test_bundled_ids_build_and_unknown_names_are_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    model = build_causal_lm("tiny-llama", seed=1)
    assert (model.config.hidden_size, model.config.vocab_size) == (64, 512)
    assert model(torch.tensor([[1, 2, 3]])).shape == (1, 3, 512)
    big = build_causal_lm("llama31-8b", device="meta")
    assert big.config.rope_type == "llama3" and 8.0e9 < big.config.num_parameters() < 8.1e9
    with pytest.raises(ModelConfigError, match=r"'tiny-lama'.*closest bundled ids: tiny-llama.*HF_HUB_OFFLINE"):
        build_causal_lm("tiny-lama")


def test_shape_mismatch_and_adapter_tensors_are_refused(tmp_path: Path) -> None:
    small = build_causal_lm(str(write_config(tmp_path / "small", tiny_config("llama"))))
    save_hf_model(small.state_dict(), small.config, tmp_path / "small")
    wide = write_config(tmp_path / "wide", tiny_config("llama", intermediate_size=96))
    for file in (tmp_path / "small").glob("*.safetensors"):
        (wide / file.name).write_bytes(file.read_bytes())
    with pytest.raises(ValueError,
                       match=r"mlp.*proj.weight: shape \(64, 32\) does not match the parameter's \(96, 32\)"):
        build_causal_lm(str(wide), load_weights=True)
    with pytest.raises(ValueError, match="LoRA tensors"):
        save_hf_model({"model.layers.0.self_attn.q_proj.lora_A.weight": torch.zeros(2, 32)}, small.config,
                      tmp_path / "x")


def test_a_hub_config_is_returned_not_dropped(monkeypatch, tmp_path):
    """resolve_config of a repo id read the config.json and returned None (its return sat in another function)."""
    import trainer.models.builder as builder

    path = write_config(tmp_path / "m", tiny_config("llama3")) / "config.json"
    monkeypatch.setattr("huggingface_hub.hf_hub_download", lambda repo, name, **kw: str(path))
    config, weights = builder.resolve_config("tiny-org/some-model")
    assert config is not None and config.rope_type == "llama3" and weights is None
