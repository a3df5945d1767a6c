"""Shared helpers of the trainer's multi-process tests: a tiny config, launching the trainer under
torch.distributed.run (2 CPU processes, gloo), and reading its metrics and checkpoints."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Optional

import yaml

from tests import launch_server
from tests.paths import REPO
from trainer.contract.checkpoint_lock import LOCK_FILE

# tiny-llama: vocab 512, hidden 64, 2 layers, 4 heads, 2 KV heads (recipe_index/models/tiny-llama.json).
BASE_CONFIG = {
    "model": {"pretrained_model_name_or_path": "tiny-llama"},
    "step_scheduler": {"global_batch_size": 8, "local_batch_size": 2, "max_steps": 8, "checkpoint_interval": 4,
                       "log_interval": 1},
    "distributed": {"strategy": "fsdp2", "backend": "gloo"},
    "dataset": {"_target_": "trainer.data.MockDataset", "seq_length": 32, "num_samples": 256},
    "optimizer": {"_target_": "torch.optim.AdamW", "lr": 3.0e-3, "weight_decay": 0.01},
    # decay_steps fixed, so a run stopped early (max_steps 4) follows the 8-step run's schedule.
    "lr_scheduler": {"schedule": "cosine", "warmup_steps": 2, "decay_steps": 8, "min_lr": 3.0e-4},
    "checkpoint": {"checkpoint_dir": "ckpt"},
    "rng": {"seed": 1234},
    "precision": "fp32",
    "hardware": {"gpu_type": "cpu", "gpus_per_node": 2},
}


def write_config(folder: Path, updates: Optional[dict] = None, name: str = "config.yaml") -> Path:
    cfg = json.loads(json.dumps(BASE_CONFIG))
    for section, values in (updates or {}).items():
        if isinstance(values, dict) and isinstance(cfg.get(section), dict):
            cfg[section].update(values)
        else:
            cfg[section] = values
    folder.mkdir(parents=True, exist_ok=True)
    cfg["checkpoint"]["checkpoint_dir"] = str(folder / cfg["checkpoint"]["checkpoint_dir"])
    path = folder / name
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def _env(extra: Optional[dict] = None) -> dict:
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))})
    env.pop("TRAINER_FAULT_INJECT", None)
    env.update(extra or {})
    return env


def run_trainer(config: Path, *overrides: str, nproc: int = 2, env: Optional[dict] = None,
                timeout: float = 120) -> subprocess.CompletedProcess:
    """`torchrun --nproc-per-node N --standalone -m trainer CONFIG ...`; nproc=0 runs `python -m trainer` alone.
    Started from the pre-imported launch server (tests/launch_server.py)."""
    args = ["-m", "trainer", str(config), *overrides]
    if nproc:
        args = [f"--nproc-per-node={nproc}", "--standalone", *args]
    return launch_server.run(args, torchrun=nproc > 0, cwd=config.parent, env=_env(env), timeout=timeout)


def run_launcher(config: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`recipe-advisor train CONFIG ARGS...` (the launcher: pre-flight, then torch.distributed.run)."""
    return run_cli("train", str(config), *args, cwd=config.parent, timeout=timeout)


def run_cli(*args: str, cwd: Path, timeout: float = 300, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    """`recipe-advisor ARGS...` (`python -m service.cli.app`), from the pre-imported launch server."""
    return launch_server.run(["-m", "service.cli.app", *args], torchrun=False, cwd=cwd, env=_env(env),
                             timeout=timeout)


def assert_clean_exit(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, result.stderr[-4000:]
    for bad in ("Traceback", "terminate called", "Aborted", "ChildFailedError"):
        assert bad not in result.stderr, result.stderr[-4000:]


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def losses(ckpt_dir: Path) -> list[float]:
    rows = records(ckpt_dir / "training.jsonl")
    assert [r["step"] for r in rows] == list(range(1, len(rows) + 1)), "one record per step, in order"
    return [r["loss"] for r in rows]


def tree_digest(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under root (to prove nothing was written or damaged), but the
    folder's lock file, which names the last run that took it (trainer/contract/checkpoint_lock.py)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != LOCK_FILE}
