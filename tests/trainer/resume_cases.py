"""Run folders and checkpoints for the resume tests: the base config with dotted changes, a saved
checkpoint's config, the resume check, and a copy of a straight run stopped at step 4."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from tests.trainer.harness import BASE_CONFIG
from trainer.contract.config import parse_config
from trainer.contract.dotted import set_dotted
from trainer.contract.resume_checks import check_resume_config


def config_dict(**dotted) -> dict:
    """BASE_CONFIG with dotted keys set (``None`` removes a key); checkpoint_dir relative to the config,
    so a copied run folder holds the config its checkpoints were saved under."""
    cfg = json.loads(json.dumps(BASE_CONFIG))
    for key, value in dotted.items():
        set_dotted(cfg, key.replace("__", "."), value, none_removes=True)
    return cfg


def saved_checkpoint(folder: Path, cfg: dict) -> Path:
    """A checkpoint folder holding only the config.yaml a run saves (what the comparison reads)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return folder


def check_resume(tmp_path: Path, saved: dict, current: dict) -> list[str]:
    return check_resume_config(saved_checkpoint(tmp_path / "epoch_0_step_4", saved), parse_config(current),
                               "checkpoint.checkpoint_dir")


def write_run_config(folder: Path, cfg: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    cfg["checkpoint"]["checkpoint_dir"] = "ckpt"  # run_trainer runs in the config's folder
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def stopped_at_step_4(straight_run: Path, folder: Path) -> Path:
    """A copy of the straight run as if it had stopped after its step-4 checkpoint."""
    ckpt = folder / "ckpt"
    shutil.copytree(straight_run, ckpt)
    shutil.rmtree(ckpt / "epoch_0_step_8")
    (ckpt / "LATEST").write_text("epoch_0_step_4\n")
    return ckpt
