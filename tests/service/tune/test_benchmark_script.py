"""benchmarks/tune_finds_best.py --smoke: the grid, the interleaved repeats, the tune and the verdict, with a faked
trainer (the real trainer's trials are the benchmark's, not the suite's)."""

import importlib.util
import json

from tests.paths import REPO


def load_benchmark():
    spec = importlib.util.spec_from_file_location("tune_finds_best", REPO / "benchmarks" / "tune_finds_best.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_smoke_run_finds_the_grids_best_with_a_third_of_its_trials(tmp_path):
    bench = load_benchmark()
    out = tmp_path / "result.json"
    [row] = bench.main(["--smoke", "--json", str(out)])
    assert row["grid_layouts"] == 6 and row["grid_trials"] == 12  # 6 layouts x 2 interleaved repeats
    assert row["tune_trials"] <= 2
    assert row["tune_pick"] == row["grid_best"] and row["within"]
    assert row["grid_best"].startswith("TP2")  # the faked trainer runs TP 2 fastest
    assert row["overhead"]["launch_to_first_timed_step_s"] > 0
    assert json.loads(out.read_text())[0]["tune_pick"] == row["tune_pick"]
