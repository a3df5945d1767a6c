"""FSDP2, DDP and tensor parallel (with sequence parallel) equal one process, for real:
`torch.distributed.run` with gloo on CPU, running dist_scripts/parallel_equivalence.py beside this file.

One launch trains every 2-process case (a launch costs seconds of interpreter start-up on 2
cores); each test then checks the files its case wrote. The 2x2 (dp x tp) mesh needs 4
processes and is marked slow.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests import launch_server
from tests.paths import REPO

SCRIPT = Path(__file__).resolve().parent / "dist_scripts" / "parallel_equivalence.py"
TWO_PROCESS_CASES = ["fsdp2", "ddp", "fsdp2_lora", "tp_sp", "tp", "ddp_bf16_reduce", "fsdp2_bf16_reduce"]
TOLERANCE = 1e-5  # fp32, as the issue asks
# bf16 keeps 8 bits of mantissa: a gradient reduced in bf16 is within 2^-8 of the fp32 one, relatively
# (measured: at most 6.2e-4 apart on these tiny models), and the losses follow to 1e-4.
BF16_REDUCE_TOLERANCE = 1e-4
BF16_REDUCE_GRAD_TOLERANCE = 1e-3


def launch(nproc: int, cases: list[str], out: Path, timeout: int, script: Path = SCRIPT) -> None:
    # --standalone: the launcher binds its own free port (a port found free and bound seconds later can be taken
    # by the other xdist worker meanwhile)
    args = ["--nproc-per-node", str(nproc), "--standalone", str(script), "--out", str(out), *cases]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    proc = launch_server.run(args, torchrun=True, cwd=REPO, env=env, timeout=timeout)
    assert proc.returncode == 0, f"torchrun failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"


@pytest.fixture(scope="module")
def two_process_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("parallel2")
    launch(2, TWO_PROCESS_CASES, out, timeout=240)
    return out


def check_case(out: Path, case: str, world_size: int) -> None:
    result = json.loads((out / f"{case}.json").read_text())
    bf16_reduce = case.endswith("_bf16_reduce")
    tolerance = BF16_REDUCE_TOLERANCE if bf16_reduce else TOLERANCE
    # distributed.grad_reduce_dtype takes effect: bf16-reduced gradients are bf16 values, fp32 ones are not.
    assert result["grads_bf16_exact"] is bf16_reduce
    assert result["world_size"] == world_size
    # The sharded model started from the single-process init (meta-device builds included).
    assert result["init_diff"] == 0.0
    assert len(result["losses"]) == len(result["reference_losses"]) == 3
    for got, expected in zip(result["losses"], result["reference_losses"]):
        assert got == pytest.approx(expected, abs=tolerance)
    assert result["grad_diff"] < (BF16_REDUCE_GRAD_TOLERANCE if bf16_reduce else tolerance)
    # Adam divides by each element's own scale, so bf16 rounding of ~0 grads can move a weight by up to
    # lr (1e-3) a step: bound the bf16 runs by 3 steps of it (measured 1.3e-3), the fp32 ones tightly.
    assert result["weight_diff"] < (3e-3 if bf16_reduce else tolerance)
    # Training moved the weights far more than the tolerance, so the comparison has teeth.
    assert result["weight_change"] > 100 * TOLERANCE
    # Every rank saw the same global loss.
    for rank in range(world_size):
        rank_losses = json.loads((out / f"{case}.rank{rank}.json").read_text())["losses"]
        assert rank_losses == pytest.approx(result["losses"], abs=1e-12)


@pytest.mark.parametrize("case", TWO_PROCESS_CASES)
def test_two_processes_equal_one(two_process_results: Path, case: str) -> None:
    check_case(two_process_results, case, world_size=2)


@pytest.mark.slow
def test_fsdp2_with_tensor_parallel_on_2x2_mesh(tmp_path: Path) -> None:
    launch(4, ["fsdp2_tp"], tmp_path, timeout=240)
    check_case(tmp_path, "fsdp2_tp", world_size=4)
