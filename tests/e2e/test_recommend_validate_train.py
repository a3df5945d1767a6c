"""The product end to end: recommend a config, validate it, train it with 2 CPU processes."""

import json
import os
from pathlib import Path

import pytest

from tests.trainer.harness import run_cli


def cli(*args, cwd, timeout=300):
    return run_cli(*args, cwd=cwd, timeout=timeout)


@pytest.mark.slow
def test_recommend_then_train_two_processes(tmp_path):
    rec = cli("recommend", "--model", "tiny-llama", "--gpus", "2", "--gpu-type", "cpu", "--goal", "pretrain",
              "--engine", "bundled", "-o", "c.yaml", cwd=tmp_path)
    assert rec.returncode == 0, rec.stderr
    assert (tmp_path / "c.yaml").is_file()

    val = cli("validate", "c.yaml", "--format", "json", cwd=tmp_path)
    assert val.returncode == 0, val.stdout
    assert json.loads(val.stdout)["summary"]["errors"] == 0

    ckpt = tmp_path / "ckpt"
    train = cli("train", "c.yaml", "--nproc-per-node", "2", "--step_scheduler.max_steps", "8",
                "--step_scheduler.checkpoint_interval", "8", "--step_scheduler.val_check_interval", "8",
                "--checkpoint.checkpoint_dir", str(ckpt), cwd=tmp_path, timeout=600)
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]

    records = [json.loads(line) for line in (ckpt / "training.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records]
    assert [r["step"] for r in records][-1] == 8
    assert losses[-1] < losses[0] - 0.1, losses
    assert {"step", "epoch", "loss", "grad_norm", "lr", "mem", "tps", "mfu"} <= set(records[0])
    assert (ckpt / "validation.jsonl").is_file()
    latest = (ckpt / "LATEST").read_text().strip() if (ckpt / "LATEST").is_file() else os.readlink(ckpt / "LATEST")
    consolidated = ckpt / Path(latest).name / "model" / "consolidated"
    assert (consolidated / "config.json").is_file()
    assert list(consolidated.glob("*.safetensors"))
