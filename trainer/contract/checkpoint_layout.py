"""The layout of ``checkpoint_dir``, which folders in it are complete checkpoints, and which one a run restores.

Torch-free: the launcher's pre-flight (trainer/contract/preflight.py) resolves ``restore_from`` before any
process starts. The publication that writes these folders is trainer/components/checkpoint.py.

Layout of ``checkpoint_dir``::

    training.jsonl, validation.jsonl
    LATEST                          name of the newest complete checkpoint
    epoch_<E>_step_<S>/
        .complete                   written last (step, time, each file's size); a folder without it is never taken
        config.yaml                 the effective config of the run (a resume compares its own with it)
        signature.json              the model signature (architecture + PEFT) for compatibility checks
        schedule.json               steps per epoch (a resume reads it to tell a new length from a new
                                    schedule) and the run's length (a record for people)
        model/consolidated/         Hugging Face config.json + safetensors (transformers loads it)
        model/adapter_model.safetensors, model/adapter_config.json    (LoRA runs)
        optim/                      optimizer state, torch.distributed.checkpoint (sharded, one file per rank)
        trainer_state.pt            step scheduler, LR scheduler, data position
        rng/rank_<r>.pt             torch / python / numpy RNG of each rank
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Optional

from trainer.contract.overrides import ConfigError
from trainer.contract.safe_paths import write_text_no_follow

COMPLETE_MARKER = ".complete"
SCHEDULE_FILE = "schedule.json"
LATEST_FILE = "LATEST"
TMP_PREFIX = ".tmp_"

_NAME = re.compile(r"^epoch_(\d+)_step_(\d+)$")
UNTRUSTED_FIX = ("a checkpoint is read as data and this file is not what the trainer writes; restore a checkpoint "
                 "this trainer saved, or remove this one from the folder (auto-resume takes the newest complete one)")


class UntrustedCheckpoint(ConfigError):
    """A file of a checkpoint is not data the trainer wrote (a pickle of other types, damaged, truncated):
    trainer/components/checkpoint_trust.py reads each before a resume loads any."""


def refused(path: Path, why: str) -> UntrustedCheckpoint:
    return UntrustedCheckpoint(f"checkpoint file {path}: {why}; {UNTRUSTED_FIX}")


def checkpoint_name(epoch: int, step: int) -> str:
    return f"epoch_{epoch}_step_{step}"


def is_complete(path: Path) -> bool:
    return path.is_dir() and _NAME.match(path.name) is not None and (path / COMPLETE_MARKER).is_file()


def list_complete(checkpoint_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first (by step, then epoch)."""
    if not checkpoint_dir.is_dir():
        return []
    found = [p for p in checkpoint_dir.iterdir() if is_complete(p)]

    def order(p: Path) -> tuple[int, int]:
        epoch, step = _NAME.match(p.name).groups()
        return int(step), int(epoch)

    return sorted(found, key=order)


def _published_at(path: Path) -> float:
    """When a checkpoint was published: the time its marker records, else the marker file's own."""
    marker = path / COMPLETE_MARKER
    try:
        recorded = json.loads(marker.read_text(encoding="utf-8")).get("time")
    except (OSError, ValueError, AttributeError):
        recorded = None
    if isinstance(recorded, (int, float)) and not isinstance(recorded, bool):
        return float(recorded)
    try:
        return marker.stat().st_mtime
    except OSError:
        return 0.0


def list_published(checkpoint_dir: Path) -> list[Path]:
    """Complete checkpoints in the order they were published, oldest first. Not the step order: a run
    restarted from an older checkpoint saves lower steps after the abandoned run's higher ones, and
    its own saves are the newest (retention keeps them; auto-resume continues them)."""
    return sorted(list_complete(checkpoint_dir), key=_published_at)  # stable: equal times keep the step order


def find_latest(checkpoint_dir: Path) -> Optional[Path]:
    """The checkpoint LATEST names when it is complete, else the one published last (LATEST names a
    folder not there yet when a run stopped inside ``CheckpointDir.publish``)."""
    latest = checkpoint_dir / LATEST_FILE
    if latest.is_file():
        named = checkpoint_dir / Path(latest.read_text(encoding="utf-8", errors="replace").strip()).name
        if is_complete(named):
            return named
    published = list_published(checkpoint_dir)
    return published[-1] if published else None


def resolve_restore(restore_from: Optional[str], checkpoint_dir: Path) -> tuple[Optional[Path], bool]:
    """(checkpoint to restore or None, whether the user asked for it explicitly).

    ``None``: auto-resume from the newest complete checkpoint in ``checkpoint_dir``, if any.
    ``LATEST``: the same, stated explicitly (nothing there yet means a fresh start).
    A name (``epoch_0_step_100``, under checkpoint_dir) or a path: must be a complete checkpoint.
    """
    if restore_from is None or restore_from == "LATEST":
        return find_latest(checkpoint_dir), restore_from is not None
    candidates = [Path(restore_from).expanduser()]
    if not candidates[0].is_absolute():
        candidates.insert(0, checkpoint_dir / restore_from)
    for path in candidates:
        if path.is_dir():
            if not is_complete(path):
                raise ConfigError(
                    f"restore_from.path: {path} is not a complete checkpoint (no {COMPLETE_MARKER}: an "
                    "interrupted save, or not a checkpoint folder); name a complete epoch_<E>_step_<S> "
                    "folder or LATEST"
                )
            return path, True
    for path in candidates:
        if path.exists():
            raise ConfigError(
                f"restore_from.path: {path} is a file, not a checkpoint folder; name a complete "
                f"epoch_<E>_step_<S> folder (a name under {checkpoint_dir} or a path) or LATEST"
            )
    available = ", ".join(p.name for p in list_complete(checkpoint_dir)) or "none"
    raise ConfigError(
        f"restore_from.path: {restore_from!r} does not exist (looked in {', '.join(map(str, candidates))}); "
        f"complete checkpoints in {checkpoint_dir}: {available}. Use LATEST, one of those names, or a path"
    )


def read_signature(ckpt: Path) -> dict[str, Any]:
    path = ckpt / "signature.json"
    if not path.is_file():
        return {}
    try:
        signature = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise refused(path, f"is not JSON ({str(exc).splitlines()[0][:200]})") from None
    if not isinstance(signature, dict):
        raise refused(path, "is not a model signature (no JSON object)")
    return signature


def write_schedule(folder: Path, steps_per_epoch: int, total_steps: int) -> None:
    write_text_no_follow(folder / SCHEDULE_FILE, json.dumps({"steps_per_epoch": steps_per_epoch,
                                                             "total_steps": total_steps}) + "\n")


def read_steps_per_epoch(ckpt: Path) -> Optional[int]:
    """Steps per epoch of the run that saved ``ckpt``, or None (saved before schedule.json existed)."""
    try:
        value = json.loads((ckpt / SCHEDULE_FILE).read_text(encoding="utf-8")).get("steps_per_epoch")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def saved_world_size(ckpt: Path) -> Optional[int]:
    """Processes of the run that saved ``ckpt``: one RNG file per rank (None when there are none)."""
    ranks = list((ckpt / "rng").glob("rank_*.pt"))
    return len(ranks) or None
