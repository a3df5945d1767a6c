"""Context parallel: each sequence split over the ranks of a ``cp`` mesh dimension.

Load balance (as Megatron-LM and torchtitan do for causal attention): the sequence is cut into
2 x CP equal chunks and rank r holds chunks r and 2*CP-1-r, so every rank holds one early chunk
(few keys to attend to) and one late chunk (many), and the causal work is even. Input ids, labels
and RoPE positions are cut with the same indices, so each token keeps its own position and label,
and the loss of a rank is the sum over its tokens (trainer/loss.py): summed over the CP group it is
the loss of the whole sequence.

Attention across chunks: the keys and values of the whole sequence are all-gathered over the CP
group after RoPE (the approach of the Llama 3 paper, "The Llama 3 Herd of Models", 3.3.2), and each
rank attends its own queries to them under a causal mask built from the true positions. The
gather is differentiable: its backward sums the key/value gradients of every rank and keeps this
rank's slice. Memory: activations of the decoder blocks shrink by CP; only the gathered K and V of
the attention being computed (2 x the KV heads, not the query heads) are full length.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist


def chunk_order(cp_size: int, cp_rank: int) -> tuple[int, int]:
    """The two chunks (of 2 x cp_size) rank ``cp_rank`` holds: r and 2*CP-1-r."""
    return cp_rank, 2 * cp_size - 1 - cp_rank


def local_positions(seq_len: int, cp_size: int, cp_rank: int, device: Optional[torch.device] = None) -> torch.Tensor:
    """The global positions (ascending) of the tokens rank ``cp_rank`` holds, [seq_len / cp_size]."""
    if seq_len % (2 * cp_size):
        raise ValueError(f"context parallel cuts a sequence into 2 x cp_size = {2 * cp_size} equal chunks: sequence "
                         f"length {seq_len} is not a multiple of it (set dataset.seq_length to a multiple)")
    chunk = seq_len // (2 * cp_size)
    first, second = chunk_order(cp_size, cp_rank)
    return torch.cat([torch.arange(first * chunk, (first + 1) * chunk, device=device),
                      torch.arange(second * chunk, (second + 1) * chunk, device=device)])


class _GatherSequence(torch.autograd.Function):
    """All-gather along dim 2 ([B, heads, t, d] -> [B, heads, CP * t, d], rank order) with a backward
    that sums the gradient over the group and keeps this rank's slice (all-reduce: runs on gloo)."""

    @staticmethod
    def forward(ctx, local: torch.Tensor, group, cp_size: int, cp_rank: int) -> torch.Tensor:
        ctx.group, ctx.cp_rank, ctx.length = group, cp_rank, local.shape[2]
        parts = [torch.empty_like(local) for _ in range(cp_size)]
        dist.all_gather(parts, local.contiguous(), group=group)
        return torch.cat(parts, dim=2)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.contiguous()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)
        start = ctx.cp_rank * ctx.length
        return grad.narrow(2, start, ctx.length).contiguous(), None, None, None


class GatherKeysValues:
    """Set as ``Attention.kv_exchange``: gives the keys and values of the whole sequence and the mask
    of this rank's queries over them (causal on the true positions, and the sliding window if any)."""

    def __init__(self, group, cp_size: int, cp_rank: int):
        self.group, self.cp_size, self.cp_rank = group, cp_size, cp_rank

    def __call__(self, k: torch.Tensor, v: torch.Tensor, sliding_window: Optional[int]):
        local_len = k.shape[2]
        seq_len = local_len * self.cp_size
        k_all = _GatherSequence.apply(k, self.group, self.cp_size, self.cp_rank)
        v_all = _GatherSequence.apply(v, self.group, self.cp_size, self.cp_rank)
        q_pos = local_positions(seq_len, self.cp_size, self.cp_rank, k.device)
        k_pos = torch.cat([local_positions(seq_len, self.cp_size, r, k.device) for r in range(self.cp_size)])
        mask = k_pos[None, :] <= q_pos[:, None]
        if sliding_window is not None:
            mask &= (q_pos[:, None] - k_pos[None, :]) < sliding_window
        return k_all, v_all, mask


def apply_context_parallel(model: torch.nn.Module, cp_mesh) -> None:
    """Make every attention layer of ``model`` gather keys and values over ``cp_mesh`` (1-D)."""
    from trainer.models.decoder import Attention

    exchange = GatherKeysValues(cp_mesh.get_group(), cp_mesh.size(), cp_mesh.get_local_rank())
    for module in model.modules():
        if isinstance(module, Attention):
            module.kv_exchange = exchange


class SequenceSharder:
    """What the training loop needs of CP: cut a batch into this rank's tokens and their positions."""

    def __init__(self, cp_size: int, cp_rank: int):
        self.cp_size, self.cp_rank = cp_size, cp_rank

    def __call__(self, input_ids: torch.Tensor, labels: torch.Tensor):
        """(input ids, labels, position ids [1, t]) of this rank."""
        positions = local_positions(input_ids.shape[1], self.cp_size, self.cp_rank, input_ids.device)
        return (input_ids.index_select(1, positions), labels.index_select(1, positions), positions.unsqueeze(0))
