"""Every benchmark script with a command line runs its `--smoke` mode: the same code path on a tiny input, in
seconds, so that a script broken by a change elsewhere fails here and not on the day its figures are needed.
The GPU scripts' smoke runs on CPU. A new script with a command line is picked up by the glob, and fails
here until it has a `--smoke` mode."""

from __future__ import annotations

import os

import pytest

from tests import launch_server
from tests.paths import REPO

BENCHMARKS = REPO / "benchmarks"
SCRIPTS = sorted(p for p in [*BENCHMARKS.glob("*.py"), *(BENCHMARKS / "gpu").glob("*.py")]
                 if '__name__ == "__main__"' in p.read_text())
# Smoke runs a dedicated test already makes, asserting more than the exit code: script -> (the file that runs it
# with --smoke, the test that runs that file). `run.sh --smoke` runs every GPU phase on CPU.
GPU_TEST = REPO / "tests" / "trainer" / "fused" / "test_gpu_benchmark_script.py"
RUN_SH = BENCHMARKS / "gpu" / "run.sh"
SMOKED_ELSEWHERE = {
    "gpu/bench.py": (GPU_TEST, GPU_TEST),
    **{f"gpu/{name}": (RUN_SH, GPU_TEST) for name in ("kernel_check.py", "peer_torchtitan.py", "hf_moe_reference.py",
                                                      "summary.py")},
    "checkpoint_metadata.py": (REPO / "tests" / "trainer" / "security" / "test_checkpoint_metadata_benchmark.py",) * 2,
    "moe_balance.py": (REPO / "tests" / "trainer" / "models" / "test_moe_balance.py",) * 2,
    "tune_finds_best.py": (REPO / "tests" / "service" / "tune" / "test_benchmark_script.py",) * 2,
    **{f"runs_{name}.py": (REPO / "tests" / "service" / "runs" / "test_runs_benchmarks.py",) * 2
       for name in ("cpu_calibration", "plan_speed", "published_calibration")},
}
# Whose smoke starts torch.distributed.run (2 processes) or trains in subprocesses: out of `make test-fast`.
MULTI_PROCESS = {"context_pipeline_cpu.py", "train_vs_hf.py"}


def _name(path) -> str:
    return str(path.relative_to(BENCHMARKS))


def _params():
    for path in SCRIPTS:
        name = _name(path)
        if name in SMOKED_ELSEWHERE:
            continue
        marks = [pytest.mark.slow] if name in MULTI_PROCESS else []
        yield pytest.param(path, id=name, marks=marks)


@pytest.mark.parametrize("script", _params())
def test_benchmark_script_runs_its_smoke_mode(script, tmp_path) -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    out = launch_server.run([str(script), "--smoke"], torchrun=False, cwd=tmp_path, env=env, timeout=300)
    assert out.returncode == 0, f"{_name(script)} --smoke: exit {out.returncode}\n{out.stdout[-2000:]}\n" \
                                f"{out.stderr[-3000:]}"
    assert out.stdout.strip(), f"{_name(script)} --smoke printed no figures"
    assert "Traceback" not in out.stderr, out.stderr[-3000:]


def test_every_benchmark_script_is_smoked() -> None:
    names = {_name(p) for p in SCRIPTS}
    assert {"train_vs_hf.py", "expert_layouts.py", "gpu/kernel_check.py"} <= names  # the glob sees both folders
    for name, (runner, test_file) in SMOKED_ELSEWHERE.items():
        assert name in names and name.split("/")[-1] in runner.read_text(), (name, runner)
        assert '"--smoke"' in test_file.read_text() and (runner == test_file or runner.name in test_file.read_text())
