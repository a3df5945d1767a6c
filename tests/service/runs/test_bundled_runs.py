"""A bundled trainer's (or AutoModel's) run folder read into a run: measurement, config, and the bad inputs that
are refused with their file:line, storing nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from service.runs.errors import RunInputError
from service.runs.ingest import from_run_dir, speed_env
from service.runs.training import outcome_of, training_record

CONFIG = {"model": {"pretrained_model_name_or_path": "tiny-llama"}, "precision": "fp32",
          "step_scheduler": {"global_batch_size": 16, "local_batch_size": 4, "max_steps": 6},
          "distributed": {"strategy": "ddp", "tp_size": 1, "activation_checkpointing": "selective"},
          "dataset": {"_target_": "trainer.data.PretrainDataset", "seq_length": 64},
          "hardware": {"gpu_type": "cpu", "gpus_per_node": 2, "num_nodes": 1},
          "compile": {"enabled": False}}
TOKENS = 16 * 64
STEP_SECONDS = [2.0, 1.0, 0.5, 0.52, 0.48, 0.5]  # two warm-up steps, then ~0.5 s


def write_run(folder: Path, seconds=STEP_SECONDS, config=CONFIG, tail: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"step": i, "epoch": 0, "loss": 6.0 - i / 10, "grad_norm": 1.0, "lr": 1e-3,
                         "mem": 0.25 + i / 100, "tps": TOKENS / s, "mfu": None}) for i, s in enumerate(seconds, 1)]
    (folder / "training.jsonl").write_text("\n".join(lines) + "\n" + tail)
    (folder / "run.yaml").write_text(yaml.safe_dump(config))
    return folder


def test_a_run_folder_measures_after_warm_up(tmp_path):
    run = from_run_dir(write_run(tmp_path / "r"), config=tmp_path / "r" / "run.yaml")
    m = run.measurement
    assert m.timed_steps == 4 and m.step_time_s == pytest.approx(0.5)
    assert m.step_time_p10_s == pytest.approx(0.486) and m.step_time_p90_s == pytest.approx(0.514)
    assert m.tokens_per_s_per_gpu == pytest.approx(TOKENS / 0.5 / 2)
    assert m.peak_mem_gib == pytest.approx(0.31) and (m.loss_first, m.loss_last) == (pytest.approx(5.9), 5.4)
    assert m.estimate_step_time_s > 0  # the planner's estimate of the layout, stored beside it
    assert (run.layout.sharding, run.layout.recompute, run.layout.micro_batch_size, run.layout.dp) == (
        "none", "selective", 4, 2)
    assert run.layout.fast_paths == {"compile.enabled": False}
    assert (run.request.model, run.request.world_size, run.request.precision) == ("tiny-llama", 2, "fp32")
    assert run.config_hash and "tiny-llama" in run.config_text


def test_the_config_comes_from_the_newest_checkpoint_when_not_given(tmp_path):
    folder = write_run(tmp_path / "r")
    (folder / "epoch_0_step_6").mkdir()
    (folder / "epoch_0_step_6" / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    assert from_run_dir(folder).request.model == "tiny-llama"


def test_a_folder_without_a_config_says_to_pass_one(tmp_path):
    with pytest.raises(RunInputError, match="--config"):
        from_run_dir(write_run(tmp_path / "r"))


def test_a_truncated_metrics_file_names_its_last_line(tmp_path):
    folder = write_run(tmp_path / "r", tail='{"step": 7, "epoch": 0, "lo')
    with pytest.raises(RunInputError, match=r"training.jsonl:7: the file ends mid-record") as info:
        from_run_dir(folder, config=folder / "run.yaml")
    assert "--outcome stopped" in str(info.value)
    stopped = from_run_dir(folder, config=folder / "run.yaml", outcome="stopped")
    assert stopped.outcome == "stopped" and stopped.measurement.timed_steps == 4


@pytest.mark.parametrize("line, message", [
    ("not json", "not a JSON metrics record"),
    ('{"step": 7, "loss": 1.0}', "no 'tps'"),
    ('{"step": 7, "tps": -5}', "tps is -5"),
    ('{"step": 7, "tps": NaN}', "tps is nan"),
    ('[1, 2]', "not a JSON object"),
])
def test_a_malformed_metrics_line_is_named(tmp_path, line, message):
    folder = write_run(tmp_path / "r", tail=line + "\n")
    with pytest.raises(RunInputError, match=message) as info:
        from_run_dir(folder, config=folder / "run.yaml")
    assert info.value.where.endswith("training.jsonl:7")


def test_an_unknown_model_is_refused_by_name(tmp_path):
    config = {**CONFIG, "model": {"pretrained_model_name_or_path": "llama-99b"}}
    folder = write_run(tmp_path / "r", config=config)
    with pytest.raises(RunInputError, match="unknown model 'llama-99b'") as info:
        from_run_dir(folder, config=folder / "run.yaml")
    assert info.value.where == "request.model"


def test_an_automodel_metrics_file_counts_the_tokens_it_logged(tmp_path):
    folder = tmp_path / "am"
    folder.mkdir()
    lines = [json.dumps({"step": i, "loss": 2.0, "tps": 500.0, "tps_per_gpu": 250.0, "num_tokens_per_step": 1000,
                         "mem": 1.0}) for i in range(1, 6)]
    (folder / "training.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "recipe.yaml").write_text(yaml.safe_dump({**CONFIG, "distributed": {
        "_target_": "nemo_automodel.components.distributed.fsdp2.FSDP2Manager", "tp_size": 1}}))
    run = from_run_dir(folder / "training.jsonl", config=folder / "recipe.yaml", engine="automodel")
    assert run.provenance.engine == "automodel" and run.layout.sharding == "full"
    assert run.measurement.step_time_s == pytest.approx(2.0)  # 1000 tokens at 500 tokens/s


@pytest.mark.parametrize("code, outcome", [(0, "completed"), (130, "stopped"), (137, "stopped"), (1, "crashed"),
                                           (2, "refused")])
def test_train_exit_codes_become_outcomes(code, outcome):
    assert outcome_of(code)[0] == outcome


def test_train_records_what_a_stopped_run_reached(tmp_path, monkeypatch):
    monkeypatch.setenv("RECIPE_ADVISOR_CLUSTER", "laptop")
    monkeypatch.setenv("NCCL_ALGO", "Ring")
    folder = write_run(tmp_path / "r", tail='{"step": 7, "ep')
    record = training_record(CONFIG, folder, 130, gpus_per_node=2, nodes=1, command=["recipe-advisor", "train"])
    assert record.outcome == "stopped" and record.measurement.timed_steps == 4
    assert record.provenance.cluster == "laptop" and record.reproduce.env == {"NCCL_ALGO": "Ring"}
    assert record.provenance.software["python"] and record.provenance.release.startswith("recipe-advisor")


def test_a_run_that_crashed_before_its_first_step_is_recorded_as_crashed(tmp_path):
    record = training_record(CONFIG, tmp_path / "never", 1, gpus_per_node=2, nodes=1, command=["train"])
    assert record.outcome == "crashed" and record.measurement.step_time_s is None


def test_speed_env_keeps_settings_and_leaves_out_local_cache_paths():
    environ = {"NCCL_ALGO": "Ring", "TORCHINDUCTOR_MAX_AUTOTUNE": "1", "TORCHINDUCTOR_CACHE_DIR": "/tmp/x",
               "HOME": "/root", "OMP_NUM_THREADS": "4"}
    assert speed_env(environ) == {"NCCL_ALGO": "Ring", "OMP_NUM_THREADS": "4", "TORCHINDUCTOR_MAX_AUTOTUNE": "1"}
