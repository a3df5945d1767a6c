"""Which layouts tune measures: recommend's first, then distinct parallel shapes, then variants; the rest skipped
with a reason."""

from service.tune.candidates import FAST_PATH, RECOMMENDED, SHAPE, select_candidates
from tests.service.tune.conftest import tuned_request


def shape(candidate):
    s = candidate.row.structure
    return (s.tp, s.pp, s.cp, s.ep)


def test_recommends_layout_first_then_every_parallel_shape_before_any_variant(tiny_llama):
    _, candidates = tiny_llama
    kinds = [c.kind for c in candidates.trials]
    assert kinds[0] == RECOMMENDED
    shapes = [shape(c) for c in candidates.trials if c.kind in (RECOMMENDED, SHAPE)]
    assert len(shapes) == len(set(shapes)) == 3  # TP 2, PP 2 and the plain DP layout of 2 processes
    last_shape = max(i for i, kind in enumerate(kinds) if kind in (RECOMMENDED, SHAPE))
    assert last_shape == len(shapes) - 1
    assert len({c.key for c in candidates.trials}) == len(candidates.trials)


def test_six_trials_are_six_distinct_layouts(tiny_llama):
    _, candidates = tiny_llama
    labels = [c.label for c in candidates.trials[:6]]
    assert len(set(labels)) == 6


def test_the_moe_candidates_hold_ep_1_and_ep_2_among_the_first_three():
    _, candidates = tuned_request("tiny-moe")
    assert {c.row.structure.ep for c in candidates.trials[:3]} == {1, 2}


def test_layouts_a_rule_refuses_are_skipped_with_the_rule():
    _, candidates = tuned_request("tiny-moe")
    reasons = [s.reason for s in candidates.skipped]
    assert any(r.startswith("RA-E007") for r in reasons)  # expert parallel under DDP
    assert any(r.startswith("RA-E008") for r in reasons)  # pipeline parallel under DDP
    assert not any(c.row.structure.ep > 1 and c.row.strategy == "ddp" for c in candidates.trials)


def test_layouts_that_do_not_fit_are_skipped_with_the_memory_they_need():
    from service.plan.planner import make_request, plan

    result = plan(make_request("qwen3-8b", 2, "h100", engine="bundled"))
    first = result.best
    candidates = select_candidates(result, first, "planned")
    unfit = [s for s in candidates.skipped if "GiB per GPU" in s.reason]
    assert unfit and all("headroom" in s.reason for s in unfit)
    assert all(c.row.fits for c in candidates.trials)
    assert all(c.row.memory_total_gib <= result.usable_gib for c in candidates.trials)


def test_a_compile_variant_comes_last_and_only_when_asked(tiny_llama):
    prepared, _ = tiny_llama
    first = prepared.result.best
    with_compile = select_candidates(prepared.result, first, "planned", compiled=False)
    assert with_compile.trials[-1].kind == FAST_PATH
    assert with_compile.trials[-1].fast_paths == (("compile.enabled", True),)
    without = select_candidates(prepared.result, first, "planned")
    assert FAST_PATH not in {c.kind for c in without.trials}
