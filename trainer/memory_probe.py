"""What a training step holds in memory, term by term, measured on the model being trained.

The planner's memory model (service/memory.py) predicts weights, gradients, optimizer states and
activations per GPU; this module measures the same terms on a live run, so the two can be put
side by side (benchmarks/estimate_vs_measured.py, tests/test_estimates_*.py):

- weights, gradients, optimizer states: exact bytes of this rank's tensors (the local shard of a
  DTensor), the optimizer's after its first step;
- activations: bytes allocated by tensor ops during the forward (model and loss) that are still
  alive when it ends, which is what backward will read: a TorchDispatchMode follows each output
  storage until it is freed (CPU torch keeps no allocator statistics, and saved-tensor hooks do not
  see what non-reentrant activation checkpointing holds). Storages of parameters (FSDP2's
  unsharded copies) are left out: they are the FSDP working set, counted separately;
- FSDP working set: bytes of unsharded parameters alive at the end of forward.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


@dataclass
class MeasuredMemory:
    """Bytes on one rank."""

    weights: int = 0
    grads: int = 0
    optimizer: int = 0
    activations: int = 0
    fsdp_unsharded: int = 0

    def gib(self) -> dict[str, float]:
        return {k: v / 2**30 for k, v in self.__dict__.items()}


def _local(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of distinct local storages (a tied weight counts once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        local = _local(t)
        seen[local.untyped_storage().data_ptr()] = local.untyped_storage().nbytes()
    return sum(seen.values())


def weight_bytes(model: nn.Module) -> int:
    return tensor_bytes(p for p in model.parameters())


def grad_bytes(model: nn.Module) -> int:
    return tensor_bytes(p.grad for p in model.parameters() if p.grad is not None)


def optimizer_bytes(optimizer: torch.optim.Optimizer) -> int:
    return tensor_bytes(v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v))


class LiveBytes(TorchDispatchMode):
    """Bytes of storages created by ops inside the mode and not yet freed."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}

    def _free(self, key: int) -> None:
        self.live.pop(key, None)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            storage = t.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
            if nbytes == 0 or key in self.live:
                continue
            self.live[key] = nbytes
            weakref.finalize(storage, self._free, key)
        return out


def forward_activation_bytes(model: nn.Module, forward: Callable[[], torch.Tensor]) -> tuple[int, int, torch.Tensor]:
    """(activation bytes, unsharded-parameter bytes) alive when `forward()` returns, and its output."""
    with LiveBytes() as tracker:
        out = forward()
    param_storages = {_local(p).untyped_storage().data_ptr() for p in model.parameters()}
    params = sum(n for ptr, n in tracker.live.items() if ptr in param_storages)
    acts = sum(n for ptr, n in tracker.live.items() if ptr not in param_storages)
    return acts, params, out


def measure_recipe_step(recipe) -> MeasuredMemory:
    """Measure one optimizer step of a set-up TrainFinetuneRecipe (one micro-batch per step)."""
    sched = recipe.step_scheduler
    micro_batches = next(iter(sched))
    if len(micro_batches) != 1:
        raise ValueError("measure with one micro-batch per step: set local_batch_size = global / dp")
    measured = MeasuredMemory(weights=weight_bytes(recipe.model))
    batch = micro_batches[0]
    recipe.model.train()
    loss_sum, _ = None, None

    def forward():
        return recipe._forward_loss(batch)[0]

    measured.activations, measured.fsdp_unsharded, loss_sum = forward_activation_bytes(recipe.model, forward)
    loss_sum.backward()
    measured.grads = grad_bytes(recipe.model)
    recipe.optimizer.step()
    recipe.optimizer.zero_grad(set_to_none=True)
    measured.optimizer = optimizer_bytes(recipe.optimizer)
    return measured
