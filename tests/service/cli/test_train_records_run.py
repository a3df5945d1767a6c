"""`recipe-advisor train` records its run in the runs store when it ends, from the trainer's metrics: what a
completed run measured, what a stopped one reached; a store it cannot write is a warning, never its exit code."""

from __future__ import annotations

import json

import pytest
import yaml

from service.runs.store import RunsStore
from tests.paths import BUNDLED_RECIPES


def _config(tmp_path):
    cfg = yaml.safe_load((BUNDLED_RECIPES / "tiny_llama_pretrain.yaml").read_text())
    cfg["checkpoint"]["checkpoint_dir"] = str(tmp_path / "ckpt")
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def _trainer(monkeypatch, tmp_path, code: int, steps: int = 6, torn: bool = False):
    """Stand in for torch.distributed.run: writes the metrics a run of ``steps`` steps would, exits ``code``."""
    from service.cli import train as cli_train

    def launch(args):
        folder = tmp_path / "ckpt"
        folder.mkdir(exist_ok=True)
        lines = [json.dumps({"step": i, "epoch": 0, "loss": 5.0, "grad_norm": 1.0, "lr": 1e-3, "mem": 0.3,
                             "tps": 16 * 64 / 0.25, "mfu": None}) for i in range(1, steps + 1)]
        (folder / "training.jsonl").write_text("\n".join(lines) + "\n" + ('{"step": 9' if torn else ""))
        return code

    monkeypatch.setattr(cli_train, "launch", launch)


def test_a_completed_run_is_recorded(tmp_path, capsys, monkeypatch):
    from service.cli.train import run_argv

    _trainer(monkeypatch, tmp_path, 0)
    code = run_argv([str(_config(tmp_path)), "--nproc-per-node", "2", "--optimizer.lr", "2e-3"])
    assert code == 0 and "recorded run 1 (completed) in the runs store" in capsys.readouterr().err
    (run,) = RunsStore().query()
    assert run.measurement.step_time_s == pytest.approx(0.25) and run.measurement.timed_steps == 4
    assert "lr: 0.002" in run.config_text  # the config as it ran, overrides applied
    assert run.reproduce.command.startswith("recipe-advisor train") and "--optimizer.lr 2e-3" in run.reproduce.command


def test_a_stopped_run_keeps_its_exit_code_and_records_what_it_reached(tmp_path, capsys, monkeypatch):
    from service.cli.train import run_argv

    _trainer(monkeypatch, tmp_path, 130, steps=5, torn=True)
    assert run_argv([str(_config(tmp_path)), "--nproc-per-node", "2"]) == 130
    (run,) = RunsStore().query()
    assert run.outcome == "stopped" and run.measurement.timed_steps == 3


def test_a_store_that_cannot_be_written_is_a_warning(tmp_path, capsys, monkeypatch):
    from service.cli.train import run_argv

    monkeypatch.setenv("RECIPE_ADVISOR_DB", "postgresql+psycopg://nobody@/none?host=/nonexistent")
    _trainer(monkeypatch, tmp_path, 0)
    assert run_argv([str(_config(tmp_path)), "--nproc-per-node", "2"]) == 0
    assert "warning: the run was not recorded in the runs store" in capsys.readouterr().err


def test_recording_can_be_turned_off(tmp_path, capsys, monkeypatch):
    from service.cli.train import run_argv

    monkeypatch.setenv("RECIPE_ADVISOR_RECORD_RUNS", "0")
    _trainer(monkeypatch, tmp_path, 0)
    assert run_argv([str(_config(tmp_path)), "--nproc-per-node", "2"]) == 0
    assert "recorded run" not in capsys.readouterr().err
