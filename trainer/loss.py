"""Causal-LM cross-entropy as (sum over label tokens, number of label tokens).

The sum, not the mean: the loop divides by the label tokens of the whole global batch (summed over
gradient-accumulation micro-batches and data-parallel ranks), as NeMo AutoModel's
`num_label_tokens` does, so the loss does not depend on how the batch is split. FSDP2 and DDP
average gradients over the dp ranks, so a rank backpropagates loss_sum * dp_size / global_label_tokens
(tests/dist_scripts/parallel_equivalence.py checks this equals one process on the whole batch).

`chunked=True` never holds the [B*T, V] logits: the final hidden states are cut into chunks of
`chunk_size` tokens, each chunk's logits + cross-entropy run under activation checkpointing, so
the backward recomputes one chunk's logits at a time (the memory trick of Liger's fused linear
cross-entropy, in plain torch).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

DEFAULT_CHUNK_SIZE = 4096


def causal_lm_loss(
    model: nn.Module,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    *,
    position_ids: torch.Tensor | None = None,
    ignore_index: int = -100,
    chunked: bool = False,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> tuple[torch.Tensor, int]:
    """(summed token cross-entropy in fp32, number of tokens whose label is not `ignore_index`).

    `labels` are already aligned: labels[b, t] is the target of input_ids[b, t].
    """
    if labels.shape != input_ids.shape:
        raise ValueError(f"labels shape {tuple(labels.shape)} must equal input_ids shape {tuple(input_ids.shape)}")
    num_label_tokens = int((labels != ignore_index).sum().item())
    flat_labels = labels.reshape(-1)
    if not chunked:
        logits = model(input_ids, position_ids=position_ids)
        loss_sum = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(), flat_labels, ignore_index=ignore_index, reduction="sum"
        )
        return loss_sum, num_label_tokens

    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    lm_head = _lm_head(model)
    _refuse_tensor_parallel(lm_head)
    hidden = model(input_ids, position_ids=position_ids, return_hidden=True)
    hidden = hidden.reshape(-1, hidden.shape[-1])
    loss_sum = hidden.new_zeros((), dtype=torch.float32)
    for start in range(0, hidden.shape[0], chunk_size):
        chunk_labels = flat_labels[start : start + chunk_size]
        loss_sum = loss_sum + checkpoint(
            _chunk_cross_entropy,
            lm_head,
            hidden[start : start + chunk_size],
            chunk_labels,
            ignore_index,
            use_reentrant=False,
        )
    return loss_sum, num_label_tokens


def _chunk_cross_entropy(
    lm_head: nn.Module, hidden: torch.Tensor, labels: torch.Tensor, ignore_index: int
) -> torch.Tensor:
    logits = lm_head(hidden).float()
    return F.cross_entropy(logits, labels, ignore_index=ignore_index, reduction="sum")


def _lm_head(model: nn.Module) -> nn.Module:
    for module in model.modules():
        head = getattr(module, "lm_head", None)
        if isinstance(head, nn.Module):
            return head
    raise TypeError(f"{type(model).__name__} has no lm_head; chunked loss needs one")


def _refuse_tensor_parallel(lm_head: nn.Module) -> None:
    from torch.distributed.tensor import DTensor

    weight = lm_head.weight
    if not isinstance(weight, DTensor):
        return
    mesh = weight.device_mesh
    if any(name == "tp" and mesh.size(i) > 1 for i, name in enumerate(mesh.mesh_dim_names or ())):
        raise ValueError(
            "loss chunked=True does not run with tensor parallel (the LM head is split over the tp "
            "mesh); set chunked: false or distributed.tp_size: 1"
        )
