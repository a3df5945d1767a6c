"""Megatron-LM / Megatron Bridge logs read into runs: the fixture set (written from Megatron-LM's own format:
megatron/training/training.py training_log, arguments.py _print_args, report_memory) ingests exactly; damaged
logs name their line."""

from __future__ import annotations

import pytest

from recipe_index.hardware import get_hardware
from service.runs.errors import RunInputError
from service.runs.ingest import from_megatron_log
from service.runs.megatron_log import read_log
from tests.paths import REPO

FIXTURES = REPO / "tests" / "service" / "runs" / "fixtures" / "megatron"
DENSE = FIXTURES / "dense_llama32_1b_memory.log"


def test_a_dense_log_with_memory_reports_ingests_exactly():
    run = from_megatron_log(DENSE, gpu_type="h100", provenance={"release": "25.09"})
    assert run.provenance.engine == "megatron" and run.provenance.release == "25.09"
    assert run.request.model_dump() == {"model": "llama32-1b", "gpu_type": "h100", "gpus_per_node": 8, "nodes": 1,
                                        "goal": "pretrain", "seq_length": 8192, "global_batch_size": 128,
                                        "precision": "bf16"}
    lay = run.layout
    assert (lay.tp, lay.pp, lay.vp, lay.cp, lay.ep, lay.dp, lay.micro_batch_size, lay.recompute, lay.sharding) == (
        1, 1, None, 1, 1, 8, 2, "none", "optimizer")
    m = run.measurement
    timed = [1.3981, 1.4017, 1.3999, 1.4004, 1.4022, 1.3988, 1.4011, 1.4000]  # iterations 3-10, ms / 1000
    assert m.timed_steps == 8 and m.step_time_s == pytest.approx(sorted(timed)[3] / 2 + sorted(timed)[4] / 2)
    assert m.tokens_per_s_per_gpu == pytest.approx(128 * 8192 / m.step_time_s / 8)
    assert m.peak_mem_gib == pytest.approx(30700.25 / 1024)  # the larger "max allocated" of the two reports
    assert m.mfu == pytest.approx(296.4 / get_hardware("h100").bf16_tflops)  # the median of the timed TFLOP/s
    assert (m.loss_first, m.loss_last) == (11.9, 7.6) and len(m.loss_curve) == 10
    assert run.outcome == "completed"


def test_a_log_without_memory_that_stopped_early():
    run = from_megatron_log(FIXTURES / "dense_llama32_1b_tp2_no_memory_stopped.log", gpu_type="h100")
    assert (run.layout.tp, run.layout.dp, run.layout.recompute) == (2, 4, "selective")
    assert run.measurement.peak_mem_gib is None and run.measurement.mfu is None
    assert run.measurement.step_time_s == pytest.approx((1.6495 + 1.6510) / 2)
    assert run.outcome == "stopped" and "iteration 6 of 10" in run.outcome_detail


def test_a_moe_log_logged_every_five_iterations():
    run = from_megatron_log(FIXTURES / "moe_olmoe_7b_memory.log", gpu_type="h100")
    assert run.request.model == "olmoe-7b" and run.layout.ep == 8
    assert run.measurement.timed_steps == 10  # iterations 11-20 in two logged windows of five
    assert run.measurement.step_time_s == pytest.approx((1.2058 + 1.2080) / 2)
    assert run.measurement.peak_mem_gib == pytest.approx(61234.5 / 1024)
    assert run.measurement.loss_first == 10.5  # lm loss, not the load-balancing loss beside it


def test_a_config_stands_in_for_a_missing_arguments_block(tmp_path):
    iterations = [line for line in DENSE.read_text().splitlines() if "elapsed time per iteration" in line]
    log = tmp_path / "bridge.log"
    log.write_text("\n".join(iterations) + "\n")
    config = tmp_path / "bridge.yaml"
    config.write_text("model:\n  tensor_model_parallel_size: 2\n  seq_length: 4096\n  num_layers: 16\n"
                      "train:\n  global_batch_size: 128\n  micro_batch_size: 1\n"
                      "dist:\n  world_size: 16\n")
    run = from_megatron_log(log, config=config, model="llama32-1b", gpu_type="h100")
    assert (run.layout.tp, run.layout.dp, run.request.nodes, run.request.seq_length) == (2, 8, 2, 4096)
    assert run.config_text.startswith("model:")


def _damaged(tmp_path, old: str, new: str):
    log = tmp_path / "damaged.log"
    log.write_text(DENSE.read_text().replace(old, new, 1))
    return log


def test_a_damaged_iteration_line_is_named_by_its_line_number(tmp_path):
    log = _damaged(tmp_path, "elapsed time per iteration (ms): 1398.1", "elapsed time per iteration (ms): 13x8.1")
    number = next(i for i, line in enumerate(log.read_text().splitlines(), 1) if "13x8.1" in line)
    with pytest.raises(RunInputError, match="is not a number") as info:
        from_megatron_log(log, gpu_type="h100")
    assert info.value.where == f"{log}:{number}"


@pytest.mark.parametrize("old, new, message", [
    ("iteration        4/      10 |", "iteration        4 |", "without `iteration N/ M |`"),
    ("elapsed time per iteration (ms): 1401.7", "elapsed time per iteration (ms): -1401.7", "expected a positive"),
    ("elapsed time per iteration (ms): 1401.7", "elapsed time per iteration (ms): nan", "expected a positive"),
])
def test_damaged_iterations_are_refused(tmp_path, old, new, message):
    with pytest.raises(RunInputError, match=message):
        from_megatron_log(_damaged(tmp_path, old, new), gpu_type="h100")


def test_a_log_with_no_iteration_is_refused(tmp_path):
    log = tmp_path / "empty.log"
    log.write_text("> building GPT model ...\nTraceback (most recent call last):\n")
    with pytest.raises(RunInputError, match="no iteration line"):
        from_megatron_log(log, gpu_type="h100")


def test_the_gpu_type_must_be_given():
    with pytest.raises(RunInputError, match="--gpu-type"):
        from_megatron_log(DENSE)


def test_a_shape_several_models_share_asks_for_the_model(tmp_path):
    log = _damaged(tmp_path, "num_attention_heads ............................. 32",
                   "num_attention_heads ............................. 16")
    text = log.read_text().replace("num_layers ...................................... 16",
                                   "num_layers ...................................... 27")
    text = text.replace("num_experts ..................................... None",
                        "num_experts ..................................... 64")
    text = text.replace("ffn_hidden_size ................................. 8192",
                        "ffn_hidden_size ................................. None")
    log.write_text(text)
    with pytest.raises(RunInputError, match="--model") as info:
        from_megatron_log(log, gpu_type="h100")
    assert "deepseek-v2-lite" in str(info.value) and "moonlight-16b" in str(info.value)


PUBLIC = FIXTURES / "public"  # README.md there cites the issue each excerpt was posted in


def test_a_public_moe_excerpt_reads_every_iteration():
    log = read_log(PUBLIC / "megatron_lm_issue_756_mixtral.log")
    read = [(it["iteration"], it["step_s"], it["tflops"], it["gbs"], it["loss"]) for it in log["iterations"]]
    assert read == [(71, pytest.approx(5.3616), 243.6, 128.0, 1.818812), (72, pytest.approx(5.4707), 238.7, 128.0,
                    1.820313), (73, pytest.approx(5.8299), 224.0, 128.0, 1.798953)]


def test_a_public_excerpt_of_the_older_format_reads_every_iteration(tmp_path):
    path = PUBLIC / "megatron_llm_issue_11_llama.log"
    log = read_log(path)
    assert [it["step_s"] for it in log["iterations"]] == pytest.approx([86.5452, 87.8716, 89.4748, 89.0752])
    assert {it["train_iters"] for it in log["iterations"]} == {250000} and log["args"] == {}
    config = tmp_path / "args.yaml"  # what the excerpt leaves out, as a Megatron-LM YAML would give it
    config.write_text("seq_length: 4096\nworld_size: 64\ntensor_model_parallel_size: 8\n"
                      "pipeline_model_parallel_size: 1\n")
    run = from_megatron_log(path, config=config, model="llama2-7b", gpu_type="a100")
    assert run.outcome == "stopped" and run.measurement.timed_steps == 2
    assert run.measurement.step_time_s == pytest.approx((89.4748 + 89.0752) / 2)
