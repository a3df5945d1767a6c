"""The torch state files of a checkpoint: the RNG of each rank, torch.save'd objects, and the
optimizer state (sharded, torch.distributed.checkpoint). Layout: trainer/contract/checkpoint_layout.py;
publication: trainer/components/checkpoint.py."""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def rng_state() -> dict[str, Any]:
    import torch

    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np
    except ImportError:
        return state
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state["numpy"] = (kind, torch.from_numpy(keys.astype("int64")), pos, has_gauss, cached)
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import torch

    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        import numpy as np

        kind, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((kind, keys.numpy().astype("uint32"), pos, has_gauss, cached))


def save_torch(obj: Any, path: Path) -> None:
    import torch

    from trainer.contract.safe_paths import open_no_follow

    path.parent.mkdir(parents=True, exist_ok=True)
    with open_no_follow(path, "w", binary=True) as fh:
        torch.save(obj, fh)


def load_torch(path: Path) -> Any:
    import torch

    # weights_only: a checkpoint is data; never unpickle arbitrary objects from it.
    return torch.load(path, map_location="cpu", weights_only=True)


def save_optimizer(model: torch.nn.Module, optimizer: torch.optim.Optimizer, path: Path) -> None:
    """Sharded optimizer state via torch.distributed.checkpoint (collective: every rank calls it)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    dcp.save({"optimizer": get_optimizer_state_dict(model, optimizer)}, checkpoint_id=str(path))


def load_optimizer(model: torch.nn.Module, optimizer: torch.optim.Optimizer, path: Path) -> None:
    """Load the state (moments, step counts) into the (already sharded) optimizer.

    The param groups' hyper-parameters (lr, weight decay, betas, fused, ...) stay those this run's
    config built it with: the saved groups carry the saved run's, and an unchanged config gives the
    same values, so only a resume under ``checkpoint.allow_config_change`` sees a difference."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    from trainer.components.checkpoint_trust import load_dcp

    configured = [{k: group[k] for k in (*optimizer.defaults, "initial_lr") if k in group}
                  for group in optimizer.param_groups]
    state = {"optimizer": get_optimizer_state_dict(model, optimizer)}
    load_dcp(state, path)  # not dcp.load's defaults: they unpickle the metadata and the byte entries freely
    set_optimizer_state_dict(model, optimizer, state["optimizer"])
    for group, values in zip(optimizer.param_groups, configured):
        group.update(values)
