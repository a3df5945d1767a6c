"""What a training step holds in memory, term by term, measured on the model being trained.

The planner's memory model (service/estimate/memory.py) predicts weights, gradients, optimizer states and
activations per GPU; this module measures the same terms on a live run, so the two can be put
side by side (benchmarks/estimate_vs_measured.py, tests/test_estimates_*.py):

- weights, gradients, optimizer states: exact bytes of this rank's tensors (the local shard of a
  DTensor), the optimizer's after its first step;
- activations: bytes allocated by tensor ops during the forward (model and loss) that are still
  alive when it ends, which is what backward will read: a TorchDispatchMode follows each output
  storage until it is freed (CPU torch keeps no allocator statistics, and saved-tensor hooks do not
  see what non-reentrant activation checkpointing holds). Storages of parameters (FSDP2's
  unsharded copies) are left out: they are the FSDP working set, counted separately. Also the
  peak over forward and backward (gradients and parameters left out);
- FSDP working set: the most bytes of unsharded parameters alive at once in backward, which starts
  with the activations at their peak, counting the all-gather output buffers FSDP2 holds for
  prefetched blocks as well as the unsharded parameters themselves. The forward's most is reported
  apart: it briefly holds the root twice (its parameters and its all-gather output until the first
  block's copy-out) while hardly any activation exists yet.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

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
    activations_peak: int = 0
    fsdp_unsharded: int = 0
    fsdp_unsharded_forward: int = 0

    def gib(self) -> dict[str, float]:
        return {k: v / 2**30 for k, v in self.__dict__.items()}


def _local(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of distinct local storages (a tied weight counts once)."""
    return sum(_storages(tensors).values())


def weight_bytes(model: nn.Module) -> int:
    return tensor_bytes(p for p in model.parameters())


def grad_bytes(model: nn.Module) -> int:
    return tensor_bytes(p.grad for p in model.parameters() if p.grad is not None)


def optimizer_bytes(optimizer: torch.optim.Optimizer) -> int:
    return tensor_bytes(v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v))


class LiveBytes(TorchDispatchMode):
    """Storages created by ops inside the mode and not yet freed; `on_op` runs after every op.

    Sizes are read when asked (`bytes_of`), so a storage FSDP2 resizes to zero after use (its
    unsharded parameters) counts only while it holds data. `all_gather_buffers` are the storages
    FSDP2 all-gathers parameters into (the `all_gather_output` of its `fsdp.all_gather_copy_in` op):
    a prefetched block lives there until its copy-out into the unsharded parameters.
    """

    def __init__(self, on_op: Optional[Callable[["LiveBytes"], None]] = None) -> None:
        super().__init__()
        self.storages: dict[int, weakref.ref] = {}
        self.all_gather_buffers: set[int] = set()
        self.on_op = on_op

    def _free(self, key: int) -> None:
        # The key is a StorageImpl address, which a later allocation may reuse: forget it entirely.
        self.storages.pop(key, None)
        self.all_gather_buffers.discard(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is _ALL_GATHER_COPY_IN:
            buffer = args[1].untyped_storage()
            self.all_gather_buffers.add(buffer._cdata)
            if buffer._cdata not in self.storages:  # allocated before the mode: still forget it when freed
                weakref.finalize(buffer, self._free, buffer._cdata)
        out = func(*args, **(kwargs or {}))
        # Views and in-place ops return their input's storage: that memory was not allocated here.
        inputs = {t.untyped_storage()._cdata for t in tree_flatten((args, kwargs))[0]
                  if isinstance(t, torch.Tensor) and t.device.type != "meta"}
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            storage = t.untyped_storage()
            key = storage._cdata  # the StorageImpl: stable while FSDP2 resizes it, unlike data_ptr()
            if storage.nbytes() == 0 or key in self.storages or key in inputs:
                continue
            self.storages[key] = weakref.ref(storage)
            weakref.finalize(storage, self._free, key)
        if self.on_op is not None:
            self.on_op(self)
        return out

    def bytes_of(self, exclude: set[int] = frozenset(), only: Optional[set[int]] = None) -> int:
        total = 0
        for key, ref in list(self.storages.items()):
            storage = ref()
            if storage is not None and key not in exclude and (only is None or key in only):
                total += storage.nbytes()
        return total


def _all_gather_copy_in_op():
    """FSDP2's copy-in op (registered when torch.distributed.fsdp is imported), or None."""
    try:
        import torch.distributed.fsdp  # noqa: F401  (registers torch.ops.fsdp)

        return torch.ops.fsdp.all_gather_copy_in.default
    except (ImportError, AttributeError, RuntimeError):
        return None


_ALL_GATHER_COPY_IN = _all_gather_copy_in_op()


def _storages(tensors: Iterable[torch.Tensor]) -> dict[int, int]:
    """StorageImpl key -> bytes of the tensors' (local) storages that hold data."""
    out = {}
    for t in tensors:
        storage = _local(t).untyped_storage()
        if storage.nbytes():
            out[storage._cdata] = storage.nbytes()
    return out


def measure_recipe_step(recipe) -> MeasuredMemory:
    """Measure one optimizer step of a set-up TrainFinetuneRecipe (one micro-batch per step).

    activations: alive when the forward (model + loss) ends; activations_peak: the most alive at
    any op of forward and backward, gradients and unsharded parameters left out (with full
    recompute it adds the re-run layer); fsdp_unsharded: the most bytes of unsharded parameters
    and FSDP2 all-gather buffers alive at once in backward (0 without FSDP2);
    fsdp_unsharded_forward: the same in forward.
    """
    micro_batches = next(iter(recipe.step_scheduler))
    if len(micro_batches) != 1:
        raise ValueError("measure with one micro-batch per step: set local_batch_size = global / dp")
    model = recipe.model
    measured = MeasuredMemory(weights=weight_bytes(model))
    peaks = {"acts": 0, "forward": 0, "backward": 0}
    phase = {"name": "forward"}

    from torch.distributed.tensor import DTensor

    # FSDP2 swaps a module's sharded DTensor parameters for unsharded ones while it computes: plain tensors, or
    # DTensors over the expert-parallel mesh for experts. Either way their storage is not a shard's.
    sharded = any(isinstance(p, DTensor) for p in model.parameters())
    shard_storages = set(_storages(model.parameters()))

    def on_op(tracker: LiveBytes) -> None:
        params = _storages(model.parameters())
        grads = _storages(p.grad for p in model.parameters() if p.grad is not None)
        if sharded:
            unsharded = {key: size for key, size in params.items() if key not in shard_storages}
            held = sum(unsharded.values()) + tracker.bytes_of(set(unsharded), only=tracker.all_gather_buffers)
            peaks[phase["name"]] = max(peaks[phase["name"]], held)
        not_activations = set(params) | set(grads) | tracker.all_gather_buffers
        peaks["acts"] = max(peaks["acts"], tracker.bytes_of(not_activations))

    model.train()
    with LiveBytes(on_op) as tracker:
        loss_sum = recipe._forward_loss(micro_batches[0])[0]
        measured.activations = tracker.bytes_of(set(_storages(model.parameters())) | tracker.all_gather_buffers)
        phase["name"] = "backward"
        loss_sum.backward()
    measured.activations_peak = peaks["acts"]
    measured.fsdp_unsharded = peaks["backward"]
    measured.fsdp_unsharded_forward = peaks["forward"]
    measured.grads = grad_bytes(model)
    recipe.optimizer.step()
    recipe.optimizer.zero_grad(set_to_none=True)
    measured.optimizer = optimizer_bytes(recipe.optimizer)
    return measured


def measure_pipeline_step(recipe) -> MeasuredMemory:
    """Measure one optimizer step of a set-up pipelined TrainFinetuneRecipe (distributed.pp_size > 1) on this rank.

    weights, gradients, optimizer states: exact bytes of this rank's stages. activations: the bytes alive when
    this rank's first backward starts, parameters, gradients and FSDP2 all-gather buffers left out: what the
    micro batches in flight keep for backward (1F1B: the first stage holds PP of them, the last one). The loss
    runs inside the last stage's forward, chunked, so its logits are gone by then. activations_peak: the most at
    any op of the step. fsdp_unsharded: the most bytes of unsharded parameters (and all-gather buffers) alive at
    once: the pipeline keeps its stages gathered for the whole step.
    """
    from torch.distributed.tensor import DTensor

    micro_batches = next(iter(recipe.step_scheduler))
    model, pipeline = recipe.model, recipe.pipeline.pipeline
    if pipeline.schedule is None:
        pipeline.build_schedule(micro_batches[0]["input_ids"])
    measured = MeasuredMemory(weights=weight_bytes(model))
    peak = {"acts": 0, "unsharded": 0}
    kept: dict[str, int] = {}

    def not_activations(tracker: LiveBytes) -> set[int]:
        grads = _storages(p.grad for p in model.parameters() if p.grad is not None)
        return set(_storages(model.parameters())) | set(grads) | tracker.all_gather_buffers

    def on_op(tracker: LiveBytes) -> None:
        unsharded = _storages(p for p in model.parameters() if not isinstance(p, DTensor))
        held = sum(unsharded.values()) + tracker.bytes_of(set(unsharded), only=tracker.all_gather_buffers)
        peak["unsharded"] = max(peak["unsharded"], held)
        peak["acts"] = max(peak["acts"], tracker.bytes_of(not_activations(tracker)))

    def first_backward(stage, tracker: LiveBytes):
        run = stage.backward_one_chunk

        def wrapped(*args, **kwargs):
            kept.setdefault("bytes", tracker.bytes_of(not_activations(tracker)))
            return run(*args, **kwargs)
        return wrapped

    model.train()
    with LiveBytes(on_op) as tracker:
        saved = [(stage, stage.backward_one_chunk) for stage in pipeline.stages]
        for stage, _ in saved:
            stage.backward_one_chunk = first_backward(stage, tracker)
        try:
            recipe._pipeline_forward_backward(micro_batches, 1.0)
        finally:
            for stage, run in saved:
                stage.backward_one_chunk = run
    measured.activations = kept.get("bytes", 0)
    measured.activations_peak = peak["acts"]
    measured.fsdp_unsharded = peak["unsharded"]
    measured.grads = grad_bytes(model)
    recipe.optimizer.step()
    recipe.optimizer.zero_grad(set_to_none=True)
    measured.optimizer = optimizer_bytes(recipe.optimizer)
    return measured
