"""The variant order learns from the trials run so far: the estimate corrected by what was measured."""

import pytest

from service.tune.candidates import RECOMMENDED, SHAPE, shape_of
from service.tune.order import corrected_estimate, fit_correction, next_variant
from service.tune.search import TuneOptions, Tuner
from tests.service.tune.conftest import FakeTrainer


def test_variants_of_the_shape_measured_fastest_are_measured_next(tiny_llama, tmp_path):
    prepared, candidates = tiny_llama
    estimated_first_shape = shape_of(candidates.first_choice.row)
    fast_tp = 2 if candidates.first_choice.row.structure.tp == 1 else 1

    def speed(layout):  # the machine runs the shape the estimate puts behind 3x faster
        return (3000.0 if layout[0] == fast_tp else 1000.0) + layout[2]

    shapes = sum(c.kind in (RECOMMENDED, SHAPE) for c in candidates.trials)
    options = TuneOptions(trials=shapes + 2, steps=3, warmup=1, patience=10, workdir=tmp_path / "trials")
    result = Tuner(prepared, candidates, options, runner=FakeTrainer(speed)).run()
    refined = [r.candidate for r in result.results[shapes:]]
    assert len(refined) == 2
    assert all(c.row.structure.tp == fast_tp for c in refined)
    assert all(shape_of(c.row) != estimated_first_shape for c in refined)


def test_a_setting_measured_faster_than_estimated_lifts_its_other_candidates(tiny_llama):
    _, candidates = tiny_llama
    coarse = [c for c in candidates.trials if c.kind in (RECOMMENDED, SHAPE)]
    ddp = [c for c in candidates.trials if c.row.strategy == "ddp"]
    assert len(ddp) >= 2
    measured = [(c, 0.1 * c.estimated_tokens_per_s_per_gpu) for c in coarse]  # the machine: 10x slower overall
    measured.append((ddp[0], 0.2 * ddp[0].estimated_tokens_per_s_per_gpu))  # and DDP twice as fast as estimated
    intercept, effects = fit_correction(measured)
    other = ddp[1]
    lift = corrected_estimate(other, intercept, effects) / other.estimated_tokens_per_s_per_gpu
    fsdp2 = next(c for c in candidates.trials if c.row.strategy == "fsdp2" and c not in coarse)
    plain = corrected_estimate(fsdp2, intercept, effects) / fsdp2.estimated_tokens_per_s_per_gpu
    assert lift > 1.3 * plain


def test_a_uniformly_wrong_estimate_keeps_the_estimates_order(tiny_llama):
    _, candidates = tiny_llama
    coarse = [c for c in candidates.trials if c.kind in (RECOMMENDED, SHAPE)]
    variants = [c for c in candidates.trials if c not in coarse and c.kind != "fast path"]
    measured = [(c, 0.05 * c.estimated_tokens_per_s_per_gpu) for c in coarse]
    intercept, effects = fit_correction(measured)
    assert intercept == pytest.approx(-2.9957, abs=1e-3)
    assert all(abs(v) < 1e-9 for v in effects.values())
    best_by_estimate = max(variants, key=lambda c: c.estimated_tokens_per_s_per_gpu)
    assert next_variant(variants, measured) is best_by_estimate


def test_with_nothing_measured_the_candidates_order_decides(tiny_llama):
    _, candidates = tiny_llama
    variants = [c for c in candidates.trials if c.kind not in (RECOMMENDED, SHAPE, "fast path")]
    assert next_variant(variants, []) is max(variants, key=lambda c: c.estimated_tokens_per_s_per_gpu)
