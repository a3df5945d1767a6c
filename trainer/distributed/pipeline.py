"""Pipeline parallel with ``torch.distributed.pipelining`` (1F1B and interleaved 1F1B), FSDP2 within each stage.

The split: PP x VP stages in schedule order, stage s on pipeline rank s % PP (its virtual chunk s // PP), cut
where the planner and validate place the layers (trainer/contract/pipeline_split.py ``stage_layer_counts``):
the embedding on the first stage, the final norm, LM head and loss on the last.

Each rank keeps one trimmed ``CausalLM`` (``Pipeline.model``): its own decoder blocks in a ``ModuleDict`` keyed
by their global index, the embedding only where it holds the first stage, the norm and head only where it holds
the last. Its parameter names are therefore the Hugging Face names of the whole model, so the seeded init, the
consolidated checkpoint (gathered over the stages), the optimizer state (torch.distributed.checkpoint, keyed by
name) and resuming under another PP size all work as without a pipeline. The stage modules the schedule runs
(``DecoderStage``) hold references to the same submodules.

FSDP2 (torchtitan's order): every block is sharded on its own over the ``dp`` mesh dimension, then every stage
module as the root of its embedding / norm / head; the schedule turns gradient sync off but for the last micro
batch. Micro batches: the step's gradient-accumulation micro batches (each ``local_batch_size`` sequences) are
the pipeline's micro batches. Loss: the sum of token cross-entropies on the last stage, times the same scale the
non-pipelined loop uses (data-parallel size / label tokens of the global batch), so gradients match one process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch
import torch.distributed as dist
from torch import nn

from trainer.contract.pipeline_split import stage_layer_counts
from trainer.fused.linear_cross_entropy import linear_cross_entropy
from trainer.models.builder import InitSource, fill_parameters
from trainer.models.decoder import CausalLM

SCHEDULES = ("1f1b", "interleaved_1f1b")
IGNORE_INDEX = -100


def stage_layers(layers: int, pp_size: int, vp_size: int) -> list[range]:
    """The decoder layers of every stage, in schedule order."""
    counts = stage_layer_counts(layers, pp_size, vp_size)
    if counts is None:
        raise ValueError(f"{layers} decoder layers do not split over pp_size {pp_size} x vp_size {vp_size} stages")
    ranges, start = [], 0
    for count in counts:
        ranges.append(range(start, start + count))
        start += count
    return ranges


class DecoderStage(nn.Module):
    """One pipeline stage: [embedding] -> its blocks -> [final norm -> LM head and loss]. Input: token ids on the
    first stage, hidden states elsewhere. Output: hidden states, or on the last stage the summed token
    cross-entropy of the micro batch, computed here, inside the stage's forward, so that FSDP2 gathers the head for
    it and the fused chunked loss (trainer/fused/linear_cross_entropy.py) never holds the whole logits. The labels
    of the step's micro batches wait in ``pending_labels``, taken in order (the last stage runs its forwards in
    micro-batch order under every schedule)."""

    def __init__(self, lm: CausalLM, layer_keys: list[str], first: bool, last: bool, loss_kernels: str = "torch"):
        super().__init__()
        self.embed_tokens = lm.model.embed_tokens if first else None
        self.layers = nn.ModuleList([lm.model.layers[key] for key in layer_keys])
        self.norm = lm.model.norm if last else None
        self.lm_head = lm.lm_head if last else None
        self.rotary_emb = lm.model.rotary_emb
        self.loss_kernels = loss_kernels
        self.pending_labels: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed_tokens(x) if self.embed_tokens is not None else x
        positions = torch.arange(h.shape[1], device=h.device).unsqueeze(0)
        cos, sin = self.rotary_emb(positions, dtype=h.dtype)
        for block in self.layers:
            h = block(h, cos, sin)
        if self.lm_head is None:
            return h
        hidden = self.norm(h).reshape(-1, h.shape[-1])
        labels = self.pending_labels.pop(0).to(h.device).reshape(-1)
        return linear_cross_entropy(hidden, self.lm_head.weight, labels, ignore_index=IGNORE_INDEX,
                                    kernels=self.loss_kernels)


def trim_to_rank(lm: CausalLM, stage_ranges: list[range], stage_ids: list[int]) -> list[list[str]]:
    """Keep on ``lm`` what the stages ``stage_ids`` run (in place); returns each stage's block keys."""
    keys = [[str(i) for i in stage_ranges[s]] for s in stage_ids]
    owned = [key for stage_keys in keys for key in stage_keys]
    lm.model.layers = nn.ModuleDict({key: lm.model.layers[int(key)] for key in owned})
    if 0 not in stage_ids:
        lm.model.embed_tokens = None
    if len(stage_ranges) - 1 not in stage_ids:
        lm.model.norm = None
        lm.lm_head = None
    return keys


class StageLoss:
    """The schedule's loss: the last stage's output (the summed token cross-entropy) times ``scale`` (set per
    step: data-parallel size / label tokens of the global batch)."""

    def __init__(self):
        self.scale = 1.0

    def __call__(self, loss_sum: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return loss_sum * self.scale


@dataclass
class Pipeline:
    model: CausalLM  # this rank's trimmed model: parameters, optimizer, state dicts
    modules: list[DecoderStage]  # this rank's stage modules, in schedule order
    stage_ids: list[int]
    num_stages: int
    schedule_name: str
    micro_batches: int
    activation_dtype: torch.dtype  # what flows between stages (the compute dtype)
    device: torch.device
    pp_group: Any
    loss: StageLoss = field(default_factory=StageLoss)
    schedule: Any = None  # built by the first step, which gives the micro batch's shape
    stages: list = field(default_factory=list)  # torch.distributed.pipelining.PipelineStage, with the schedule

    @property
    def has_first(self) -> bool:
        return 0 in self.stage_ids

    @property
    def has_last(self) -> bool:
        return self.num_stages - 1 in self.stage_ids

    def build_schedule(self, micro_input: torch.Tensor) -> None:
        """The stages with static shapes (a micro batch's ids [b, T]; hidden states [b, T, H] between stages; the
        loss a scalar): no shape-inference pass, which would run a forward the loss's labels do not expect."""
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleInterleaved1F1B

        ids = torch.empty(micro_input.shape, dtype=micro_input.dtype, device=self.device)
        hidden = torch.empty((*micro_input.shape, self.model.config.hidden_size), dtype=self.activation_dtype,
                             device=self.device, requires_grad=True)  # its gradient flows back between stages
        loss = torch.empty((), dtype=torch.float32, device=self.device)
        stages = [PipelineStage(module, s, self.num_stages, self.device, group=self.pp_group,
                                input_args=ids if s == 0 else hidden,
                                output_args=loss if s == self.num_stages - 1 else hidden)
                  for s, module in zip(self.stage_ids, self.modules)]
        self.stages = stages
        if self.schedule_name == "1f1b":
            self.schedule = Schedule1F1B(stages[0], self.micro_batches, loss_fn=self.loss, scale_grads=False)
        else:
            self.schedule = ScheduleInterleaved1F1B(stages, self.micro_batches, loss_fn=self.loss, scale_grads=False)


def apply_checkpointing(lm: CausalLM, mode: str) -> None:
    if mode == "none":
        return
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    from trainer.distributed.parallelize import _selective_context

    for key, block in list(lm.model.layers.items()):
        context = {"context_fn": _selective_context} if mode == "selective" else {}
        lm.model.layers[key] = checkpoint_wrapper(block, preserve_rng_state=True, **context)


def build_pipeline(lm: CausalLM, mesh, *, vp_size: int, schedule: Optional[str], strategy: str, precision: str,
                   activation_checkpointing: str, device: torch.device, micro_batches: int,
                   grad_reduce_dtype: str = "fp32") -> Pipeline:
    """Cut ``lm`` (built on the meta device) into this rank's stages and shard them; the first step builds the
    schedule."""
    from trainer.distributed.parallelize import PRECISION_DTYPES

    pp_mesh = mesh["pp"]
    pp_size, pp_rank = pp_mesh.size(), pp_mesh.get_local_rank()
    schedule = schedule or ("interleaved_1f1b" if vp_size > 1 else "1f1b")
    num_stages = pp_size * vp_size
    stage_ranges = stage_layers(lm.config.num_hidden_layers, pp_size, vp_size)
    stage_ids = [pp_rank + chunk * pp_size for chunk in range(vp_size)]
    init_source = getattr(lm, "init_source", None) or InitSource()
    keys = trim_to_rank(lm, stage_ranges, stage_ids)
    apply_checkpointing(lm, activation_checkpointing)
    loss_kernels = getattr(lm, "loss_kernels", "torch")
    modules = [DecoderStage(lm, stage_keys, s == 0, s == num_stages - 1, loss_kernels)
               for s, stage_keys in zip(stage_ids, keys)]
    if strategy == "fsdp2":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        param_dtype = PRECISION_DTYPES[precision]
        policy = MixedPrecisionPolicy(param_dtype=None if param_dtype == torch.float32 else param_dtype,
                                      reduce_dtype=PRECISION_DTYPES[grad_reduce_dtype])
        for block in lm.model.layers.values():
            # Kept gathered between the forward and the backward of all micro batches (torchtitan's choice for
            # pipelines: resharding would gather every block again for each micro batch).
            fully_shard(block, mesh=mesh["dp"], mp_policy=policy, reshard_after_forward=False)
        for module in modules:
            fully_shard(module, mesh=mesh["dp"], mp_policy=policy, reshard_after_forward=False)
    for module in modules:
        module.to_empty(device=device)
    fill_parameters(lm, init_source)
    if schedule == "1f1b" and vp_size != 1:
        raise ValueError("the 1f1b schedule runs one stage per rank; vp_size > 1 runs interleaved_1f1b")
    return Pipeline(model=lm, modules=modules, stage_ids=stage_ids, num_stages=num_stages, schedule_name=schedule,
                    micro_batches=micro_batches, activation_dtype=PRECISION_DTYPES[precision], device=device,
                    pp_group=pp_mesh.get_group())


class PipelineRunner:
    """One optimizer step's forward and backward through the pipeline, a validation forward, and the collectives
    that see the whole model (loss for the log, gathering full state dicts onto the first pipeline rank)."""

    def __init__(self, pipeline: Pipeline, mesh):
        self.pipeline = pipeline
        self.pp_group = mesh["pp"].get_group()
        self.dp_rank = mesh["dp"].get_local_rank()

    def step(self, input_ids: torch.Tensor, labels: torch.Tensor, *, scale: float) -> torch.Tensor:
        """Forward and backward over the micro batches stacked in ``input_ids`` / ``labels``; returns the summed
        token loss of the whole step on every pipeline rank (a fresh tensor, not yet reduced over data parallel).
        """
        p = self.pipeline
        if p.schedule is None:
            p.build_schedule(input_ids.tensor_split(p.micro_batches)[0])
        p.loss.scale = scale
        args = (input_ids,) if p.has_first else ()
        if p.has_last:
            p.modules[-1].pending_labels = list(labels.tensor_split(p.micro_batches))
        losses: list[torch.Tensor] = []
        p.schedule.step(*args, target=labels if p.has_last else None, losses=losses, return_outputs=False)
        total = torch.zeros((), dtype=torch.float64, device=input_ids.device)
        for loss in losses:  # scaled micro-batch losses, on the last stage only
            total += loss.detach().double() / scale
        dist.all_reduce(total, group=self.pp_group)
        return total

    @torch.no_grad()
    def evaluate(self, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Forward only, one stage after the other in schedule order, the loss on the last stage; returns the
        batch's summed token loss on every pipeline rank (not yet reduced over data parallel). No schedule: a
        validation batch may have another shape than the training micro batches, and needs no backward."""
        p = self.pipeline
        pp_size, pp_rank = dist.get_world_size(self.pp_group), dist.get_rank(self.pp_group)
        total = torch.zeros((), dtype=torch.float64, device=input_ids.device)
        for stage in range(p.num_stages):
            if stage % pp_size != pp_rank:
                continue
            module = p.modules[p.stage_ids.index(stage)]
            if stage == 0:
                x = input_ids
            else:
                x = torch.empty((*input_ids.shape, p.model.config.hidden_size), dtype=p.activation_dtype,
                                device=input_ids.device)
                dist.recv(x, src=self._global_rank((stage - 1) % pp_size), group=self.pp_group)
            if stage == p.num_stages - 1:
                module.pending_labels = [labels]
                total += module(x).double()
            else:
                out = module(x).to(p.activation_dtype).contiguous()
                dist.send(out, dst=self._global_rank((stage + 1) % pp_size), group=self.pp_group)
        dist.all_reduce(total, group=self.pp_group)
        return total

    def end_evaluation(self) -> None:
        """Free what the no-grad forwards left gathered (the stage modules keep their parameters after forward
        for the backward a training step runs; see parallelize.reshard_after_no_grad_forward)."""
        from trainer.distributed.parallelize import reshard_after_no_grad_forward

        for module in self.pipeline.modules:
            reshard_after_no_grad_forward(module)

    def _global_rank(self, pp_rank: int) -> int:
        return dist.get_global_rank(self.pp_group, pp_rank)

    def gather_full(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Merge every stage's full tensors onto pipeline rank 0 of data-parallel rank 0 (global rank 0); others
        get their own. Collective over the pipeline group of data-parallel rank 0."""
        if self.dp_rank != 0:
            return state
        gathered: Optional[list] = [None] * dist.get_world_size(self.pp_group) if self.is_gather_root else None
        dist.gather_object(state, gathered, group=self.pp_group, group_dst=0)
        if not self.is_gather_root:
            return state
        merged: dict[str, torch.Tensor] = {}
        for part in gathered:
            merged.update(part)
        return merged

    @property
    def is_gather_root(self) -> bool:
        return dist.get_rank(self.pp_group) == 0
