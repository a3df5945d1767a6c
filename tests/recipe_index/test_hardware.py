"""Hardware cards: complete, sourced, and found by name or alias."""

from __future__ import annotations

import re

import pytest

from recipe_index import HardwareCard, UnknownHardwareError, get_hardware, list_hardware
from recipe_index.hardware import HARDWARE_FILE

REQUIRED = ["a100-40gb", "a100-80gb", "h100", "h200", "b200", "b300", "gb200", "gb300", "l40s", "cpu", "vr200", "r100"]
NUMERIC = ["memory_gib", "bf16_tflops", "fp8_tflops", "fp4_tflops", "hbm_tbps", "nvlink_domain", "gpus_per_node",
           "intra_node_gbps", "inter_node_gbps"]


def test_required_cards_exist():
    assert sorted(c.name for c in list_hardware()) == sorted(REQUIRED)


def test_every_value_has_a_source_comment():
    """Each numeric field line in hardware.yaml carries a `# source` comment."""
    lines = HARDWARE_FILE.read_text().splitlines()
    field_lines = [ln for ln in lines if re.match(rf"^\s+({'|'.join(NUMERIC)}):", ln)]
    assert len(field_lines) == len(NUMERIC) * len(REQUIRED)
    for line in field_lines:
        value, _, comment = line.partition("#")
        assert len(comment.strip()) > 10, f"no source for: {line.strip()}"


@pytest.mark.parametrize("card", list_hardware(), ids=lambda c: c.name)
def test_card_values_are_complete_and_sane(card: HardwareCard):
    assert card.memory_gib > 0 and card.bf16_tflops > 0 and card.hbm_tbps > 0
    assert card.nvlink_domain >= 1 and card.gpus_per_node >= 1
    assert card.intra_node_gbps > 0 and card.inter_node_gbps > 0
    assert {"compute", "node"} <= set(card.sources)
    assert card.description
    if card.fp8_tflops is not None:
        assert card.fp8_tflops >= card.bf16_tflops
    if card.fp4_tflops is not None:
        assert card.fp4_tflops >= (card.fp8_tflops or 0)


def test_precision_support_follows_the_architecture():
    assert not get_hardware("a100-80gb").supports_fp8
    assert get_hardware("h100").supports_fp8 and not get_hardware("h100").supports_fp4
    assert get_hardware("b200").supports_fp4
    assert get_hardware("h100").peak_tflops("fp8") == 1979
    assert get_hardware("h100").peak_tflops("fp32") == pytest.approx(989 / 2)


def test_nvl72_racks_share_one_nvlink_domain_over_four_gpu_trays():
    for name in ("gb200", "gb300", "vr200"):
        card = get_hardware(name)
        assert (card.nvlink_domain, card.gpus_per_node) == (72, 4)
    assert get_hardware("h100").nvlink_domain == get_hardware("h100").gpus_per_node == 8


@pytest.mark.parametrize("alias,name", [("H100", "h100"), ("h100-sxm", "h100"), ("GB200-NVL72", "gb200"),
                                        ("a100_80gb", "a100-80gb"), ("local", "cpu")])
def test_aliases_are_case_insensitive(alias, name):
    assert get_hardware(alias).name == name


def test_unknown_hardware_lists_known_names():
    with pytest.raises(UnknownHardwareError) as info:
        get_hardware("h10")
    assert isinstance(info.value, ValueError)
    assert "h100" in info.value.known and "h100" in info.value.suggestions
    assert "Known:" in str(info.value) and "gb300" in str(info.value)


@pytest.mark.parametrize("typo, first", [("h1000", "h100"), ("gb20", "gb200"), ("H100_SXM5", "h100")])
def test_suggestions_name_each_card_once_best_first(typo, first):
    """Aliases are separate lookup keys of one card; a near miss must not repeat that card."""
    with pytest.raises(UnknownHardwareError) as err:
        get_hardware(typo)
    suggestions = err.value.suggestions
    assert suggestions[0] == first
    assert len(suggestions) == len(set(suggestions)) == 3
    assert f"Did you mean {', '.join(suggestions)}?" in str(err.value)


def test_closest_names_keeps_order_and_fills_n_distinct_names():
    from recipe_index.errors import closest_names

    index = {"h100": "H100", "h100-sxm": "H100", "h100-pcie": "H100", "h200": "H200", "r100": "R100"}
    near = closest_names("h100-", index, str.lower, n=3)
    assert near[0] == "h100" and sorted(near[1:]) == ["h200", "r100"]  # h200 and r100 tie
    assert closest_names("h100-", index, str.lower, n=1) == ["h100"]
    assert closest_names("zzz", index, str.lower, n=3) == []
