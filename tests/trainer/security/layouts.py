"""One real checkpoint of each layout the trainer writes (FSDP2, DDP, TP, EP, PP, CP): 2 gloo processes, a tiny
model, one step, one save. Built once per test session; tests tamper with copies."""

from __future__ import annotations

from pathlib import Path

from tests.trainer.harness import assert_clean_exit, run_trainer, write_config

ONE_STEP = {"step_scheduler": {"global_batch_size": 2, "local_batch_size": 1, "max_steps": 1,
                               "checkpoint_interval": 1, "log_interval": 1},
            "dataset": {"_target_": "trainer.data.MockDataset", "seq_length": 16, "num_samples": 8},
            "lr_scheduler": {"schedule": "constant"}}
LAYOUTS = {
    "fsdp2": {},
    "ddp": {"distributed": {"strategy": "ddp", "backend": "gloo"}},
    "tp": {"distributed": {"strategy": "fsdp2", "backend": "gloo", "tp_size": 2}},
    "ep": {"model": {"pretrained_model_name_or_path": "tiny-moe"},
           "distributed": {"strategy": "fsdp2", "backend": "gloo", "ep_size": 2}},
    "pp": {"distributed": {"strategy": "fsdp2", "backend": "gloo", "pp_size": 2}},
    "cp": {"distributed": {"strategy": "fsdp2", "backend": "gloo", "cp_size": 2}},
}


def layout_config(folder: Path, layout: str) -> Path:
    updates = {**ONE_STEP, **LAYOUTS[layout]}
    if layout in ("tp", "cp"):  # one data-parallel rank: the global batch is its micro batch
        updates["step_scheduler"] = {**ONE_STEP["step_scheduler"], "global_batch_size": 1}
    return write_config(folder, updates)


def train_layout(folder: Path, layout: str) -> Path:
    """The checkpoint (epoch_0_step_1) of a one-step run of ``layout`` in ``folder``."""
    assert_clean_exit(run_trainer(layout_config(folder, layout), timeout=240))
    return folder / "ckpt" / "epoch_0_step_1"
