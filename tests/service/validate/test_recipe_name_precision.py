"""RA-C005 judges a Bridge recipe name by what Bridge's recipe trains in, where the index knows it:
three upstream names say bf16 for recipes that run fp8cs (Megatron Bridge's recipe consistency checks)."""

from __future__ import annotations

import pytest

from service.recommend.recommendation import recommend
from service.validate.document import validate_text
from tests.paths import REPO

RECIPES = REPO / "recipe_index" / "recipes" / "megatron"
NEMOTRONH = RECIPES / "nemotronh" / "nemotronh_56b_pretrain_8gpu_h100_bf16.yaml"
LLAMA_BF16 = RECIPES / "llama" / "llama3_8b_pretrain_2gpu_h100_bf16.yaml"


def name_findings(text: str) -> list:
    return [f for f in validate_text(text, "c.yaml").findings if f.code == "RA-C005"]


@pytest.mark.parametrize("stem", ["nemotronh_56b_pretrain_8gpu_h100_bf16", "nemotronh_47b_pretrain_8gpu_h100_bf16",
                                  "nemotron_nano_12b_v2_pretrain_4gpu_h100_bf16"])
def test_a_recipe_that_trains_as_bridge_does_gets_an_info_not_a_warning(stem):
    (finding,) = name_findings((RECIPES / "nemotronh" / f"{stem}.yaml").read_text())
    assert finding.severity == "info"
    assert "says bf16 in its name but trains in fp8 itself" in finding.message


def test_the_name_matching_the_config_does_not_hide_what_bridge_runs():
    text = NEMOTRONH.read_text().replace("precision_recipe: fp8cs", "precision_recipe: bf16")
    text = text.replace("\nprecision: fp8\n", "\nprecision: bf16\n")
    (finding,) = name_findings(text)
    assert finding.severity == "warning"
    assert "Bridge's recipe trains in fp8" in finding.message and "set precision: fp8" in finding.fix


def test_a_recipe_whose_name_is_right_keeps_the_deliberate_change_warning():
    text = LLAMA_BF16.read_text().replace("precision_recipe: bf16", "precision_recipe: fp8cs")
    text = text.replace("\nprecision: bf16\n", "\nprecision: fp8\n")
    (finding,) = name_findings(text)
    assert finding.severity == "warning" and "is Megatron Bridge's bf16 recipe" in finding.message
    assert name_findings(LLAMA_BF16.read_text()) == []


def test_recommend_no_longer_passes_the_upstream_name_on_as_a_warning():
    rec = recommend("nemotronh-56b", 32, "h100")
    assert [f.severity for f in rec.findings if f.code == "RA-C005"] == ["info"]
    bf16 = recommend("nemotronh-56b", 32, "h100", precision="bf16")
    assert [f.severity for f in bf16.findings if f.code == "RA-C005"] == ["warning"]
