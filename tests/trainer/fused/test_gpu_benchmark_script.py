"""benchmarks/gpu: the one-command GPU benchmark, exercised where it can run here (CPU, dry run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.paths import REPO

GPU = REPO / "benchmarks" / "gpu"


def _env() -> dict:
    return dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))


def test_bench_runs_the_recipe_and_reports_against_the_planner(tmp_path) -> None:
    out = subprocess.run([sys.executable, str(GPU / "bench.py"), "--device", "cpu", "--tiny", "--steps", "2",
                          "--warmup", "1", "--batch", "2", "--seq", "32", "--no-compile"],
                         cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "tokens/s:" in out.stdout and "planner estimate" in out.stdout
    report = json.loads(out.stdout.split("RESULT ", 1)[1])
    assert report["steps_timed"] == 2 and report["tokens_per_s"] > 0 and report["seq"] == 32
    assert report["planner_estimate_gib"]["total"] > 0 and report["peak_allocated_gib"] > 0


def test_kernel_check_passes_on_cpu() -> None:
    out = subprocess.run([sys.executable, str(GPU / "bench.py"), "--device", "cpu", "--check-kernels"],
                         env=_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    assert out.stdout.count(" ok") == 4 and "FAIL" not in out.stdout


def test_run_sh_installs_offline_from_a_wheel_folder(tmp_path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    env = dict(_env(), WHEELS=str(wheels), VENV=str(tmp_path / "venv"))
    out = subprocess.run(["bash", str(GPU / "run.sh"), "--dry-run", "--steps", "10"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any("--no-index --find-links " + str(wheels) in line and "requirements.txt" in line for line in lines)
    assert lines[-2].endswith("bench.py --check-kernels") and lines[-1].endswith("bench.py --steps 10")
    pins = (GPU / "requirements.txt").read_text()
    assert "torch==" in pins and "liger-kernel==" in pins and "torchao==" in pins


def test_gpu_names_map_to_hardware_cards() -> None:
    sys.path.insert(0, str(GPU))
    from bench import detect_gpu_type

    assert detect_gpu_type("NVIDIA H100 80GB HBM3") == "h100"
    assert detect_gpu_type("NVIDIA H200") == "h200"
    assert detect_gpu_type("Tesla T4") is None
