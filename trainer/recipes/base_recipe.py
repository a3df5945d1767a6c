"""BaseRecipe: tracks the recipe's stateful attributes and saves / restores them (NeMo AutoModel's API).

Any attribute assigned on a recipe whose value has callable ``state_dict`` and
``load_state_dict`` is tracked (``__setattr__``), so a recipe that adds a stateful
component gets it checkpointed without touching the save code. Where a tracked
object goes depends on what it is:

- a model (``nn.Module``): consolidated Hugging Face safetensors (or a LoRA adapter),
  written by ``save_model_files`` of the concrete recipe;
- an optimizer: sharded, torch.distributed.checkpoint (``optim/``);
- an object with ``per_rank_state = True`` (the RNG): one file per rank;
- anything else (schedulers, the dataloader position): ``trainer_state.pt``, from rank 0.

Model weights are restored by the concrete recipe at the seed's point in setup
(after PEFT, before sharding); ``load_checkpoint_state`` restores the rest once the
optimizer exists.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import torch
import yaml
from torch import nn

from trainer.components import state_io
from trainer.components.checkpoint import CheckpointDir
from trainer.components.checkpoint_trust import verify_checkpoint
from trainer.contract.checkpoint_layout import checkpoint_name, write_schedule
from trainer.contract.resume_checks import checked_resume, signature_differences
from trainer.contract.safe_paths import write_text_no_follow
from trainer.distributed.dist import DistInfo, barrier, check_on_main, fault_point

TRAINER_STATE_FILE = "trainer_state.pt"


def has_load_restore_state(obj: Any) -> bool:
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


def is_model(obj: Any) -> bool:
    return isinstance(obj, nn.Module)


def is_optimizer(obj: Any) -> bool:
    return isinstance(obj, torch.optim.Optimizer)


def is_per_rank(obj: Any) -> bool:
    return bool(getattr(obj, "per_rank_state", False))


class RNGState:
    """The process's torch / CUDA / python / numpy generators as one stateful object (one per rank)."""

    per_rank_state = True

    def state_dict(self) -> dict[str, Any]:
        return state_io.rng_state()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state_io.set_rng_state(state)


def log(message: str, info: Optional[DistInfo] = None) -> None:
    """A line on stderr from rank 0 (tqdm owns stdout's line on rank 0 when it runs)."""
    if info is None or info.is_main:
        from tqdm import tqdm

        tqdm.write(message, file=sys.stderr)  # keeps a running progress bar intact


class BaseRecipe:
    """Stateful-attribute tracking and checkpoint save / restore. Subclasses set ``self.dist``,
    ``self.raw_config``, ``self.checkpoint_dir`` and implement ``save_model_files``."""

    def __setattr__(self, key: str, value: Any) -> None:
        if key == "_state_tracked":
            raise ValueError("_state_tracked is managed by BaseRecipe and cannot be assigned")
        tracked = self.__dict__.setdefault("_state_tracked", set())
        if has_load_restore_state(value):
            tracked.add(key)
        else:
            tracked.discard(key)
        super().__setattr__(key, value)

    @property
    def tracked_state(self) -> list[str]:
        return sorted(self.__dict__.get("_state_tracked", ()))

    def untrack_state(self, *keys: str) -> None:
        for key in keys:
            self.__dict__.get("_state_tracked", set()).discard(key)

    # ---- hooks of the concrete recipe ---------------------------------------------------------
    def save_model_files(self, model: nn.Module, out_dir: Path) -> None:
        raise TypeError(f"{type(self).__name__} must define save_model_files to checkpoint a model")

    def model_signature(self) -> dict[str, Any]:
        return {}

    # ---- save ---------------------------------------------------------------------------------
    def save_checkpoint(self, epoch: int, step: int) -> Path:
        """Write every tracked object into a staging folder, then publish it atomically."""
        info: DistInfo = self.dist
        store = CheckpointDir(self.checkpoint_dir, self.cfg.checkpoint.keep_last)
        if info.is_main:
            store.remove_stale_staging()
            store.prepare_staging(epoch, step)
        barrier()
        staging = store.staging(epoch, step)
        shared: dict[str, Any] = {}
        for key in self.tracked_state:
            obj = getattr(self, key)
            if is_model(obj):
                self.save_model_files(obj, staging / "model")
            elif is_optimizer(obj):
                state_io.save_optimizer(self.model, obj, staging / ("optim" if key == "optimizer" else key))
            elif is_per_rank(obj):
                state_io.save_torch(obj.state_dict(), staging / key / f"rank_{info.rank}.pt")
            else:
                shared[key] = obj.state_dict()
        if info.is_main:
            state_io.save_torch(shared, staging / TRAINER_STATE_FILE)
            write_text_no_follow(staging / "config.yaml", yaml.safe_dump(self.raw_config, sort_keys=False))
            write_text_no_follow(staging / "signature.json", json.dumps(self.model_signature(), indent=2) + "\n")
            steps = getattr(self, "step_scheduler", None)
            if steps is not None:
                write_schedule(staging, steps.steps_per_epoch, steps.total_steps)
        barrier()
        fault_point("during_save", step, info.rank)
        final = store.publish(staging, epoch, step) if info.is_main else store.root / checkpoint_name(epoch, step)
        barrier()
        return final

    # ---- restore ------------------------------------------------------------------------------
    def select_checkpoint(self) -> Optional[Path]:
        """The checkpoint to resume from (restore_from, else auto-detected), after the signature check.

        A checkpoint that does not fit this model is an error listing the differing fields, also an
        auto-detected one: starting fresh in its folder would overwrite it (``checkpoint.enabled:
        false`` runs without auto-resume and without saving). One that fits is then compared with the
        config it was saved under
        (``resume_checks.check_resume_config``): a changed convergence key is an error unless
        ``checkpoint.allow_config_change`` is set.
        """
        path, warnings = checked_resume(
            self.cfg, self.checkpoint_dir, self.dist.world_size if self.dist else None,
            lambda saved: signature_differences(self.model_signature(), saved))
        if path is None and self.cfg.restore_from and self.cfg.restore_from.path == "LATEST":
            # "the newest if any", as AutoModel and torchtitan read it
            log(f"warning: restore_from.path is LATEST but {self.checkpoint_dir} holds no complete checkpoint; "
                "starting fresh from step 0", self.dist)
        if path is not None:  # every file read as data before any rank loads one (checkpoint_trust)
            check_on_main(lambda: verify_checkpoint(path))
        for line in warnings:
            log(line, self.dist)
        return path

    def load_checkpoint_state(self, path: Path) -> None:
        """Restore every tracked object except the model (already loaded before sharding).

        Optimizers first: their state dict carries the lr of the saved run's schedule, and an LR
        scheduler restored after them sets the lr of this run's schedule for the next step."""
        info: DistInfo = self.dist
        shared = state_io.load_torch(path / TRAINER_STATE_FILE)
        for key in sorted(self.tracked_state, key=lambda k: not is_optimizer(getattr(self, k))):
            obj = getattr(self, key)
            if is_model(obj):
                continue
            if is_optimizer(obj):
                state_io.load_optimizer(self.model, obj, path / ("optim" if key == "optimizer" else key))
            elif is_per_rank(obj):
                file = path / key / f"rank_{info.rank}.pt"
                if file.is_file():
                    obj.load_state_dict(state_io.load_torch(file))
                else:
                    log(f"warning: {file} is missing (saved with fewer ranks); {key} keeps its fresh state", info)
            elif key in shared:
                obj.load_state_dict(shared[key])
            else:
                log(f"warning: checkpoint {path} has no state for {key}; it starts fresh", info)
