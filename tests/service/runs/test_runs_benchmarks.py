"""The runs store's benchmark scripts run end to end in their --smoke modes (the figures are benchmarks/README.md's)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.paths import REPO


def _smoke(script: str, timeout: int) -> str:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), "--smoke"], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_published_calibration_smoke():
    out = _smoke("runs_published_calibration.py", 300)
    assert "dense:" in out and "moe:" in out and "calibrated better in" in out


def test_plan_speed_smoke():
    assert "x empty" in _smoke("runs_plan_speed.py", 300)


@pytest.mark.slow
def test_cpu_calibration_smoke_trains_and_records_one_run():
    out = _smoke("runs_cpu_calibration.py", 600)
    assert out.startswith("1 runs of 1 layouts")
