"""Megatron's pipeline layout read as Megatron-Core reads it (pipeline_parallel_layer_layout.py), and what its
validate_layer_layout refuses."""

from __future__ import annotations

import pytest

from service.layouts.pipeline_layout import (
    LayoutSyntaxError,
    empty_stages,
    even_layout,
    layout_problems,
    parse_layout,
)


def test_the_string_form_unrolls_groups_and_repeats_as_megatron_does():
    # parse_str_to_list's own docstring example: "Ettt|(tt|)*29,m|L" -> [E,t,t,t] + [t,t]*29 + [m] + [L]
    layout = parse_layout("Ettt|(tt|)*29,m|L")
    assert len(layout.stages) == 32
    assert layout.stages[0] == ("embedding", "decoder", "decoder", "decoder")
    assert layout.stages[1:30] == (("decoder", "decoder"),) * 29
    assert layout.stages[30:] == (("mtp",), ("loss",))


def test_the_list_form_names_layer_types_and_equals_the_string():
    written = [["embedding", "decoder"], ["Decoder", " loss"]]
    assert parse_layout(written) == parse_layout("Et|tL")


@pytest.mark.parametrize("value, said", [("Et|x|tL", "'x'"), ([["embedding"], "decoder"], "list of stages"),
                                          ([["embedding", "attention"]], "attention"), (3, "not a int")])
def test_what_megatrons_parser_asserts_on_is_a_syntax_error(value, said):
    with pytest.raises(LayoutSyntaxError, match=said):
        parse_layout(value)


def test_a_repeat_that_would_build_a_huge_string_is_refused():
    with pytest.raises(LayoutSyntaxError, match="more than"):
        parse_layout("E(t)*99999999L")


def test_the_index_marker_carries_no_layout():
    assert parse_layout("explicit") is None


def test_a_layout_that_places_the_model_has_no_problem():
    assert layout_problems(parse_layout("Et*15|t*16|t*15|t*15L"), 61, 4, None, None) == []
    assert layout_problems(parse_layout("Et*7|t*8|t*8|t*8|t*8|t*8|t*7|t*7mL"), 61, 4, 2, 1) == []


@pytest.mark.parametrize("layout, pp, vp, mtp, said", [
    ("Et*15|t*15|t*15|t*15L", 4, None, None, "places 60 decoder layers (t), the model has 61"),
    ("Et*15|t*16|t*15|t*15L", 3, None, None, "do not divide over pp_size 3"),
    ("Et*15|t*16|t*15|t*15L", 2, 4, None, "vp_size is 4"),
    ("t*15|Et*16|t*15|t*15L", 4, None, None, "first layer is not the embedding"),
    ("Et*15|t*16|t*15|Lt*15", 4, None, None, "last layer is not the loss"),
    ("Et*15|t*16|t*15|t*15L", 4, None, 1, "places 0 mtp layers (m), the model config has mtp_num_layers 1"),
    ("Et*15|t*16|t*15m|t*15L", 4, None, 1, "decoder layers after an mtp layer"),
    ("EEt*15|t*16|t*15|t*15L", 4, None, None, "embedding (E) 2 times"),
])
def test_what_validate_layer_layout_asserts_is_a_problem(layout, pp, vp, mtp, said):
    problems = layout_problems(parse_layout(layout), 61, pp, vp, mtp)
    assert any(said in p for p in problems), problems


def test_the_schedule_order_counts_vp_chunks_rank_by_rank():
    # PP 2 x VP 2: stages are written chunk 0 of rank 0, rank 1, then chunk 1; the flat order is the written one
    assert layout_problems(parse_layout("Et|t|t|tL"), 4, 2, 2, None) == []
    assert empty_stages(parse_layout("Et||t|ttL")) == [1]


@pytest.mark.parametrize("layers, pp, vp, mtp", [(61, 4, 1, 0), (61, 8, 2, 1), (126, 16, 1, 0), (46, 4, 3, 0)])
def test_the_even_layout_offered_places_the_model(layers, pp, vp, mtp):
    written = even_layout(layers, pp, vp, mtp)
    layout = parse_layout(written)
    assert layout_problems(layout, layers, pp, vp, mtp) == [] and not empty_stages(layout)
    counts = [stage.count("decoder") for stage in layout.stages]
    assert max(counts) - min(counts) <= 1 and counts[0] <= counts[1]  # the extra layers go to middle stages


def test_no_even_layout_when_a_stage_would_hold_no_decoder_layer():
    assert even_layout(3, 2, 2) is None
