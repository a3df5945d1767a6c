"""Audit s10b (notes/audit_s10b.md): what the README promises, held to it."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from service.cli import main
from service.recommend import recommend


@pytest.mark.parametrize("goal, overrides", [
    ("pretrain", ["--lr_scheduler.decay_steps=abc", "--lr_scheduler.warmup_steps=100"]),
    ("pretrain", ["--lr_scheduler", "{warmup_steps: 100, decay_steps: abc}"]),
    ("sft", ["--distributed.cp_size", "abc"]),
])
def test_a_mistyped_override_is_refused_not_a_traceback(capsys, goal, overrides):
    """#3: the Bridge command was built from the invalid config before the findings refused it."""
    flags = ["recommend", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100", "--goal", goal, "-o", "-"]
    assert main(flags + overrides) == 2
    err = capsys.readouterr().err
    assert "RA-C002 error" in err and "nothing written" in err and "Traceback" not in err


def test_the_api_answers_400_for_the_same_override():
    from service.app import create_app

    response = TestClient(create_app(), raise_server_exceptions=False).post("/v1/recommend", json={
        "model": "llama3-8b", "gpus": 8, "gpu_type": "h100",
        "overrides": {"lr_scheduler.decay_steps": "abc", "lr_scheduler.warmup_steps": 100}})
    assert response.status_code == 400 and "RA-C002" in response.json()["detail"]


def test_numbers_inside_a_section_override_are_read_as_in_a_file():
    """#5: `{lr: 3e-3}` was the string '3e-3', so recommend called the recipe's own 0.003 a convergence change."""
    rec = recommend("tiny-llama", 2, "cpu", engine="bundled", overrides=[
        "--optimizer", "{_target_: torch.optim.AdamW, lr: 3e-3, betas: [0.9, 0.95], weight_decay: 0.01}"])
    assert rec.config["optimizer"]["lr"] == 0.003
    assert not [c for c in rec.changes if c.key == "optimizer.lr"]
    quoted = recommend("tiny-llama", 2, "cpu", engine="bundled",
                       overrides=["--optimizer", "{_target_: torch.optim.AdamW, lr: '1e-3'}"])
    assert quoted.config["optimizer"]["lr"] == "1e-3"  # quoted: text, as in a file


@pytest.mark.parametrize("folder, why", [("/proc/no/such", "in '/proc', the nearest folder that exists"),
                                         ("{tmp}/a_file/sub", "Not a directory")])
def test_dry_run_checks_the_checkpoint_folder_without_creating_it(tmp_path, capsys, folder, why):
    """#10: `--dry-run` printed the command for a folder the launch then refused."""
    (tmp_path / "a_file").write_text("x")
    config = tmp_path / "c.yaml"
    assert main(["recommend", "--model", "tiny-llama", "--gpus", "2", "--gpu-type", "cpu", "--engine", "bundled",
                 "-o", str(config)]) == 0
    capsys.readouterr()
    target = folder.format(tmp=tmp_path)
    assert main(["train", str(config), "--dry-run", "--checkpoint.checkpoint_dir", target]) == 2
    err = capsys.readouterr().err
    assert "checkpoint.checkpoint_dir: cannot create or write in" in err and why in err
    fresh = tmp_path / "new" / "ckpt"
    assert main(["train", str(config), "--dry-run", "--checkpoint.checkpoint_dir", str(fresh)]) == 0
    assert not (tmp_path / "new").exists() and not list(tmp_path.glob(".write_probe_*"))


def test_the_sequence_length_bound_names_its_real_minimum(capsys):
    assert main(["plan", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100", "--seq-length", "4194305"]) == 2
    assert "expected an integer from 2 to 4,194,304" in capsys.readouterr().err
