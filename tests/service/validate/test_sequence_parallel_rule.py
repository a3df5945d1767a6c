"""Sequence parallelism splits each sequence over the TP ranks: RA-L018 refuses a
sequence length SP cannot split, the planner turns SP off for such a length instead of handing the
trainer a layout it refuses, and a sequence is at least 2 tokens on every surface."""

from __future__ import annotations

import pytest
import yaml
from fastapi.testclient import TestClient

from service.cli.app import main
from service.http.app import create_app
from service.plan.planner import PlanError, make_request, plan
from service.validate.document import validate_text
from trainer.contract.config import MIN_SEQ_LENGTH

LLAMA_1B = ["--model", "llama32-1b", "--gpus", "2", "--gpu-type", "h100", "--engine", "bundled"]


def _config(seq: int, *, tp: int = 2, cp: int = 1, sp: bool = True, ep: int = 1, model: str = "llama3-8b") -> str:
    return yaml.safe_dump({
        "model": {"pretrained_model_name_or_path": model},
        "step_scheduler": {"global_batch_size": 64, "local_batch_size": 1, "max_steps": 10},
        "distributed": {"strategy": "megatron", "tp_size": tp, "cp_size": cp, "ep_size": ep, "sequence_parallel": sp},
        "dataset": {"seq_length": seq},
        "hardware": {"gpu_type": "h100", "gpus_per_node": 8, "num_nodes": 1},
        "precision": "bf16",
    }, sort_keys=False)


def _findings(text: str) -> dict[str, str]:
    return {f.code: f"{f.message} (fix: {f.fix})" for f in validate_text(text, "case.yaml").findings}


@pytest.mark.parametrize("seq, tp, cp, fires", [
    (4095, 2, 1, True), (4096, 2, 1, False), (4100, 8, 1, True),
    (4100, 2, 2, False),  # 2,050 tokens per CP rank split over TP 2
    (4098, 2, 2, True),   # 2,049 per CP rank: odd for TP 2 (and RA-L014's 2*CP fails too)
])
def test_rule_asks_the_sequence_to_divide_by_tp_times_cp(seq, tp, cp, fires):
    found = _findings(_config(seq, tp=tp, cp=cp))
    assert ("RA-L018" in found) is (seq % (tp * cp) != 0) is fires
    if fires:
        assert f"not divisible by {tp * cp}" in found["RA-L018"]
        assert "sequence_parallel: false" in found["RA-L018"]


def test_rule_is_quiet_without_sequence_parallel_and_does_not_ask_for_it():
    found = _findings(_config(4095, sp=False))
    assert "RA-L018" not in found
    assert "RA-L005" not in found  # "turn SP on" would be refused by RA-L018 at this length
    assert "RA-L005" in _findings(_config(4096, sp=False))


def test_expert_parallel_warning_asks_for_a_length_sp_can_split():
    found = _findings(_config(4095, sp=False, ep=4, model="qwen3-30b-a3b"))
    assert "multiple of 2 (RA-L018)" in found["RA-L012"]


def test_planner_turns_sp_off_where_the_sequence_does_not_split():
    odd = plan(make_request("llama32-1b", 2, "h100", seq_length=63, engine="bundled"))
    tp_layouts = [c.layout for c in odd.layouts if c.layout.tp > 1]
    assert tp_layouts and not any(lay.sp for lay in tp_layouts)
    even = plan(make_request("llama32-1b", 2, "h100", seq_length=64, engine="bundled"))
    assert all(c.layout.sp for c in even.layouts if c.layout.tp > 1)


def test_recommended_config_for_an_odd_length_validates_and_passes_the_dry_run(tmp_path, capsys):
    out = tmp_path / "c.yaml"
    assert main(["recommend", *LLAMA_1B, "--seq-length", "63", "-o", str(out)]) == 0
    config = yaml.safe_load(out.read_text())
    assert config["dataset"]["seq_length"] == 63
    dist = config["distributed"]
    assert not (dist.get("tp_size", 1) > 1 and dist.get("sequence_parallel"))  # the trainer refuses that
    capsys.readouterr()
    assert main(["validate", str(out)]) == 0
    assert "0 error(s)" in capsys.readouterr().out
    assert main(["train", str(out), "--dry-run"]) == 0  # the launcher's pre-flight, as the workers'
    # and the same length with TP 2: SP turned off by the planner passes; SP on is refused before launch
    tp2 = ["train", str(out), "--dry-run", "--distributed.strategy", "fsdp2", "--distributed.tp_size", "2"]
    assert main([*tp2, "--distributed.sequence_parallel", "false"]) == 0
    assert main([*tp2, "--distributed.sequence_parallel", "true"]) == 2
    assert "RA-L018" in capsys.readouterr().err


def test_one_token_sequences_are_refused_everywhere(capsys):
    assert MIN_SEQ_LENGTH == 2
    with pytest.raises(PlanError) as err:
        make_request("llama3-8b", 8, "h100", seq_length=1)
    assert err.value.field == "seq_length" and "at least 2" in str(err.value)
    assert main(["plan", *LLAMA_1B, "--seq-length", "1"]) == 2
    assert "--seq-length" in capsys.readouterr().err
    response = TestClient(create_app()).post("/v1/plan", json={"model": "llama3-8b", "gpus": 8, "gpu_type": "h100",
                                                               "seq_length": 1})
    assert response.status_code in (400, 422) and "seq_length" in response.text
    found = validate_text(_config(1, tp=1, sp=False), "case.yaml").findings
    assert any(f.key == "dataset.seq_length" and f.severity == "error" for f in found)
