"""LoRA: frozen base, adapters in the Hugging Face PEFT layout (loaded by `peft` itself), merging."""

from __future__ import annotations

import json
from pathlib import Path

import peft
import pytest
import torch
import transformers
from safetensors.torch import load_file

from trainer.components.hf_io import save_hf_model
from trainer.components.peft import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    LoRALinear,
    apply_lora,
    load_adapter,
    lora_scalings,
    lora_state_dict,
    merge_lora,
    merged_state_dict,
    save_adapter,
)
from trainer.contract.config import PeftSection
from trainer.contract.overrides import ConfigError
from trainer.loss import causal_lm_loss
from trainer.models import CausalLM, init_weights, materialize
from trainer.models.builder import InitSource
from trainer.models.presets import tiny_config
from trainer.recipes.model_io import apply_peft

LORA = dict(rank=4, alpha=8.0, dropout=0.0, target_modules=["q_proj", "v_proj", "gate_proj", "down_proj"])
IDS = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(31))


def base_model(family: str = "qwen3_tied") -> CausalLM:
    model = CausalLM(tiny_config(family))
    init_weights(model, seed=30)
    return model.eval()


def trained_lora_model(family: str = "qwen3_tied") -> CausalLM:
    """A LoRA model after a few steps, so that B is no longer zero."""
    model = apply_lora(base_model(family), **LORA)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    labels = torch.roll(IDS, -1, dims=1)
    for _ in range(3):
        loss_sum, count = causal_lm_loss(model, IDS, labels)
        (loss_sum / count).backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.eval()


def test_lora_freezes_base_and_starts_equal() -> None:
    base = base_model()
    with torch.no_grad():
        expected = base(IDS)
    model = apply_lora(base, **LORA)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    assert len(trainable) == 2 * 4 * 2  # (A, B) x 4 targets x 2 layers
    q_proj = model.model.layers[0].self_attn.q_proj
    assert isinstance(q_proj, LoRALinear) and q_proj.lora_A.weight.dtype == torch.float32
    assert torch.count_nonzero(q_proj.lora_B.weight) == 0 and torch.count_nonzero(q_proj.lora_A.weight) > 0
    assert not isinstance(model.model.layers[0].self_attn.k_proj, LoRALinear)
    # The base weight keeps its Hugging Face name.
    assert "model.layers.0.self_attn.q_proj.weight" in model.state_dict()
    with torch.no_grad():
        torch.testing.assert_close(model(IDS), expected)


def test_training_moves_only_adapters() -> None:
    before = {n: p.clone() for n, p in base_model().named_parameters()}
    model = trained_lora_model()
    for name, param in model.named_parameters():
        if ".lora_" in name:
            continue
        assert torch.equal(param, before[name]), name
    assert torch.count_nonzero(model.model.layers[0].self_attn.q_proj.lora_B.weight) > 0


def test_adapter_files_have_peft_layout_and_load_back(tmp_path: Path) -> None:
    model = trained_lora_model()
    save_adapter(model, tmp_path, base_model_name_or_path="tiny/base", **LORA)
    tensors = load_file(str(tmp_path / ADAPTER_WEIGHTS))
    assert "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" in tensors
    assert tensors["base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"].shape == (32, 4)
    assert len(tensors) == 16
    config = json.loads((tmp_path / ADAPTER_CONFIG).read_text())
    assert ((config["peft_type"], config["task_type"], config["r"], config["lora_alpha"])
            == ("LORA", "CAUSAL_LM", 4, 8.0))
    assert config["target_modules"] == sorted(LORA["target_modules"])

    fresh = load_adapter(base_model(), tmp_path)
    with torch.no_grad():
        torch.testing.assert_close(fresh.eval()(IDS), model(IDS))
    assert lora_state_dict(fresh).keys() == tensors.keys()


def test_all_linear_targets_every_linear_but_the_head_and_peft_loads_it(tmp_path: Path) -> None:
    model = apply_lora(base_model("llama3"), rank=4, alpha=8.0, target_modules="all-linear")
    wrapped = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, LoRALinear)}
    assert wrapped == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    base = base_model("llama3")
    save_hf_model(base.state_dict(), base.config, tmp_path / "base")
    save_adapter(model, tmp_path / "adapter", base_model_name_or_path=str(tmp_path / "base"), rank=4, alpha=8.0,
                 dropout=0.0, target_modules="all-linear")
    assert json.loads((tmp_path / "adapter" / ADAPTER_CONFIG).read_text())["target_modules"] == "all-linear"
    hf_lora = peft.PeftModel.from_pretrained(transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "base"),
                                             tmp_path / "adapter")
    hf_wrapped = {n.rsplit(".", 1)[-1] for n, m in hf_lora.named_modules() if hasattr(m, "lora_A")}
    assert hf_wrapped == wrapped


def test_peft_library_loads_the_adapter_onto_transformers(tmp_path: Path) -> None:
    """transformers base + peft.PeftModel.from_pretrained(our adapter) gives our logits."""
    model = trained_lora_model("llama3")
    base = base_model("llama3")
    save_hf_model(base.state_dict(), base.config, tmp_path / "base")
    save_adapter(model, tmp_path / "adapter", base_model_name_or_path=str(tmp_path / "base"), **LORA)
    hf_base = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "base")
    hf_lora = peft.PeftModel.from_pretrained(hf_base, tmp_path / "adapter").eval()
    with torch.no_grad():
        torch.testing.assert_close(hf_lora(IDS).logits, model(IDS), atol=1e-5, rtol=1e-5)
    assert hf_lora.peft_config["default"].r == 4


def test_merge_keeps_outputs_and_removes_adapters() -> None:
    model = trained_lora_model()
    with torch.no_grad():
        expected = model(IDS)
    from trainer.distributed.parallelize import full_state_dict

    merged_from_state = merged_state_dict(full_state_dict(model), lora_scalings(model))
    merged = merge_lora(model)
    assert not any(isinstance(m, LoRALinear) for m in merged.modules())
    assert not any(".lora_" in n for n in merged.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(merged(IDS), expected, atol=1e-5, rtol=1e-5)
    for name, tensor in merged.state_dict().items():
        torch.testing.assert_close(merged_from_state[name], tensor, msg=name)


def test_lora_on_meta_model_matches_eager_lora() -> None:
    eager = apply_lora(base_model("llama3"), seed=30, **LORA)
    with torch.device("meta"):
        meta = CausalLM(tiny_config("llama3"))
    apply_lora(meta, **LORA)
    materialize(meta, "cpu", InitSource(seed=30))
    for (name, a), (_, b) in zip(eager.state_dict().items(), meta.state_dict().items()):
        assert torch.equal(a, b), name


def test_bad_lora_settings_are_explained(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="matched no linear layer"):
        apply_lora(base_model(), rank=4, alpha=8, target_modules=["qkv"])
    with pytest.raises(ValueError, match="peft.rank"):
        apply_lora(base_model(), rank=0, alpha=8)
    with pytest.raises(ValueError, match="no LoRA adapters"):
        save_adapter(base_model(), tmp_path, base_model_name_or_path=None, **LORA)
    with pytest.raises(FileNotFoundError, match="not a PEFT adapter folder"):
        load_adapter(base_model(), tmp_path)


def test_lora_on_meta_model_with_pretrained_weights(tmp_path: Path) -> None:
    """Base weights come from the safetensors, adapters (absent there) from the seeded init."""
    from trainer.models import build_causal_lm

    base = base_model("qwen2")
    save_hf_model(base.state_dict(), base.config, tmp_path)
    model = apply_lora(build_causal_lm(str(tmp_path), device="meta", load_weights=True, seed=30), **LORA)
    materialize(model, "cpu")
    for name, tensor in base.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name
    q_proj = model.model.layers[1].self_attn.q_proj
    assert torch.count_nonzero(q_proj.lora_A.weight) > 0 and torch.count_nonzero(q_proj.lora_B.weight) == 0
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(IDS), base(IDS))


LM_HEAD_IDS = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(7))


LM_HEAD_LABELS = torch.roll(LM_HEAD_IDS, -1, dims=1)


def _model(family: str) -> CausalLM:
    model = CausalLM(tiny_config(family))
    init_weights(model, seed=5)
    return model


def test_a_lora_adapter_on_the_lm_head_trains_with_the_default_loss():
    model = apply_lora(_model("llama"), rank=4, alpha=8.0, target_modules=["lm_head", "q_proj"])
    head = model.lm_head
    assert isinstance(head, LoRALinear)
    with torch.no_grad():
        head.lora_B.weight.normal_()  # so that lora_A gets a gradient too
    loss_sum, count = causal_lm_loss(model, LM_HEAD_IDS, LM_HEAD_LABELS)  # chunked: auto
    (loss_sum / count).backward()
    assert head.lora_A.weight.grad is not None and head.lora_A.weight.grad.abs().sum() > 0
    assert head.lora_B.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="loss_fn.chunked: auto or false"):
        causal_lm_loss(model, LM_HEAD_IDS, LM_HEAD_LABELS, chunked=True)


def test_an_lm_head_adapter_of_a_tied_model_is_refused_when_it_would_be_merged():
    section = PeftSection(target_modules=["lm_head", "q_proj"], merge_on_save=True)
    with pytest.raises(ConfigError, match="tied embeddings cannot be merged"):
        apply_peft(_model("qwen3_tied"), section)
    apply_peft(_model("qwen3_tied"), section.model_copy(update={"merge_on_save": False}))
    apply_peft(_model("llama"), section)  # untied: merged into its own lm_head.weight
