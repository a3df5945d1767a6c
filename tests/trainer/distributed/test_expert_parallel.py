"""Expert parallel equals one process, for real: `torch.distributed.run` with gloo on CPU runs
dist_scripts/expert_parallel_equivalence.py; each test checks the files its case wrote.

EP=2 over 2 processes (Qwen3-MoE built on meta; Mixtral with full activation checkpointing and the chunked
loss; Qwen2-MoE, whose shared expert FSDP2 shards over dp as attention; DeepSeek-V3 with MLA, shared experts
and its frozen selection bias, checkpointed) and FSDP2 over an MoE without EP; EP=2 x DP=2 and EP=4 need 4
processes and are marked slow.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.trainer.distributed.test_parallel_dist import launch

SCRIPT = Path(__file__).resolve().parent / "dist_scripts" / "expert_parallel_equivalence.py"
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def two_process_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("expert2")
    launch(2, ["ep2", "ep2_mixtral_ac", "ep2_qwen2_moe", "fsdp2_moe", "ep2_deepseek"], out, timeout=300, script=SCRIPT)
    return out


def check_case(out: Path, case: str, world_size: int, ep_size: int, local_experts: int) -> None:
    result = json.loads((out / f"{case}.json").read_text())
    assert (result["world_size"], result["ep_size"]) == (world_size, ep_size)
    assert result["expert_local_shape"][0] == local_experts  # experts really split (then FSDP over edp)
    assert result["init_diff"] == 0.0
    assert len(result["losses"]) == 3
    for got, expected in zip(result["losses"], result["reference_losses"]):
        assert got == pytest.approx(expected, abs=TOLERANCE)
    # The load-balancing loss and the expert load are those of the whole batch, as one process sees it.
    for got, expected in zip(result["aux"], result["reference_aux"]):
        assert got == pytest.approx(expected, abs=TOLERANCE)
    assert result["loads"] == result["reference_loads"]
    assert result["grad_diff"] < TOLERANCE
    assert result["weight_diff"] < TOLERANCE
    # DeepSeek-V3's selection bias after each step, moved by the load of the whole batch as one process moves it.
    assert len(result["bias"]) == len(result["reference_bias"]) == 3
    for got, expected in zip(result["bias"], result["reference_bias"]):
        assert torch.allclose(torch.tensor(got), torch.tensor(expected), atol=TOLERANCE, rtol=0)
    assert result["weight_change"] > 100 * TOLERANCE  # the weights moved, so equality means something


def test_ep2_equals_one_process(two_process_results: Path) -> None:
    check_case(two_process_results, "ep2", world_size=2, ep_size=2, local_experts=2)


def test_ep2_mixtral_checkpointed_chunked_equals_one_process(two_process_results: Path) -> None:
    check_case(two_process_results, "ep2_mixtral_ac", world_size=2, ep_size=2, local_experts=2)


def test_ep2_qwen2_moe_with_shared_expert_equals_one_process(two_process_results: Path) -> None:
    check_case(two_process_results, "ep2_qwen2_moe", world_size=2, ep_size=2, local_experts=2)
    meshes = json.loads((two_process_results / "ep2_qwen2_moe.json").read_text())["meshes"]
    # The shared expert is a non-expert parameter: FSDP2 over dp like attention, not over the expert mesh.
    assert meshes["shared_expert.gate_proj"] == meshes["self_attn.q_proj.weight"] == ["dp"]
    assert meshes["experts.gate_proj"] == ["edp", "ep"]


def test_ep2_deepseek_v3_checkpointed_equals_one_process(two_process_results: Path) -> None:
    """With its sequence-wise loss and the bias update: losses, gradients and biases for 3 steps."""
    check_case(two_process_results, "ep2_deepseek", world_size=2, ep_size=2, local_experts=2)
    steps = json.loads((two_process_results / "ep2_deepseek.json").read_text())["bias"]
    assert any(abs(b) >= 1e-3 - 1e-9 for step in steps for b in step[0])  # the update moved it


def test_fsdp2_moe_without_ep_equals_one_process(two_process_results: Path) -> None:
    check_case(two_process_results, "fsdp2_moe", world_size=2, ep_size=1, local_experts=2)


@pytest.mark.slow
def test_ep2_dp2_and_ep4_equal_one_process(tmp_path: Path) -> None:
    launch(4, ["ep2_dp2", "ep4"], tmp_path, timeout=400, script=SCRIPT)
    check_case(tmp_path, "ep2_dp2", world_size=4, ep_size=2, local_experts=1)
    check_case(tmp_path, "ep4", world_size=4, ep_size=4, local_experts=1)
