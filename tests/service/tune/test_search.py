"""The tune loop with a faked trainer: measured beats estimated, early stop, budget, the store and resume."""

import sys
from pathlib import Path

import pytest

from service.runs.store import RunsStore
from service.tune.report import format_text, measured_config_text, pair_agreement, tune_json
from service.tune.runner import run_trial
from service.tune.search import TuneOptions, Tuner
from tests.service.tune.conftest import FakeTrainer

PROGRAMS = Path(__file__).parent / "programs"
SPEEDS = {1: 1000.0, 2: 3000.0}  # by TP: the estimate ranks TP 1 first, the "machine" runs TP 2 faster


def by_tp(layout):
    return SPEEDS[layout[0]] + layout[2]  # the micro batch breaks ties


def options(tmp_path, **changes):
    return TuneOptions(**{"trials": 4, "steps": 4, "warmup": 2, "workdir": tmp_path / "trials", **changes})


def test_the_measured_fastest_is_written_not_the_estimates_first_choice(tiny_llama, tmp_path):
    prepared, candidates = tiny_llama
    assert candidates.first_choice.row.structure.tp == 1
    result = Tuner(prepared, candidates, options(tmp_path), runner=FakeTrainer(by_tp)).run()
    assert result.best.candidate.row.structure.tp == 2
    assert result.best is not result.first_choice
    text = measured_config_text(result)
    assert "tp_size: 2" in text
    assert text.startswith("# Measured by `recipe-advisor tune`")
    assert "faster than the estimate's first choice" in text.splitlines()[1]
    table = format_text(result)
    assert table.splitlines()[1].split()[1:3] == ["TP2", "PP1"]  # sorted by measurement


def test_the_warm_up_steps_are_not_timed(tiny_llama, tmp_path):
    prepared, candidates = tiny_llama
    result = Tuner(prepared, candidates, options(tmp_path, trials=1), runner=FakeTrainer(lambda lay: 1600.0)).run()
    m = result.results[0].measurement
    assert m["timed_steps"] == 4
    tokens = prepared.request.global_batch_size * prepared.request.seq_length
    assert m["step_time_s"] == pytest.approx(tokens / 1600.0)
    assert result.results[0].measured == pytest.approx(800.0)  # per GPU of 2


def test_it_stops_after_three_variants_none_beating_the_best_by_two_percent(tiny_llama, tmp_path):
    prepared, candidates = tiny_llama
    flat = FakeTrainer(lambda layout: 1000.0 + layout[2])  # within 1 % of each other
    result = Tuner(prepared, candidates, options(tmp_path, trials=10), runner=flat).run()
    # every parallel shape (3) is measured, then three variants do not beat the best by 2 %
    kinds = [r.candidate.kind for r in result.results]
    assert kinds[:3] == ["recommended", "shape", "shape"]
    assert len(kinds) == 6 and not {"recommended", "shape"} & set(kinds[3:])
    assert "stopped early" in result.stop_reason


def test_a_variant_beating_the_best_by_more_than_two_percent_keeps_it_going(tiny_llama, tmp_path):
    prepared, candidates = tiny_llama
    faster_each_time = iter(range(100))
    speeds = {}

    def speed(layout):  # each new layout 5 % faster than the one before
        if layout not in speeds:
            speeds[layout] = 1000.0 * 1.05 ** next(faster_each_time)
        return speeds[layout]

    result = Tuner(prepared, candidates, options(tmp_path, trials=8), runner=FakeTrainer(speed)).run()
    assert len(result.results) == 8 and "all 8 trials done" in result.stop_reason


def test_it_stops_when_the_budget_is_spent(tiny_llama, tmp_path):
    prepared, candidates = tiny_llama
    now = [0.0]
    fake = FakeTrainer(by_tp)

    def slow(spec):
        now[0] += 100.0  # each trial takes 100 s of the fake clock
        return fake(spec)

    result = Tuner(prepared, candidates, options(tmp_path, trials=6, budget_s=150, patience=10),
                   runner=slow, clock=lambda: now[0]).run()
    assert len(result.results) == 2
    assert "budget" in result.stop_reason


def test_an_interrupted_tune_resumes_running_only_what_is_missing(tiny_llama, tmp_path):
    prepared, candidates = tiny_llama
    store = RunsStore(str(tmp_path / "runs.sqlite"))

    def killed_on_third(layout, seen=[]):
        seen.append(layout)
        if len(seen) == 3:
            raise KeyboardInterrupt  # tune killed mid-trial
        return None

    first = FakeTrainer(by_tp, fail=lambda layout: killed_on_third(layout))
    with pytest.raises(KeyboardInterrupt):
        Tuner(prepared, candidates, options(tmp_path), runner=first, store=store).run()
    assert store.count() == 2

    second = FakeTrainer(by_tp)
    result = Tuner(prepared, candidates, options(tmp_path), runner=second, store=store).run()
    assert [r.from_store for r in result.results] == [True, True, False, False]
    assert second.calls == first.calls[2:] + [second.calls[-1]]
    assert store.count() == 4

    again = FakeTrainer(by_tp)
    repeated = Tuner(prepared, candidates, options(tmp_path), runner=again, store=store).run()
    assert again.calls == [] and all(r.from_store for r in repeated.results)
    assert repeated.best.candidate.label == result.best.candidate.label
    stored = store.get(repeated.best.run_id)
    assert stored.outcome == "completed" and stored.measurement.estimate_tokens_per_s_per_gpu
    store.close()


def real_process_for(trial: str, *program: str):
    """A runner that fakes every trial but ``trial``, which runs ``program`` as a real process."""
    fake = FakeTrainer(by_tp)

    def runner(spec):
        if spec.folder.name == trial:
            return run_trial(spec, command=[sys.executable, str(PROGRAMS / program[0]), *program[1:]])
        return fake(spec)

    return runner


def test_a_stalled_trial_is_killed_and_the_tune_goes_on(tiny_llama, tmp_path):
    prepared, candidates = tiny_llama
    store = RunsStore(str(tmp_path / "runs.sqlite"))
    runner = real_process_for("trial-02", "stalled_launcher.py", str(tmp_path / "pids"))
    result = Tuner(prepared, candidates, options(tmp_path, trials=3, trial_timeout_s=2), runner=runner,
                   store=store).run()
    outcomes = [r.ending.outcome for r in result.results]
    assert outcomes == ["completed", "timed_out", "completed"]
    assert store.get(result.results[1].run_id).outcome == "timed_out"
    assert "timed_out" in format_text(result)
    store.close()


def test_a_trial_out_of_memory_is_recorded_as_such(tiny_llama, tmp_path):
    prepared, candidates = tiny_llama
    store = RunsStore(str(tmp_path / "runs.sqlite"))
    runner = real_process_for("trial-01", "memory_hog.py")
    result = Tuner(prepared, candidates, options(tmp_path, trials=2, memory_cap_bytes=512 << 20), runner=runner,
                   store=store).run()
    record = store.get(result.results[0].run_id)
    assert record.outcome == "out_of_memory" and "MemoryError" in record.outcome_detail
    answer = tune_json(result)
    assert answer["best"]["layout"] == result.results[1].candidate.label
    assert "the estimate's first choice" in answer["versus_first_choice"]
    store.close()


def test_pair_agreement_counts_the_pairs_the_estimate_orders_as_measured(tiny_llama, tmp_path):
    prepared, candidates = tiny_llama
    result = Tuner(prepared, candidates, options(tmp_path, trials=3, patience=5), runner=FakeTrainer(by_tp)).run()
    agree, total = pair_agreement(result.results)
    assert total == 3
    # trials: TP1 PP1, TP2, TP1 PP2 (estimated in that order); TP 2 is measured fastest, so only the pair of
    # the two TP 1 layouts and the pair TP 2 / PP 2 are ordered as measured
    assert agree == 2


def test_the_progress_line_says_the_trial_the_best_and_the_time_left(tiny_llama, tmp_path):
    prepared, candidates = tiny_llama
    lines = []
    Tuner(prepared, candidates, options(tmp_path, trials=3, budget_s=600, patience=5), runner=FakeTrainer(by_tp),
          progress=lines.append).run()
    assert lines[0].startswith("trial 1/3 running TP1") and "best -" in lines[0]
    assert "min of the budget left" in lines[0]
    assert lines[2].startswith("trial 3/3") and "best 1,504 tok/s/GPU (TP2" in lines[2]
