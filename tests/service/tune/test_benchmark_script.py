"""The tune benchmarks' --smoke runs. tune_finds_best.py: the grid, the interleaved repeats, the tune and the
verdict, with a faked trainer (the real trainer's trials are the benchmark's, not the suite's). tune_repeat_speed.py:
a repeated tune answered from the store, timed against `python -c pass`."""

import importlib.util
import json

import pytest

from tests.paths import REPO


def load_benchmark(name: str = "tune_finds_best"):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
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


@pytest.mark.slow  # subprocesses: the repeated tune, python -c pass, the import profile
def test_the_repeat_smoke_run_answers_from_the_store_and_times_it_against_python(tmp_path):
    out = tmp_path / "repeat.json"
    result = load_benchmark("tune_repeat_speed").main(["--smoke", "--importtime", "40", "--json", str(out)])
    tune, python = result["tune"], result["python"]
    assert result["repeats"] == 1 and tune["wall_s"] > python["wall_s"] > 0 and tune["cpu_s"] > python["cpu_s"] > 0
    assert tune["cpu_ratio"] == pytest.approx(tune["cpu_s"] / python["cpu_s"], rel=0.05)
    packages = [package for package, _ in result["slowest_imports_s"]]
    assert "sqlalchemy" in packages and "alembic" not in packages and "torch" not in packages
    assert json.loads(out.read_text())["tune"] == tune
