"""RA-M002 without a sequence length: the states and fixed activations judged as a lower bound, fixes named
only where they close the gap, and the layouts that do or do not shard the weights."""

from __future__ import annotations

import json
import re

import yaml

from service.cli.app import main
from service.validate.document import validate_text


def validate_findings(tmp_path, capsys, text: str) -> tuple[int, list[dict]]:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    code = main(["validate", str(path), "--format", "json"])
    return code, json.loads(capsys.readouterr().out)["files"][0]["findings"]


def _m002(tmp_path, capsys, text: str) -> tuple[int, dict]:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    code = main(["validate", str(path), "--format", "json"])
    findings = json.loads(capsys.readouterr().out)["files"][0]["findings"]
    return code, next(f for f in findings if f["code"] == "RA-M002")


def test_states_alone_over_the_gpu_are_an_error_without_a_sequence_length(tmp_path, capsys):
    code, findings = validate_findings(tmp_path, capsys, "model: {pretrained_model_name_or_path: llama3-70b}\n"
                               "distributed: {strategy: fsdp2}\nhardware: {gpu_type: h100, gpus_per_node: 8}\n")
    m002 = [f for f in findings if f["code"] == "RA-M002"]
    assert code == 1 and len(m002) == 1 and m002[0]["severity"] == "error"
    assert "at least" in m002[0]["message"] and "before any per-token activations" in m002[0]["message"]
    assert "activation" not in m002[0]["fix"]  # activation savers cannot shrink the state


def test_runtime_and_fixed_activations_count_toward_the_lower_bound(tmp_path, capsys):
    # llama3-8b FSDP2 on 2 CPU "GPUs" (64 GiB): weights + grads + optimizer are 63.4 GiB, which fits, but
    # the zero-token estimate adds the runtime and FSDP2's unsharded blocks: 69.8 GiB, which cannot run.
    code, findings = validate_findings(tmp_path, capsys, "model: {pretrained_model_name_or_path: llama3-8b}\n"
                               "distributed: {strategy: fsdp2}\nhardware: {gpu_type: cpu, gpus_per_node: 2}\n")
    m002 = [f for f in findings if f["code"] == "RA-M002"]
    assert code == 1 and [f["severity"] for f in m002] == ["error"]
    message = m002[0]["message"]
    assert "needs at least 69.8 GiB per GPU before any per-token activations" in message
    assert "other 4.4" in message and "more than the 64 GiB" in message


def test_a_lower_bound_near_capacity_is_a_warning_without_a_sequence_length(tmp_path, capsys):
    code, findings = validate_findings(tmp_path, capsys, "model: {pretrained_model_name_or_path: llama3-8b}\n"
                               "distributed: {strategy: fsdp2}\n"
                               "hardware: {gpu_type: a100-40gb, gpus_per_node: 4}\n")
    m002 = [f for f in findings if f["code"] == "RA-M002"]
    assert code == 0 and [f["severity"] for f in m002] == ["warning"]
    assert "at least" in m002[0]["message"] and "of the 40 GiB" in m002[0]["message"]


def test_megatron_states_over_the_gpu_are_a_warning_as_with_a_sequence_length(tmp_path, capsys):
    code, findings = validate_findings(tmp_path, capsys, "model: {pretrained_model_name_or_path: llama3-70b}\n"
                               "distributed: {strategy: megatron, tp_size: 2}\n"
                               "hardware: {gpu_type: h100, gpus_per_node: 8}\n")
    m002 = [f for f in findings if f["code"] == "RA-M002"]
    assert code == 0 and [f["severity"] for f in m002] == ["warning"] and "memory savers" in m002[0]["message"]


def test_a_state_that_fits_says_activations_were_not_checked(tmp_path, capsys):
    code, findings = validate_findings(tmp_path, capsys, "model: {pretrained_model_name_or_path: llama3-8b}\n"
                               "distributed: {strategy: fsdp2}\nhardware: {gpu_type: h100, gpus_per_node: 8}\n")
    m002 = [f for f in findings if f["code"] == "RA-M002"]
    assert code == 0 and len(m002) == 1 and m002[0]["severity"] == "info"
    assert m002[0]["key"] == "dataset.seq_length" and "not checked" in m002[0]["message"]
    assert "set dataset.seq_length" in m002[0]["fix"]


def test_with_a_sequence_length_the_full_estimate_is_judged(tmp_path, capsys):
    code, findings = validate_findings(tmp_path, capsys, "model: {pretrained_model_name_or_path: llama3-70b}\n"
                               "dataset: {seq_length: 2048}\n"
                               "distributed: {strategy: fsdp2}\nhardware: {gpu_type: h100, gpus_per_node: 8}\n")
    m002 = [f for f in findings if f["code"] == "RA-M002"]
    assert code == 1 and "activations" in m002[0]["message"] and "not checked" not in m002[0]["message"]


def test_fsdp2_states_name_more_gpus_not_a_tp_that_cannot_close_the_gap(tmp_path, capsys):
    code, finding = _m002(tmp_path, capsys, "hardware: {gpu_type: h100, gpus_per_node: 8}\n"
                          "distributed: {strategy: fsdp2}\nmodel: {pretrained_model_name_or_path: llama3-70b}\n")
    assert code == 1 and "tp_size" not in finding["fix"] and "run on more GPUs" in finding["fix"]
    assert (finding["key"], finding["line"]) == ("model.pretrained_model_name_or_path", 3)


def test_megatron_states_name_a_step_that_closes_the_gap_alone(tmp_path, capsys):
    # llama3-8b without the distributed optimizer on 40 GiB: only sharding weights and gradients too fits.
    _, finding = _m002(tmp_path, capsys, "model: {pretrained_model_name_or_path: llama3-8b}\n"
                       "distributed: {strategy: megatron, use_distributed_optimizer: false}\n"
                       "hardware: {gpu_type: a100-40gb, gpus_per_node: 8}\n")
    fix = finding["fix"]
    assert "use_megatron_fsdp" in fix and "use_distributed_optimizer" not in fix and "tp_size" not in fix
    assert finding["line"] == 1


def test_megatron_steps_that_only_help_say_they_are_not_enough_alone(tmp_path, capsys):
    _, finding = _m002(tmp_path, capsys, "model: {pretrained_model_name_or_path: llama3-70b}\n"
                       "distributed: {strategy: megatron, tp_size: 2}\nhardware: {gpu_type: h100, gpus_per_node: 8}\n")
    fix = finding["fix"]
    assert "raise distributed.pp_size to 2 (not enough alone:" in fix and "run on more GPUs" in fix
    shown = [float(x) for x in re.findall(r"not enough alone: ([\d.]+) GiB", fix)]
    needed = float(re.search(r"needs at least ([\d.]+) GiB", finding["message"]).group(1))
    assert shown and all(80 < value < needed for value in shown)


def test_a_memory_fix_that_cannot_close_the_gap_says_so():
    """Activation checkpointing was offered for a gap larger than all activations."""
    from service.validate.document import validate_text

    text = ("model:\n  pretrained_model_name_or_path: llama3-8b\ndataset:\n  _target_: trainer.data.MockDataset\n"
            "  seq_length: 4096\ndistributed:\n  strategy: ddp\nhardware:\n  gpu_type: h100\n  gpus_per_node: 1\n")
    [finding] = [f for f in validate_text(text, "c.yaml").findings if f.code == "RA-M002"]
    assert "activation_checkpointing: selective (or full) (not enough alone: activations are" in finding.fix
    small = text.replace("seq_length: 4096", "seq_length: 4096\nstep_scheduler:\n  local_batch_size: 16")
    small = small.replace("llama3-8b", "llama32-1b").replace("strategy: ddp", "strategy: fsdp2")
    fixes = [f.fix for f in validate_text(small, "c.yaml").findings if f.code == "RA-M002"]
    assert fixes and "not enough alone" not in fixes[0].split(";")[0]  # here micro batch / recompute do close it


def test_context_parallel_does_not_shard_the_weights():
    text = yaml.safe_dump({
        "model": {"pretrained_model_name_or_path": "llama3-70b"},
        "distributed": {"strategy": "megatron", "tp_size": 1, "pp_size": 1, "cp_size": 2},
        "dataset": {"seq_length": 8192},
        "step_scheduler": {"global_batch_size": 8, "local_batch_size": 1},
        "hardware": {"gpu_type": "h100", "gpus_per_node": 2, "num_nodes": 1},
    })
    [finding] = [f for f in validate_text(text, "c.yaml").findings if f.code == "RA-M001"]
    assert finding.severity == "error" and "131.4 GiB for its weights alone" in finding.message


def test_expert_parallelism_shards_only_the_experts_weights():
    """RA-M001 skipped every layout with EP > 1, whatever its dense part."""
    def m001(model: str, ep: int, gpus: int):
        text = yaml.safe_dump({
            "model": {"pretrained_model_name_or_path": model},
            "distributed": {"strategy": "megatron", "tp_size": 1, "pp_size": 1, "ep_size": ep},
            "dataset": {"seq_length": 4096},
            "step_scheduler": {"global_batch_size": gpus, "local_batch_size": 1},
            "hardware": {"gpu_type": "h100", "gpus_per_node": 8, "num_nodes": gpus // 8},
        })
        return [f for f in validate_text(text, "c.yaml").findings if f.code == "RA-M001"]

    [finding] = m001("deepseek-v3", 8, 8)  # 1/8 of 256 experts is still over 150 GiB
    assert "1/8 of the routed experts" in finding.message
    assert m001("deepseek-v3", 64, 64) == []  # its dense part and 4 experts a layer fit
    assert m001("qwen3-30b-a3b", 8, 8) == []
