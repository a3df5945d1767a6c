"""benchmarks/checkpoint_metadata.py --smoke runs and prints its table (a process of its own: it starts a
one-process gloo group for dcp.load)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.paths import REPO

pytestmark = pytest.mark.slow


def test_metadata_benchmark_smoke_prints_one_row():
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "checkpoint_metadata.py"), "--smoke"],
                         capture_output=True, text=True, timeout=240, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith("| 50 |")]
    assert len(rows) == 1 and rows[0].count("ms") == 4, out.stdout
