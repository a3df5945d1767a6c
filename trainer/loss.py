"""Causal-LM cross-entropy as (sum over label tokens, number of label tokens).

The sum, not the mean: the loop divides by the label tokens of the whole global batch (summed over
gradient-accumulation micro-batches and data-parallel ranks), as NeMo AutoModel's
`num_label_tokens` does, so the loss does not depend on how the batch is split. FSDP2 and DDP
average gradients over the dp ranks, so a rank backpropagates loss_sum * dp_size / global_label_tokens
(tests/trainer/distributed/dist_scripts/parallel_equivalence.py checks this equals one process on the whole batch).

`chunked=True` never holds the [B*T, V] logits: the LM head and the cross-entropy run fused,
chunk by chunk, with the gradients computed in forward (trainer/fused/linear_cross_entropy.py;
Liger's Triton kernel when the model runs `kernels: liger`). `chunked="auto"` (the default) takes
that path unless the LM head is split over a tensor-parallel mesh, where the plain loss runs.
"""

from __future__ import annotations

from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import nn

from trainer.fused.linear_cross_entropy import linear_cross_entropy


def causal_lm_loss(
    model: nn.Module,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    *,
    position_ids: torch.Tensor | None = None,
    ignore_index: int = -100,
    chunked: Union[bool, str] = "auto",
    chunk_size: Optional[int] = None,
) -> tuple[torch.Tensor, int]:
    """(summed token cross-entropy in fp32, number of tokens whose label is not `ignore_index`).

    `labels` are already aligned: labels[b, t] is the target of input_ids[b, t]. `chunk_size`
    None picks one for the device (trainer.fused.linear_cross_entropy.default_chunk_size).
    """
    if chunked not in (True, False, "auto"):
        raise ValueError(f"chunked must be true, false or auto, got {chunked!r}")
    if labels.shape != input_ids.shape:
        raise ValueError(f"labels shape {tuple(labels.shape)} must equal input_ids shape {tuple(input_ids.shape)}")
    num_label_tokens = int((labels != ignore_index).sum().item())
    flat_labels = labels.reshape(-1)
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    lm_head = _lm_head(model, required=chunked is True) if chunked else None
    if chunked == "auto":
        chunked = lm_head is not None and not _is_tensor_parallel(lm_head) and not _has_adapter(lm_head)
    elif chunked and _has_adapter(lm_head):
        raise ValueError("loss chunked=True multiplies by lm_head.weight alone, so a LoRA adapter on lm_head would "
                         "never train; set loss_fn.chunked: auto or false, or drop lm_head from "
                         "peft.target_modules")
    if not chunked:
        logits = model(input_ids, position_ids=position_ids)
        loss_sum = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(), flat_labels, ignore_index=ignore_index, reduction="sum"
        )
        return loss_sum, num_label_tokens

    if _is_tensor_parallel(lm_head):
        raise ValueError(
            "loss chunked=True does not run with tensor parallel (the LM head is split over the tp "
            "mesh); set chunked: false or auto, or distributed.tp_size: 1"
        )
    hidden = model(input_ids, position_ids=position_ids, return_hidden=True)
    hidden = hidden.reshape(-1, hidden.shape[-1])
    loss_sum = linear_cross_entropy(hidden, lm_head.weight, flat_labels, ignore_index=ignore_index,
                                    chunk_size=chunk_size, kernels=_kernels(model))
    return loss_sum, num_label_tokens


def _has_adapter(head: Optional[nn.Module]) -> bool:
    """A LoRA-wrapped head: its `weight` is the frozen base, the update lives in its own modules."""
    return head is not None and hasattr(head, "lora_A")


def _lm_head(model: nn.Module, required: bool = True) -> Optional[nn.Module]:
    for module in model.modules():
        head = getattr(module, "lm_head", None)
        if isinstance(head, nn.Module):
            return head
    if not required:
        return None
    raise TypeError(f"{type(model).__name__} has no lm_head; chunked loss needs one")


def _kernels(model: nn.Module) -> str:
    """The loss's implementation: the model's `loss_kernels` (set by the recipe from `model.kernels`),
    else its config's kernels ("liger" routes the loss to Liger's kernel too)."""
    for module in model.modules():
        chosen = getattr(module, "loss_kernels", None)
        if chosen is not None:
            return chosen
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "kernels"):
            return "liger" if config.kernels == "liger" else "torch"
    return "torch"


def _is_tensor_parallel(lm_head: nn.Module) -> bool:
    from torch.distributed.tensor import DTensor

    weight = lm_head.weight
    if not isinstance(weight, DTensor):
        return False
    mesh = weight.device_mesh
    return any(name == "tp" and mesh.size(i) > 1 for i, name in enumerate(mesh.mesh_dim_names or ()))
