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


class _PrefixThenCausal(torch.autograd.Function):
    """softmax attention of a query chunk over a fully visible prefix of keys and then its own chunk (causal), as
    two flash-attention blocks merged by their log-sum-exp (as ring attention merges its blocks). Memory stays
    linear in the sequence: no [queries, keys] score or mask matrix. The backward runs each block's flash
    backward with the merged output and log-sum-exp, which gives exactly the gradients of the whole softmax.
    CPU kernels (aten ``_scaled_dot_product_flash_attention_for_cpu``, which takes fewer key/value heads (GQA)
    and strided key/value views of the whole sequence: nothing is copied)."""

    @staticmethod
    def forward(ctx, q, k_prefix, v_prefix, k_own, v_own):
        flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
        out_prefix, lse_prefix = flash(q, k_prefix, v_prefix, 0.0, False)
        out_own, lse_own = flash(q, k_own, v_own, 0.0, True)
        lse = torch.logaddexp(lse_prefix, lse_own)
        out = (out_prefix * torch.exp(lse_prefix - lse).unsqueeze(-1).to(out_prefix.dtype)
               + out_own * torch.exp(lse_own - lse).unsqueeze(-1).to(out_own.dtype)).contiguous()
        ctx.save_for_backward(q, k_prefix, v_prefix, k_own, v_own, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad):
        backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
        q, k_prefix, v_prefix, k_own, v_own, out, lse = ctx.saved_tensors
        grad = grad.contiguous()
        dq_prefix, dk_prefix, dv_prefix = backward(grad, q, k_prefix, v_prefix, out, lse, 0.0, False)
        dq_own, dk_own, dv_own = backward(grad, q, k_own, v_own, out, lse, 0.0, True)
        return dq_prefix + dq_own, dk_prefix, dv_prefix, dk_own, dv_own


def _blockwise_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor,
                      chunk: int) -> torch.Tensor:
    """This rank's queries (two chunks, ``positions`` ascending) over the whole sequence's keys and values in
    global order, chunk by chunk: keys before the chunk are all visible, the chunk's own are causal."""
    outputs = []
    for part in range(q.shape[2] // chunk):
        start = int(positions[part * chunk])
        q_part = q[:, :, part * chunk:(part + 1) * chunk]
        k_own, v_own = k[:, :, start:start + chunk], v[:, :, start:start + chunk]
        if start == 0:
            outputs.append(torch.nn.functional.scaled_dot_product_attention(
                q_part, k_own, v_own, is_causal=True, enable_gqa=q.shape[1] != k.shape[1]))
        else:
            outputs.append(_PrefixThenCausal.apply(q_part, k[:, :, :start], v[:, :, :start], k_own, v_own))
    return torch.cat(outputs, dim=2)


class GatherKeysValues:
    """Set as ``Attention.kv_exchange``: gathers the keys and values of the whole sequence over the CP group and
    attends this rank's queries to them. Plain causal SDPA on CPU runs blockwise (:func:`_blockwise_causal`,
    memory linear in the sequence); a sliding window, eager attention or another device runs the model's own
    attention function under the mask of the true positions (causal, and the window if any)."""

    def __init__(self, group, cp_size: int, cp_rank: int):
        self.group, self.cp_size, self.cp_rank = group, cp_size, cp_rank

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sliding_window: Optional[int],
                 attention) -> torch.Tensor:
        from trainer.models.decoder import sdpa_attention

        seq_len = k.shape[2] * self.cp_size
        k_all = _GatherSequence.apply(k, self.group, self.cp_size, self.cp_rank)
        v_all = _GatherSequence.apply(v, self.group, self.cp_size, self.cp_rank)
        q_pos = local_positions(seq_len, self.cp_size, self.cp_rank, k.device)
        k_pos = torch.cat([local_positions(seq_len, self.cp_size, r, k.device) for r in range(self.cp_size)])
        if sliding_window is None and attention is sdpa_attention and q.device.type == "cpu":
            order = torch.argsort(k_pos)  # the gathered chunks in sequence order
            k_all, v_all = k_all.index_select(2, order), v_all.index_select(2, order)
            return _blockwise_causal(q, k_all, v_all, q_pos, seq_len // (2 * self.cp_size))
        mask = k_pos[None, :] <= q_pos[:, None]
        if sliding_window is not None:
            mask &= (q_pos[:, None] - k_pos[None, :]) < sliding_window
        return attention(q, k_all, v_all, mask)


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
