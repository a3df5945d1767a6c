"""Known issues: a reviewed recipe waives only its reviewed codes, never the allow-list, and the index's
upstream issues stay visible as warnings."""

from __future__ import annotations

from service.validate.document import validate_text
from tests.paths import RECIPES

FOREIGN_TARGET = """metadata:
  name: {name}
  known_issues: [{codes}]
model:
  pretrained_model_name_or_path: tiny-llama
dataset:
  _target_: trainer.data.MockDataset
  seq_length: 64
optimizer:
  _target_: evilmod.f
  lr: 0.1
"""


def severities(text: str, code: str) -> list[str]:
    return [f.severity for f in validate_text(text, "c.yaml").findings if f.code == code]


def test_known_issues_cannot_waive_the_allow_list():
    text = FOREIGN_TARGET.format(name="evil", codes="RA-S001, RA-S002, RA-C001")
    assert severities(text, "RA-S001") == ["error"]


def test_a_reviewed_recipe_name_waives_only_its_reviewed_codes():
    text = FOREIGN_TARGET.format(name="deepseek_v3_pretrain_128gpu_vr200_bf16", codes="RA-L007, RA-S001")
    assert severities(text, "RA-S001") == ["error"]


def test_the_index_recipes_keep_their_upstream_issues_visible_as_warnings():
    path = RECIPES / "megatron" / "deepseek" / "deepseek_v3_pretrain_128gpu_vr200_bf16.yaml"
    findings = [f for f in validate_text(path.read_text(), str(path)).findings if f.code == "RA-L007"]
    assert [f.severity for f in findings] == ["warning"]
    assert findings[0].message.startswith("known upstream issue, kept as shipped")
