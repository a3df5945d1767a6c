"""Layouts tuned for the same model elsewhere, adapted to a request (service/plan/transfer.py), and the policy that
starts an MoE request from the nearest of them (service/plan/sources.py)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from recipe_index import find_bundled_model, get_hardware, list_recipes
from recipe_index.layouts import RecipeLayout
from service.estimate.bands import error_band
from service.plan.planner import explain_layout, make_request, plan
from service.plan.provenance import precision_token
from service.plan.shown import shown_rows
from service.plan.sources import TRANSFERRED, plan_choice
from service.plan.transfer import adapt, sources, transfers


def _layout(**values) -> RecipeLayout:
    base = dict(tp=1, pp=1, vp=None, cp=1, ep=1, etp=1, sp=False, micro_batch_size=1, recompute="none",
                fully_sharded=False)
    return RecipeLayout(**{**base, **values})


def test_the_count_is_absorbed_by_dp_and_the_change_is_named():
    request = make_request("gpt-oss-120b", 128, "h100", global_batch_size=512)
    layout, changes = adapt(_layout(tp=2, pp=4, ep=16), get_hardware("h100"), 64, request)
    assert (layout.tp, layout.pp, layout.ep) == (2, 4, 16)
    assert changes == ("DP 8 -> 16",)


def test_an_expert_group_inside_the_nvlink_domain_stays_inside_a_smaller_one():
    """EP 64 inside a GB200 NVL72 domain becomes EP 8 inside an H100 node's; EP 64 across H100 nodes stays."""
    request = make_request("deepseek-v3", 256, "h100", global_batch_size=4096)
    inside, changes = adapt(_layout(pp=4, vp=4, ep=64), get_hardware("gb200"), 256, request)
    assert inside.ep == 8 and "EP 64 -> 8" in changes
    across, _ = adapt(_layout(tp=2, pp=16, ep=64), get_hardware("h100"), 1024, request)
    assert across.ep == 64


def test_pp_is_rescaled_only_when_the_model_parallel_shape_does_not_divide_the_count():
    request = make_request("deepseek-v3", 2048, "h100", global_batch_size=8192)
    layout, changes = adapt(_layout(tp=2, pp=16, ep=64), get_hardware("h100"), 1024, request)
    assert (layout.tp, layout.pp, layout.ep) == (2, 16, 64) and changes == ("DP 32 -> 64",)
    # On 512 the expert groups (PP x EP = 1,024 GPUs) no longer divide the count: PP halves, DP stays.
    half = make_request("deepseek-v3", 512, "h100", global_batch_size=8192)
    layout, changes = adapt(_layout(tp=2, pp=16, ep=64), get_hardware("h100"), 1024, half)
    assert (layout.pp, layout.ep) == (8, 64) and changes == ("PP 16 -> 8",)
    small = make_request("deepseek-v3", 64, "h100", global_batch_size=512)
    layout, changes = adapt(_layout(tp=2, pp=16, ep=64), get_hardware("h100"), 1024, small)
    assert layout.pp < 16 and 64 % (layout.tp * layout.pp) == 0 and any(c.startswith("PP 16 -> ") for c in changes)


def test_nearest_first_same_goal_then_sequence_then_precision_then_count():
    request = make_request("qwen3-235b-a22b", 128, "gb200", seq_length=4096, global_batch_size=2048,
                           precision="fp8mx")
    found = sources(request, precision_token(request))
    first = found[0][0]
    assert (first.mode, first.seq_length, first.precision_recipe) == ("pretrain", 4096, "fp8mx")
    assert all((entry.hardware, entry.num_gpus) != ("gb200", 128) or entry.mode != "pretrain" for entry, _ in found)


def test_a_recipe_left_out_never_transfers_to_itself():
    request = make_request("qwen3-30b-a3b", 16, "gb200", global_batch_size=1024)
    names = {entry.name for entry, _ in sources(request, "bf16")}
    left_out = next(iter(names))
    assert left_out not in {entry.name for entry, _ in sources(request, "bf16", frozenset({left_out}))}


def test_an_moe_request_with_no_exact_recipe_starts_from_the_nearest_transferred_layout_within_the_band():
    result = plan(make_request("qwen3-30b-a3b", 32, "h100", global_batch_size=1024))
    choice = plan_choice(result)
    nearest = choice.transfers[0]
    band = error_band("Qwen3 MoE", True)
    if choice.source.case == "transferred":
        assert choice.row is nearest.row and choice.source.estimated_gain <= band.value
        assert nearest.note in choice.source.summary and band.basis in choice.source.summary
    else:  # the estimate beat it by more than the band, and says so
        assert choice.source.case == "replanned" and choice.source.estimated_gain > band.value
    rows = shown_rows(result, 5)
    marked = [r for r in rows if r.source == TRANSFERRED]
    assert 1 <= len(marked) <= 2 and all(r.note and r.recipe for r in marked)


def test_a_dense_request_keeps_the_estimate_first_and_shows_transferred_rows_marked():
    result = plan(make_request("llama3-70b", 128, "h100", seq_length=8192, global_batch_size=512))
    choice = plan_choice(result)
    assert choice.source.case == "planned" and choice.row is result.best
    rows = shown_rows(result, 10)
    assert rows[0].row is result.best and rows[0].source == "estimate"
    assert [r.source for r in rows[1:3]] == [TRANSFERRED, TRANSFERRED]
    assert len({(r.row.structure.tp, r.row.structure.pp, r.row.structure.vp_or_1 > 1, r.row.structure.cp,
                 r.row.structure.ep, r.row.sharding) for r in rows}) == len(rows)  # distinct shapes


def _requests_across_hardware():
    """One request per index model with recipes on two or more hardware types: its smallest recipe's hardware and
    count, so the others transfer in."""
    by_model = defaultdict(list)
    for entry in list_recipes():
        if entry.kind in ("library", "benchmark") and entry.hardware and entry.num_gpus:
            by_model[entry.model].append(entry)
    for model, entries in sorted(by_model.items()):
        if len({e.hardware for e in entries}) >= 2 and find_bundled_model(model) is not None:
            smallest = min(entries, key=lambda e: (e.num_gpus, e.name))
            yield model, smallest


@pytest.mark.slow
def test_every_transferred_row_passes_the_rules_and_fits_at_the_requests_size():
    checked = 0
    for model, entry in _requests_across_hardware():
        request = make_request(model, entry.num_gpus, entry.hardware, goal=entry.mode,
                               seq_length=entry.seq_length or None)
        result = plan(request)
        for transfer in transfers(result, precision_token(request)):
            errors = [f for f in explain_layout(request, transfer.row.layout, transfer.row.strategy)
                      if f.severity == "error"]
            assert not errors and transfer.row.fits, (model, transfer.entry.name, errors)
            checked += 1
    assert checked >= 20
