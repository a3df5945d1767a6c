"""Context parallel and pipeline parallel (1F1B, interleaved 1F1B) equal one process, for real:
`torch.distributed.run` with gloo on CPU, running dist_scripts/cp_pp_equivalence.py beside this file.

One launch trains every 2-process case (the pipeline cases validate between steps too); the 4-process meshes
(DP x CP, CP x TP, PP x DP) are marked slow.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.trainer.distributed.test_parallel_dist import launch as launch_script

SCRIPT = Path(__file__).resolve().parent / "dist_scripts" / "cp_pp_equivalence.py"
TWO_PROCESS_CASES = ["cp2", "cp2_window", "cp2_ddp", "pp2", "pp2_vp2"]
TOLERANCE = 1e-5  # fp32: losses and gradients
# Adam divides each update by the gradient's own scale, so a 1e-8 gradient difference on a near-zero gradient
# moves a weight by up to ~lr x 1e-2 over 3 steps (measured at most 1.9e-5 with the sliding window).
WEIGHT_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def two_process_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cp_pp2")
    launch_script(2, TWO_PROCESS_CASES, out, timeout=300, script=SCRIPT)
    return out


def check_case(out: Path, case: str, world_size: int) -> None:
    result = json.loads((out / f"{case}.json").read_text())
    assert result["world_size"] == world_size
    assert len(result["losses"]) == len(result["reference_losses"]) == 3
    for got, expected in zip(result["losses"], result["reference_losses"]):
        assert got == pytest.approx(expected, abs=TOLERANCE)
    assert result["grad_diff"] < TOLERANCE
    assert result["weight_diff"] < WEIGHT_TOLERANCE
    assert result["weight_change"] > 10 * WEIGHT_TOLERANCE  # training moved the weights: the check has teeth
    for rank in range(world_size):  # every rank saw the same global loss
        rank_result = json.loads((out / f"{case}.rank{rank}.json").read_text())
        assert rank_result["losses"] == pytest.approx(result["losses"], abs=1e-12)
        assert rank_result["val_losses"] == result["val_losses"]
    if case.startswith("pp"):  # validation forward over the stages, loss on the last: one process's loss
        assert len(result["val_losses"]) == len(result["reference_val_losses"]) == 2
        for got, expected in zip(result["val_losses"], result["reference_val_losses"]):
            assert got == pytest.approx(expected, abs=TOLERANCE)
        assert abs(result["val_losses"][1] - result["val_losses"][0]) > 100 * TOLERANCE  # the weights it saw moved


@pytest.mark.parametrize("case", TWO_PROCESS_CASES)
def test_two_processes_equal_one(two_process_results: Path, case: str) -> None:
    check_case(two_process_results, case, world_size=2)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["cp2_dp2", "cp2_tp2", "pp2_dp2"])
def test_four_processes_equal_one(tmp_path: Path, case: str) -> None:
    launch_script(4, [case], tmp_path, timeout=300, script=SCRIPT)
    check_case(tmp_path, case, world_size=4)
