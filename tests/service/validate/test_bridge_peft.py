"""A Megatron Bridge ConfigContainer's `peft:` (LoRA, DoRA, CanonicalLoRA) is read as this product's `peft`: the goal
is PEFT, the same rules judge it, and a key Bridge would skip (a misspelt or Hugging Face name of a LoRA field) is an
error at its line with the field as the fix."""

from __future__ import annotations

import pytest

from service.configs.yamlio import load_yaml
from service.validate.document import validate_text
from service.validate.megatron.dialect import BRIDGE, read_bridge, translate

LLAMA_70B = """model:
  tensor_model_parallel_size: 8
  sequence_parallel: true
  num_layers: 80
  hidden_size: 8192
  num_attention_heads: 64
  num_query_groups: 8
  ffn_hidden_size: 28672
  vocab_size: 128256
  seq_length: 4096
train:
  micro_batch_size: 1
  global_batch_size: 32
dataset:
  seq_length: 4096
ddp:
  use_distributed_optimizer: false
mixed_precision: bf16_mixed
"""
LORA = """peft:
  _target_: megatron.bridge.peft.lora.LoRA
  dim: 16
  alpha: 32
  target_modules: [linear_qkv, linear_proj]
"""
# The same experiment in this product's format: the model by its card, LoRA on q/k/v/o.
OURS = """model:
  pretrained_model_name_or_path: meta-llama/Meta-Llama-3-70B
distributed:
  strategy: megatron
  tp_size: 8
  sequence_parallel: true
  use_distributed_optimizer: false
step_scheduler:
  local_batch_size: 1
  global_batch_size: 32
dataset:
  seq_length: 4096
precision: bf16
peft:
  method: lora
  rank: 16
  alpha: 32
  target_modules: [q_proj, k_proj, v_proj, o_proj]
"""


def _codes(text: str, path: str) -> set[tuple[str, str]]:
    return {(f.code, f.severity) for f in validate_text(text, path, gpus=8).findings}


def _peft(text: str) -> dict:
    return translate(read_bridge(load_yaml(text, "b.yaml")), BRIDGE, 8, None, "h100").data["peft"]


def test_a_bridge_peft_section_and_ours_give_the_same_findings_and_the_goal_is_peft():
    assert _codes(LLAMA_70B + LORA, "b.yaml") == _codes(OURS, "c.yaml")
    # Without the peft section every weight trains: the optimizer state no longer fits, as in our format.
    full = _codes(LLAMA_70B, "b.yaml")
    assert ("RA-M002", "warning") in full and ("RA-M002", "warning") not in _codes(LLAMA_70B + LORA, "b.yaml")
    assert full == _codes(OURS.split("peft:")[0], "c.yaml")


def test_bridge_names_and_defaults_are_read_as_the_class_has_them():
    assert _peft(LLAMA_70B + LORA) == {"method": "lora", "rank": 16, "alpha": 32,
                                       "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
    dora = _peft(LLAMA_70B + "peft:\n  _target_: megatron.bridge.peft.dora.DoRA\n")
    assert (dora["rank"], dora["alpha"]) == (32, 64)  # DoRA's own defaults, not LoRA's nor ours
    canonical = _peft(LLAMA_70B + "peft:\n  _target_: megatron.bridge.peft.canonical_lora.CanonicalLoRA\n"
                                  "  target_modules: [linear_q, linear_fc1_gate, '*.layers.0.*.linear_fc2']\n")
    assert canonical["target_modules"] == ["q_proj", "gate_proj", "*.layers.0.*.linear_fc2"]
    assert _peft(LLAMA_70B + "peft: lora\n")["rank"] == 32


def test_a_finding_on_a_peft_value_points_at_the_bridge_key_and_line():
    text = LLAMA_70B + LORA.replace("dim: 16", "dim: 0")
    (bad,) = [f for f in validate_text(text, "b.yaml", gpus=8).findings if f.severity == "error"]
    assert bad.code == "RA-C002" and bad.key == "peft.dim" and bad.line == LLAMA_70B.count("\n") + 3


@pytest.mark.parametrize("written, field", [("rank", "dim"), ("lora_alpha", "alpha"), ("dropuot", "dropout"),
                                            ("target_module", "target_modules"), ("r", "dim"),
                                            ("dropout_postion", "dropout_position")])
def test_a_key_bridge_would_skip_that_names_a_field_is_an_error_at_its_line(written, field):
    text = LLAMA_70B + LORA + f"  {written}: 8\n"
    (error,) = [f for f in validate_text(text, "b.yaml", gpus=8).findings if f.code == "RA-C015"]
    assert error.severity == "error" and error.key == f"peft.{written}"
    assert error.line == text.count("\n") and error.fix == f"rename peft.{written} to peft.{field}"


def test_other_keys_and_other_classes_are_left_alone():
    assert not [f for f in validate_text(LLAMA_70B + LORA + "  my_option: 3\n  lora_dtype: bf16\n", "b.yaml",
                                         gpus=8).findings if f.code == "RA-C015"]
    other = LLAMA_70B + "peft:\n  _target_: my_lab.peft.Adapter\n  rank: 8\n"
    assert not [f for f in validate_text(other, "b.yaml", gpus=8).findings if f.code == "RA-C015"]


def test_run_recipe_overrides_set_peft_fields_at_the_commands_line(tmp_path):
    from service.validate.document import validate_file

    (tmp_path / "dump.yaml").write_text(LLAMA_70B + LORA)
    script = tmp_path / "launch.sh"
    script.write_text("torchrun --nproc_per_node 8 run_recipe.py --config-file dump.yaml \\\n"
                      "    peft.dim=0 peft.lora_alpha=64\n")
    findings = validate_file(str(script), gpus=8).findings
    assert {(f.code, f.key, f.line) for f in findings if f.severity == "error"} == {
        ("RA-C002", "peft.dim", 2), ("RA-C015", "peft.lora_alpha", 2)}
