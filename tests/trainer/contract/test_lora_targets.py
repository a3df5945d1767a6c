"""LoRA targets: each must adapt a linear layer the decoder has (dotted paths and layer indices checked before
launch), and targets that select the same modules are one PEFT setup on resume."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("targets", [["q_proj", "v_prj"], ["q_proj", "embed_tokens"]])
def test_every_lora_target_must_adapt_a_linear(targets):
    """A typo beside a good entry trained nothing there, while adapter_config.json listed it."""
    from trainer.components.peft import apply_lora
    from trainer.contract.model_checks import check_peft_targets
    from trainer.contract.overrides import ConfigError
    from trainer.models import build_causal_lm

    with pytest.raises(ConfigError, match=targets[1]):
        check_peft_targets(targets, default_loader=True)
    with pytest.raises(ValueError, match=targets[1]):
        apply_lora(build_causal_lm("tiny-llama", device="meta"), rank=4, alpha=8, target_modules=targets)
    apply_lora(build_causal_lm("tiny-llama", device="meta"), rank=4, alpha=8, target_modules=["q_proj", "lm_head"])


@pytest.mark.parametrize("target", ["self_atn.q_proj", "mlp.q_proj", "layers.x.self_attn.q_proj"])
def test_a_dotted_lora_target_the_decoder_lacks_is_refused_before_launch(target):
    """Only the last name was checked; the workers refused it after start-up."""
    from trainer.contract.model_checks import check_peft_targets
    from trainer.contract.overrides import ConfigError

    with pytest.raises(ConfigError, match="matches no linear layer"):
        check_peft_targets(["q_proj", target], default_loader=True)
    check_peft_targets(["model.layers.3.self_attn.q_proj", "mlp.down_proj", "lm_head"], default_loader=True)


@pytest.mark.parametrize("target", ["layers.01.mlp.up_proj", "layers.\uff11.mlp.up_proj", "layers.\u00b2.mlp.up_proj"])
def test_a_layer_index_no_module_has_is_refused_before_launch(target):
    """Str.isdigit() took `01`, a fullwidth or a superscript digit as a layer index."""
    from trainer.contract.model_checks import check_peft_targets
    from trainer.contract.overrides import ConfigError

    with pytest.raises(ConfigError, match="matches no linear layer"):
        check_peft_targets([target], default_loader=True)


def test_lora_targets_that_select_the_same_modules_are_one_setup():
    """A repeated name or a dotted suffix was "another PEFT setup" on resume."""
    from trainer.contract.resume_checks import model_signature

    lora = {"method": "lora", "rank": 8, "alpha": 16}
    plain = model_signature(None, {**lora, "target_modules": ["q_proj", "v_proj"]})["peft"]
    for same in (["v_proj", "q_proj", "q_proj"], ["self_attn.q_proj", "v_proj"]):
        assert model_signature(None, {**lora, "target_modules": same})["peft"] == plain
    assert model_signature(None, {**lora, "target_modules": ["q_proj", "k_proj"]})["peft"] != plain


def test_a_lora_target_of_one_layer_is_another_setup_than_every_layer():
    """`model.layers.0.self_attn.q_proj` was folded to `q_proj`."""
    from trainer.contract.resume_checks import model_signature

    lora = {"method": "lora", "rank": 8, "alpha": 16}
    one = model_signature(None, {**lora, "target_modules": ["model.layers.0.self_attn.q_proj"]})["peft"]
    assert one != model_signature(None, {**lora, "target_modules": ["q_proj"]})["peft"]


def test_spellings_of_one_layer_target_are_one_setup():
    """The same one-layer module spelt two ways, or inside an every-layer target."""
    from trainer.contract.resume_checks import model_signature

    def signature(targets):
        return model_signature(None, {"method": "lora", "rank": 8, "alpha": 16, "target_modules": targets})["peft"]

    assert signature(["layers.1.mlp.up_proj"]) == signature(["model.layers.1.mlp.up_proj"])
    assert signature(["q_proj", "model.layers.0.self_attn.q_proj"]) == signature(["q_proj"])
    assert signature(["layers.1.mlp.up_proj"]) != signature(["layers.0.mlp.up_proj"])


def test_other_families_keep_their_resume_signature() -> None:
    """The DeepSeek-V3 fields join the signature only where set: a Qwen3-MoE checkpoint still resumes."""
    from trainer.contract.resume_checks import model_signature
    from trainer.models import resolve_config

    sig = model_signature(resolve_config("tiny-moe")[0], None)
    assert "latent_attention" not in sig
    assert sorted(sig["experts"]) == ["expert_intermediate_size", "num_experts", "top_k"]
