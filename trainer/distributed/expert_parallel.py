"""Expert parallel: the experts of each MoE layer split over an ``ep`` mesh dimension, tokens moved to
them and back with ``all_to_all_single`` (uneven splits, autograd; NCCL and gloo alike).

The mesh (built in one place, `trainer.distributed.parallelize.build_mesh`) is, as torchtitan's and
NeMo AutoModel's, ``(edp, ep, tp)`` with ``dp = edp x ep`` flattened from it: EP is carved out of data
parallel, so each EP rank reads its own data. Non-expert parameters are sharded by FSDP2 over ``dp``;
expert parameters are DTensors ``Shard(0)`` over ``ep`` (whole experts per rank) and sharded by FSDP2
over ``edp`` (what is left of DP after EP). Experts see the tokens of all ``ep`` ranks, so their
gradients are sums over ``dp`` ranks like the others', but FSDP2 averages them over ``edp`` only: they
are scaled by 1/ep in backward (torchtitan sets FSDP2's gradient divide factor instead, a PREMUL_SUM
reduction that gloo lacks).

Expert tensor parallel (``etp_size`` > 1) is refused (trainer/contract/expert_checks.py); so are tensor parallel
with an MoE model, EP with DDP, and EP with selective activation checkpointing.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from trainer.models.moe import MoE, moe_layers


def all_to_all(x: torch.Tensor, output_splits: list[int], input_splits: list[int], group) -> torch.Tensor:
    """Rows of `x` in `input_splits` chunks to each rank; receives `output_splits` rows from each (autograd)."""
    from torch.distributed._functional_collectives import all_to_all_single_autograd, wait_tensor

    return wait_tensor(all_to_all_single_autograd(x.contiguous(), output_splits, input_splits, group))


class AllToAllDispatcher:
    """Sorted tokens -> the ranks holding their experts -> grouped experts -> back, in the same order."""

    def __init__(self, group, ep_size: int, num_local_experts: int):
        self.group, self.ep_size, self.num_local_experts = group, ep_size, num_local_experts

    def __call__(self, experts: nn.Module, x_sorted: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        ep, local = self.ep_size, self.num_local_experts
        send_counts = counts.view(ep, local)  # rows for (destination rank, its local expert)
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts, group=self.group)  # (source rank, my local expert)
        send_splits, recv_splits = send_counts.sum(1).tolist(), recv_counts.sum(1).tolist()
        received = all_to_all(x_sorted, recv_splits, send_splits, self.group)
        # Received rows come grouped by (source rank, expert); the grouped GEMM wants (expert, source rank).
        segment = torch.repeat_interleave(torch.arange(ep * local, device=counts.device), recv_counts.reshape(-1))
        order = torch.argsort((segment % local) * ep + segment // local, stable=True)
        computed = experts(received[order], recv_counts.sum(0))
        # scatter keeps only the index for backward; index_copy would also keep `computed`.
        back = torch.empty_like(computed).scatter(0, order.unsqueeze(1).expand_as(computed), computed)
        return all_to_all(back, send_splits, recv_splits, self.group)


def apply_expert_parallel(model: nn.Module, ep_mesh) -> None:
    """Shard each MoE layer's experts Shard(0) over `ep_mesh` (meta or materialised) and route over it."""
    from torch.distributed.tensor import Shard, distribute_tensor

    ep = ep_mesh.size()
    for layer in moe_layers(model):
        experts = layer.experts
        for name, param in list(experts.named_parameters(recurse=False)):
            sharded = distribute_tensor(param.data, ep_mesh, [Shard(0)], src_data_rank=None)
            experts.register_parameter(name, nn.Parameter(sharded, requires_grad=param.requires_grad))
        layer.dispatcher = AllToAllDispatcher(ep_mesh.get_group(), ep, layer.num_experts // ep)


def shard_experts(model: nn.Module, edp_mesh, mp_policy, ep_size: int) -> None:
    """FSDP2 over the expert-data-parallel mesh for each layer's experts, gradients divided by the DP size
    (FSDP2's mean over edp, times 1/ep). Called before the blocks are sharded, so the blocks' FSDP leaves
    the experts to this one."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Shard

    for layer in moe_layers(model):
        local_experts = layer.experts.num_local_experts
        # Fewer local experts than edp ranks: shard inside each expert (dim 1) instead of over experts.
        dim = 0 if local_experts >= edp_mesh.size() else 1
        fully_shard(layer.experts, mesh=edp_mesh, mp_policy=mp_policy, shard_placement_fn=lambda _p, d=dim: Shard(d))
        layer.experts.grad_scale = 1.0 / ep_size


def configure_aux_loss(model: nn.Module, dp_group, dp_size: int, micro_batches: int) -> None:
    """The DP group the load-balancing loss sums over, and its gradient scale: x dp_size undoes FSDP's mean,
    / micro_batches makes a step's loss the mean over its gradient-accumulation micro-batches."""
    for layer in moe_layers(model):
        layer.aux_group = dp_group
        layer.aux_grad_scale = dp_size / micro_batches


__all__ = ["MoE", "AllToAllDispatcher", "apply_expert_parallel", "configure_aux_loss", "shard_experts"]
