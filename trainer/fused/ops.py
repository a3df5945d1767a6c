"""RMSNorm, SwiGLU and RoPE as autograd functions in plain torch, with Liger's kernels on CUDA.

Each op has three implementations behind one call, picked by the model's `kernels` setting:

- "reference": the plain module math (what transformers' Llama runs), kept as the fallback;
- "torch": an `autograd.Function` in plain torch that saves fewer tensors for backward and
  recomputes the cheap parts (the memory-saving half of Liger's kernels, runs anywhere; under
  `torch.compile` inductor fuses its pointwise ops into one kernel each way);
- "liger": Liger Kernel's Triton kernels (Hsu et al. 2024, arXiv:2410.10989), CUDA only.

What each saves for backward (per token, activations in the input dtype):
- RMSNorm reference keeps the fp32 upcast of x and the bf16 normalised output; "torch" keeps x
  and the fp32 1/rms per row (Zhang & Sennrich 2019), recomputing x_hat in backward.
- SwiGLU reference keeps gate, silu(gate) and up; "torch" keeps gate and up only.
- RoPE is linear in its input, so its backward is the inverse rotation: nothing but cos/sin. The
  model rotates q and k in the projections' [B, T, heads, d] layout: SDPA then reads transposed views
  and writes its output in that layout, so the output projection's input is a view, not a copy.

Norms that tensor/sequence parallel hands DTensors (trainer/distributed/parallelize.py) are switched to the
reference math, which DTensor propagates op by op.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# ---- RMSNorm ------------------------------------------------------------------------------------


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """w * (x / sqrt(mean(x^2) + eps)), computed in fp32 and cast back (transformers' LlamaRMSNorm)."""
    input_dtype = x.dtype
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(input_dtype)


class RMSNormFunction(torch.autograd.Function):
    """Saves x and rstd = 1/rms (fp32, one per row); backward recomputes x_hat = x * rstd.

    d x = rstd * (g - x_hat * mean(g * x_hat)), g = d(x_hat) = dy * w (in fp32).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        xf = x.float()
        rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return weight * (xf * rstd).to(x.dtype)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        x, weight, rstd = ctx.saved_tensors
        x_hat = x.float() * rstd
        grad_weight = None
        if ctx.needs_input_grad[1]:
            per_element = dy * x_hat.to(x.dtype)
            grad_weight = per_element.reshape(-1, per_element.shape[-1]).sum(0).to(weight.dtype)
        g = (dy * weight).float()
        grad_x = rstd * (g - x_hat * (g * x_hat).mean(-1, keepdim=True))
        return grad_x.to(x.dtype), grad_weight, None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, kernels: str = "torch") -> torch.Tensor:
    if kernels == "reference":
        return rms_norm_reference(x, weight, eps)
    if kernels == "liger":
        from liger_kernel.transformers.functional import liger_rms_norm

        return liger_rms_norm(x, weight, eps, offset=0.0, casting_mode="llama", in_place=False)
    return RMSNormFunction.apply(x, weight, eps)


# ---- SwiGLU -------------------------------------------------------------------------------------


def silu_mul_reference(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up


class SiluMulFunction(torch.autograd.Function):
    """silu(gate) * up, saving only gate and up (Shazeer 2020). With s = sigmoid(gate):
    d up = dy * gate * s;  d gate = dy * up * s * (1 + gate * (1 - s)), computed in fp32."""

    @staticmethod
    def forward(ctx, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(gate, up)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        gate, up = ctx.saved_tensors
        g, u, d = gate.float(), up.float(), dy.float()
        sig = torch.sigmoid(g)
        silu = g * sig
        grad_up = (d * silu).to(up.dtype)
        grad_gate = (d * u * sig * (1 + g * (1 - sig))).to(gate.dtype)
        return grad_gate, grad_up


def silu_mul(gate: torch.Tensor, up: torch.Tensor, kernels: str = "torch") -> torch.Tensor:
    if kernels == "reference":
        return silu_mul_reference(gate, up)
    if kernels == "liger":
        from liger_kernel.transformers.functional import liger_swiglu

        return liger_swiglu(gate, up)
    return SiluMulFunction.apply(gate, up)


# ---- RoPE ---------------------------------------------------------------------------------------


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotary_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads_dim: int = 1) -> torch.Tensor:
    """x: [B, heads, T, head_dim] (``heads_dim`` 1) or [B, T, heads, head_dim] (2); cos/sin:
    [B, T, head_dim] (Hugging Face's half-split layout; its ``unsqueeze_dim``)."""
    cos, sin = cos.unsqueeze(heads_dim), sin.unsqueeze(heads_dim)
    return x * cos + rotate_half(x) * sin


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads_dim: int) -> torch.Tensor:
    """x * cos + rotate_half(x) * sin on the two halves: cos and sin repeat their first half
    (emb = cat(freqs, freqs)), so half of each is enough. sin = -sin gives the inverse rotation."""
    half = x.shape[-1] // 2
    c, s = cos[..., :half].unsqueeze(heads_dim), sin[..., :half].unsqueeze(heads_dim)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


class RotaryFunction(torch.autograd.Function):
    """Rotates q and k together; backward rotates the gradients by the opposite angle."""

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads_dim: int):
        ctx.save_for_backward(cos, sin)
        ctx.heads_dim = heads_dim
        return _rotate(q, cos, sin, heads_dim), _rotate(k, cos, sin, heads_dim)

    @staticmethod
    def backward(ctx, dq: torch.Tensor, dk: torch.Tensor):
        cos, sin = ctx.saved_tensors
        grad_q = _rotate(dq, cos, -sin, ctx.heads_dim) if dq is not None else None
        grad_k = _rotate(dk, cos, -sin, ctx.heads_dim) if dk is not None else None
        return grad_q, grad_k, None, None, None


def rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
           kernels: str = "torch", heads_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k rotated by position: [B, heads, T, head_dim] (``heads_dim`` 1, as Hugging Face) or
    [B, T, heads, head_dim] (2, the projections' own layout, which the model uses)."""
    if heads_dim not in (1, 2):
        raise ValueError(f"heads_dim must be 1 or 2, got {heads_dim}")
    if kernels == "reference":
        return rotary_reference(q, cos, sin, heads_dim), rotary_reference(k, cos, sin, heads_dim)
    if kernels == "liger":
        from liger_kernel.transformers.functional import liger_rope

        if heads_dim == 1:
            return liger_rope(q, k, cos, sin)
        q_rot, k_rot = liger_rope(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
        return q_rot.transpose(1, 2), k_rot.transpose(1, 2)
    return RotaryFunction.apply(q, k, cos, sin, heads_dim)
