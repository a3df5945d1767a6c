"""LM head + cross-entropy without the [tokens, vocab] logits: chunked, gradients computed in forward.

The plain path materialises logits [N, V], their fp32 log-softmax and its gradient (three
[N, V] tensors; at N = 4096, V = 128k that is 6 GiB). Here the hidden states are cut into
chunks of `chunk_size` rows; for each chunk the forward computes the logits, the loss and at once
the gradients (softmax - one_hot), so nothing of size V is kept: d hidden = G W and
d W += G^T h (G the chunk's logits gradient). Backward only scales the stored gradients by the
incoming grad. Three GEMMs per chunk, as the plain path, instead of the four of a recompute-in-
backward scheme. This is the algorithm of Liger's fused linear cross-entropy (Hsu et al. 2024,
arXiv:2410.10989, section 3.4) in plain torch; on CUDA with `liger-kernel` installed its Triton
version runs instead.

Saved for backward: d hidden [N, H] in the hidden dtype and d W [V, H] accumulated in fp32 (a
bf16 accumulator would round once per chunk).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

# The CPU default keeps one chunk's fp32 logits near 32 MiB (L3-sized; measured in benchmarks/README.md:
# 128 to 1024 rows at vocab 32000 run alike, 64 rows starve the GEMMs).
_CPU_CHUNK_LOGITS = 2**23
_MIN_CHUNK, _MAX_CHUNK = 16, 8192
# On a GPU fewer rows than this leave the GEMMs short of the tensor cores' tiles and waves.
_MIN_GPU_CHUNK = 1024


def default_chunk_size(num_tokens: int, vocab_size: int, hidden_size: int, device_type: str) -> int:
    """Rows per chunk. CPU: logits chunk ~32 MiB (cache-resident). GPU: as Liger, logits chunk about
    the size of the hidden states (N x H elements), so the loss adds about that much memory, and at
    least 1024 rows."""
    if device_type == "cpu":
        rows = _CPU_CHUNK_LOGITS // max(vocab_size, 1)
    else:
        rows = max(num_tokens * hidden_size // max(vocab_size, 1), _MIN_GPU_CHUNK)
    rows = 1 << max(int(rows).bit_length() - 1, 0)  # a power of two at or below
    return max(_MIN_CHUNK, min(_MAX_CHUNK, rows))


def _compute_dtype(hidden: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    device_type = hidden.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return torch.promote_types(hidden.dtype, weight.dtype)


def _chunk_loss_and_grad(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int, with_grad: bool,
                         any_ignored: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed cross-entropy, d loss / d logits) of one chunk; `logits` is fp32 and is overwritten."""
    valid = labels != ignore_index
    target = labels.masked_fill(~valid, 0).unsqueeze(1)
    target_logit = logits.gather(1, target).squeeze(1)
    row_max = logits.amax(dim=-1, keepdim=True)
    logits.sub_(row_max).exp_()
    sum_exp = logits.sum(dim=-1, keepdim=True)
    lse = (row_max + sum_exp.log()).squeeze(1)
    loss = ((lse - target_logit) * valid).sum()
    if not with_grad:
        return loss, logits
    logits.div_(sum_exp)  # softmax
    logits.scatter_add_(1, target, -valid.unsqueeze(1).to(logits.dtype))
    if any_ignored:
        logits.mul_(valid.unsqueeze(1))
    return loss, logits


class LinearCrossEntropyFunction(torch.autograd.Function):
    """sum over rows of CE(hidden @ weight^T, labels), gradients computed chunk by chunk in forward."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, ignore_index: int,
                chunk_size: int) -> torch.Tensor:
        need_hidden, need_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dtype = _compute_dtype(hidden, weight)
        device_type = hidden.device.type
        w = weight.to(dtype)
        grad_hidden = torch.empty_like(hidden) if need_hidden else None
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_weight else None
        loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
        any_ignored = bool((labels == ignore_index).any())  # one host sync, not one per chunk
        with torch.autocast(device_type, enabled=False):
            for start in range(0, hidden.shape[0], chunk_size):
                h = hidden[start:start + chunk_size].to(dtype)
                logits = (h @ w.t()).float()
                chunk_loss, grad_logits = _chunk_loss_and_grad(logits, labels[start:start + chunk_size],
                                                               ignore_index, True, any_ignored)
                loss += chunk_loss
                g = grad_logits.to(dtype)
                if grad_hidden is not None:
                    rows = grad_hidden[start:start + chunk_size]
                    if rows.dtype == dtype:
                        torch.mm(g, w, out=rows)
                    else:
                        rows.copy_(g @ w)
                if grad_weight is not None:
                    if dtype == torch.float32:
                        grad_weight.addmm_(g.t(), h)
                    else:
                        grad_weight += (g.t() @ h).float()
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.weight_dtype = weight.dtype
        return loss

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        grad_hidden, grad_weight = ctx.saved_tensors
        if grad_hidden is not None:
            grad_hidden = grad_hidden * grad_loss.to(grad_hidden.dtype)
        if grad_weight is not None:
            grad_weight = (grad_weight * grad_loss).to(ctx.weight_dtype)
        return grad_hidden, grad_weight, None, None, None


@torch.no_grad()
def _loss_only(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, ignore_index: int,
               chunk_size: int) -> torch.Tensor:
    loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
    for start in range(0, hidden.shape[0], chunk_size):
        logits = F.linear(hidden[start:start + chunk_size], weight).float()
        loss += _chunk_loss_and_grad(logits, labels[start:start + chunk_size], ignore_index, with_grad=False)[0]
    return loss


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, *,
                         ignore_index: int = -100, chunk_size: Optional[int] = None,
                         kernels: str = "torch") -> torch.Tensor:
    """Summed token cross-entropy of `hidden @ weight.T` (fp32 scalar), never holding [N, V].

    hidden [N, H], weight [V, H], labels [N]. `kernels="liger"` runs Liger's Triton kernel (CUDA).
    """
    if hidden.dim() != 2 or labels.shape != hidden.shape[:1]:
        raise ValueError(f"hidden must be [N, H] and labels [N]; got {tuple(hidden.shape)} and {tuple(labels.shape)}")
    if chunk_size is None:
        chunk_size = default_chunk_size(hidden.shape[0], weight.shape[0], weight.shape[1], hidden.device.type)
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if kernels == "liger":
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

        return liger_fused_linear_cross_entropy(hidden, weight, labels, ignore_index=ignore_index, reduction="sum",
                                                accum_dtype=torch.float32).float()
    if not torch.is_grad_enabled() or not (hidden.requires_grad or weight.requires_grad):
        return _loss_only(hidden, weight, labels, ignore_index, chunk_size)
    return LinearCrossEntropyFunction.apply(hidden, weight, labels, ignore_index, chunk_size)
