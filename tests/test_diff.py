"""`diff`: every changed key with its layer (convergence / execution / benchmark-only)."""

from __future__ import annotations

import json

import pytest

from service.changes import classify, diff, flatten, verdict
from service.cli import main

BASE = {
    "model": {"pretrained_model_name_or_path": "meta-llama/Meta-Llama-3-8B"},
    "step_scheduler": {"global_batch_size": 512, "local_batch_size": 1, "max_steps": 1000},
    "distributed": {"strategy": "megatron", "tp_size": 1, "pp_size": 1, "activation_checkpointing": "none"},
    "dataset": {"preset": "squad", "seq_length": 4096, "packed_sequence": True},
    "optimizer": {"_target_": "torch.optim.AdamW", "lr": 3e-4},
    "precision": "bf16",
    "hardware": {"gpu_type": "h100", "gpus_per_node": 8, "num_nodes": 1},
}


def changed(**edits) -> dict:
    new = json.loads(json.dumps(BASE))
    for dotted, value in edits.items():
        node = new
        *parents, leaf = dotted.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return new


def layers(new: dict) -> dict:
    return {c.key: c.layer for c in diff(BASE, new)}


def test_layout_and_hardware_are_execution():
    got = layers(changed(distributed__tp_size=4, distributed__pp_size=2, distributed__activation_checkpointing="full",
                         hardware__num_nodes=4))
    assert set(got.values()) == {"execution"} and len(got) == 4


def test_micro_batch_is_execution_only_while_the_global_batch_is_unchanged():
    assert layers(changed(step_scheduler__local_batch_size=4)) == {"step_scheduler.local_batch_size": "execution"}
    both = layers(changed(step_scheduler__local_batch_size=4, step_scheduler__global_batch_size=1024))
    assert both == {"step_scheduler.local_batch_size": "convergence", "step_scheduler.global_batch_size": "convergence"}


@pytest.mark.parametrize("key,value", [
    ("dataset__packed_sequence", False),
    ("precision", "fp8"),
    ("distributed__moe_token_drop_policy", "probs"),
    ("distributed__moe_expert_capacity_factor", 1.0),
    ("distributed__moe_router_topk_scaling_factor", 2.5),
    ("distributed__moe_aux_loss_coeff", 0.01),
    ("dataset__seq_length", 8192),
    ("optimizer__lr", 1e-4),
])
def test_never_execution_only(key, value):
    got = layers(changed(**{key: value}))
    assert got == {key.replace("__", "."): "convergence"}


@pytest.mark.parametrize("key,value", [
    ("dataset__preset", "mock"),
    ("distributed__moe_router_force_load_balancing", True),
    ("rerun_state_machine__check_for_nan_in_loss", False),
])
def test_benchmark_shortcuts(key, value):
    assert layers(changed(**{key: value})) == {key.replace("__", "."): "benchmark-only"}


def test_moe_transport_is_execution():
    assert classify("distributed.moe_token_dispatcher_type", "alltoall", "flex")[0] == "execution"
    assert classify("model.moe_flex_dispatcher_backend", "deepep", "hybridep")[0] == "execution"
    assert classify("compile.enabled", False, True)[0] == "execution"


def test_trainer_fast_paths_are_execution():
    edits = {"model__kernels": "liger", "model__attn_implementation": "sdpa", "loss_fn__chunked": "auto",
             "loss_fn__chunk_size": 512, "optimizer__fused": True, "optimizer__foreach": False,
             "compile__enabled": True}
    got = layers(changed(**edits))
    assert got == {key.replace("__", "."): "execution" for key in edits}
    assert "same experiment" in verdict(diff(BASE, changed(**edits)))
    # The loss itself and the optimizer's hyper-parameters stay convergence.
    assert classify("loss_fn._target_", "trainer.loss.causal_lm_loss", "my.loss")[0] == "convergence"
    assert classify("optimizer.lr", 3e-4, 1e-4)[0] == "convergence"


def test_added_and_removed_keys_are_listed():
    new = changed()
    del new["dataset"]["packed_sequence"]
    new["peft"] = {"method": "lora", "rank": 8}
    got = {c.key: (c.old, c.new, c.layer) for c in diff(BASE, new)}
    assert got["dataset.packed_sequence"] == (True, "<absent>", "convergence")
    assert got["peft.rank"] == ("<absent>", 8, "convergence")


def test_flatten_and_verdict():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": {}}) == {"a.b": 1, "a.c": [1, 2], "d": {}}
    assert "new convergence experiment" in verdict(diff(BASE, changed(optimizer__lr=1e-5)))
    assert "same experiment" in verdict(diff(BASE, changed(distributed__tp_size=2)))
    assert verdict([]) is None


def test_cli_json_and_exit_codes(tmp_path, capsys):
    import yaml

    base, new = tmp_path / "base.yaml", tmp_path / "new.yaml"
    base.write_text(yaml.safe_dump(BASE))
    new.write_text(yaml.safe_dump(changed(distributed__tp_size=2, optimizer__lr=1e-4)))
    assert main(["diff", str(base), str(new), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["changes"] == [
        {"key": "distributed.tp_size", "old": 1, "new": 2, "layer": "execution"},
        {"key": "optimizer.lr", "old": 3e-4, "new": 1e-4, "layer": "convergence"},
    ]
    assert main(["diff", str(base), str(new)]) == 0
    assert "new convergence experiment" in capsys.readouterr().out
    assert main(["diff", str(base), str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    assert main(["diff", str(bad), str(new)]) == 2
    assert "bad.yaml" in capsys.readouterr().err


def test_diff_refuses_a_named_pipe_without_blocking(tmp_path):
    import os
    import subprocess
    import sys

    fifo, good = tmp_path / "pipe.yaml", tmp_path / "good.yaml"
    os.mkfifo(fifo)
    good.write_text("precision: bf16\n")
    code = "import sys; from service.cli import main; sys.exit(main(['diff', sys.argv[1], sys.argv[2]]))"
    done = subprocess.run([sys.executable, "-c", code, str(fifo), str(good)], capture_output=True, text=True,
                          timeout=60, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert done.returncode == 2 and "not a regular file" in done.stderr
