"""Each fused path against its plain-torch fallback on CPU: outputs and gradients.

RMSNorm, SwiGLU and RoPE ("torch" autograd functions vs the "reference" math), the fused linear
+ cross-entropy vs F.cross_entropy over full logits, a whole model with fused kernels vs the
reference one, and what the fused functions save for backward (the point of them).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from trainer.fused.linear_cross_entropy import default_chunk_size, linear_cross_entropy
from trainer.fused.ops import rms_norm, rotary, silu_mul
from trainer.loss import causal_lm_loss
from trainer.models import CausalLM, init_weights
from trainer.models.presets import tiny_config
from trainer.models.rope import RotaryEmbedding

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}


def _grads(fn, *tensors):
    """(output, grads of sum(output * fixed random weights) w.r.t. each tensor)."""
    tensors = [t.detach().clone().requires_grad_() for t in tensors]
    out = fn(*tensors)
    outs = out if isinstance(out, tuple) else (out,)
    gen = torch.Generator().manual_seed(5)
    total = sum((o.float() * torch.randn(o.shape, generator=gen)).sum() for o in outs)
    total.backward()
    return [o.detach() for o in outs], [t.grad for t in tensors]


def _assert_same(fused, reference, dtype):
    (out_f, grad_f), (out_r, grad_r) = fused, reference
    for a, b in zip(out_f, out_r):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a.float(), b.float(), **TOL[dtype])
    for a, b in zip(grad_f, grad_r):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a.float(), b.float(), **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_matches_reference(dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(3, 7, 64, generator=gen) * 3).to(dtype)
    w = (1 + 0.1 * torch.randn(64, generator=gen)).to(dtype)
    fused = _grads(lambda a, b: rms_norm(a, b, 1e-6, "torch"), x, w)
    reference = _grads(lambda a, b: rms_norm(a, b, 1e-6, "reference"), x, w)
    _assert_same(fused, reference, dtype)


def test_rms_norm_keeps_reference_dtype_promotion() -> None:
    """An fp32 weight over a bf16 input gives fp32 out (autocast runs), as transformers' RMSNorm."""
    x, w = torch.randn(2, 5, 16).bfloat16(), torch.ones(16)
    assert rms_norm(x, w, 1e-6, "torch").dtype == rms_norm(x, w, 1e-6, "reference").dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_silu_mul_matches_reference(dtype) -> None:
    gen = torch.Generator().manual_seed(1)
    gate, up = (torch.randn(4, 9, 48, generator=gen) * 4).to(dtype), torch.randn(4, 9, 48, generator=gen).to(dtype)
    _assert_same(_grads(lambda a, b: silu_mul(a, b, "torch"), gate, up),
                 _grads(lambda a, b: silu_mul(a, b, "reference"), gate, up), dtype)


@pytest.mark.parametrize("family", ["llama", "llama3"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_matches_reference(family: str, dtype) -> None:
    config = tiny_config(family, head_dim=16)
    position_ids = torch.arange(11).unsqueeze(0)
    cos, sin = RotaryEmbedding(config)(position_ids, dtype=dtype)
    gen = torch.Generator().manual_seed(2)
    q, k = torch.randn(2, 4, 11, 16, generator=gen).to(dtype), torch.randn(2, 2, 11, 16, generator=gen).to(dtype)
    _assert_same(_grads(lambda a, b: rotary(a, b, cos, sin, "torch"), q, k),
                 _grads(lambda a, b: rotary(a, b, cos, sin, "reference"), q, k), dtype)


@pytest.mark.parametrize("kernels", ["torch", "reference"])
def test_rotary_in_the_projection_layout_equals_the_heads_first_layout(kernels: str) -> None:
    """heads_dim=2 rotates [B, T, heads, d] (the model's layout) exactly as heads_dim=1 rotates the
    transposed tensor; the rotated q then gives an SDPA output whose o_proj input is a view."""
    config = tiny_config("llama3", head_dim=16)
    cos, sin = RotaryEmbedding(config)(torch.arange(11).unsqueeze(0), dtype=torch.float32)
    gen = torch.Generator().manual_seed(3)
    q, k = torch.randn(2, 11, 4, 16, generator=gen), torch.randn(2, 11, 2, 16, generator=gen)
    heads_first = _grads(lambda a, b: tuple(t.transpose(1, 2) for t in rotary(a.transpose(1, 2), b.transpose(1, 2),
                                                                                cos, sin, kernels)), q, k)
    _assert_same(_grads(lambda a, b: rotary(a, b, cos, sin, kernels, heads_dim=2), q, k), heads_first, torch.float32)
    q_rot, k_rot = rotary(q, k, cos, sin, kernels, heads_dim=2)
    out = torch.nn.functional.scaled_dot_product_attention(q_rot.transpose(1, 2), k_rot.transpose(1, 2),
                                                           k_rot.transpose(1, 2), is_causal=True, enable_gqa=True)
    assert out.transpose(1, 2).is_contiguous()
    with pytest.raises(ValueError, match="heads_dim"):
        rotary(q, k, cos, sin, kernels, heads_dim=3)


def _saved_bytes(fn, *tensors) -> int:
    """Bytes of the distinct storages autograd saves for backward while `fn` runs."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor):
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    leaves = [t.detach().clone().requires_grad_() for t in tensors]
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*leaves)
    leaf_ptrs = {t.untyped_storage().data_ptr() for t in leaves}
    return sum(n for ptr, n in seen.items() if ptr not in leaf_ptrs)


def test_fused_functions_save_less_for_backward() -> None:
    x, w = torch.randn(4, 64, 128).bfloat16(), torch.ones(128).bfloat16()
    # reference keeps the fp32 upcast (4 B) and the normalised bf16 output (2 B) per element; fused keeps
    # x itself (a leaf here, so not counted) and one fp32 rstd per row.
    assert _saved_bytes(lambda a, b: rms_norm(a, b, 1e-6, "reference"), x, w) >= 6 * x.numel()
    assert _saved_bytes(lambda a, b: rms_norm(a, b, 1e-6, "torch"), x, w) <= 4 * 4 * 64
    gate, up = torch.randn(4, 64, 128), torch.randn(4, 64, 128)
    # reference also keeps silu(gate); fused keeps only its inputs (leaves here)
    assert _saved_bytes(lambda a, b: silu_mul(a, b, "reference"), gate, up) >= 4 * gate.numel()
    assert _saved_bytes(lambda a, b: silu_mul(a, b, "torch"), gate, up) == 0


# ---- fused linear + cross-entropy --------------------------------------------------------------


def _ce_case(dtype=torch.float32, ignore: bool = True):
    gen = torch.Generator().manual_seed(3)
    hidden = torch.randn(37, 24, generator=gen).to(dtype)
    weight = (torch.randn(301, 24, generator=gen) * 0.2).to(dtype)
    labels = torch.randint(0, 301, (37,), generator=gen)
    if ignore:
        labels[::5] = -100
    return hidden, weight, labels


def _plain_ce(hidden, weight, labels):
    return F.cross_entropy((hidden @ weight.t()).float(), labels, ignore_index=-100, reduction="sum")


@pytest.mark.parametrize("chunk_size", [1, 8, 37, 1000])
@pytest.mark.parametrize("ignore", [True, False])
def test_linear_cross_entropy_matches_plain(chunk_size: int, ignore: bool) -> None:
    hidden, weight, labels = _ce_case(ignore=ignore)
    fused = _grads(lambda h, w: linear_cross_entropy(h, w, labels, chunk_size=chunk_size), hidden, weight)
    plain = _grads(lambda h, w: _plain_ce(h, w, labels), hidden, weight)
    _assert_same(fused, plain, torch.float32)


def test_linear_cross_entropy_scales_by_incoming_gradient() -> None:
    hidden, weight, labels = _ce_case()
    h1, h2 = hidden.clone().requires_grad_(), hidden.clone().requires_grad_()
    (linear_cross_entropy(h1, weight, labels, chunk_size=8) * -2.5).backward()
    (_plain_ce(h2, weight, labels) * -2.5).backward()
    torch.testing.assert_close(h1.grad, h2.grad, atol=1e-5, rtol=1e-5)


def test_linear_cross_entropy_bf16_and_autocast() -> None:
    hidden, weight, labels = _ce_case(torch.bfloat16)
    fused = _grads(lambda h, w: linear_cross_entropy(h, w, labels, chunk_size=8), hidden, weight)
    plain = _grads(lambda h, w: _plain_ce(h, w, labels), hidden, weight)
    _assert_same(fused, plain, torch.bfloat16)
    # fp32 parameters under bf16 autocast: the GEMMs run in bf16 like autocast's F.linear would
    hidden32, weight32, _ = _ce_case()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fused = _grads(lambda h, w: linear_cross_entropy(h, w, labels, chunk_size=8), hidden32, weight32)
        plain = _grads(lambda h, w: F.cross_entropy(F.linear(h, w).float(), labels, reduction="sum"),
                       hidden32, weight32)
    _assert_same(fused, plain, torch.bfloat16)


def test_linear_cross_entropy_without_grad_and_frozen_weight() -> None:
    hidden, weight, labels = _ce_case()
    with torch.no_grad():
        torch.testing.assert_close(linear_cross_entropy(hidden, weight, labels, chunk_size=4),
                                   _plain_ce(hidden, weight, labels), atol=1e-5, rtol=1e-5)
    h = hidden.clone().requires_grad_()
    linear_cross_entropy(h, weight, labels, chunk_size=4).backward()  # frozen head (LoRA): only d hidden
    h_ref = hidden.clone().requires_grad_()
    _plain_ce(h_ref, weight, labels).backward()
    torch.testing.assert_close(h.grad, h_ref.grad, atol=1e-5, rtol=1e-5)
    assert weight.grad is None


def test_linear_cross_entropy_rejects_bad_shapes() -> None:
    hidden, weight, labels = _ce_case()
    with pytest.raises(ValueError, match="hidden must be"):
        linear_cross_entropy(hidden.unsqueeze(0), weight, labels)
    with pytest.raises(ValueError, match="chunk_size"):
        linear_cross_entropy(hidden, weight, labels, chunk_size=0)


def test_default_chunk_size() -> None:
    assert default_chunk_size(4096, 32000, 256, "cpu") == 256  # 8M logits / 32000 -> 262 -> 256
    assert default_chunk_size(4096, 512, 64, "cpu") == 8192  # capped
    assert default_chunk_size(16384, 128256, 2048, "cuda") == 1024  # 261 rows would starve the GEMMs
    assert default_chunk_size(131072, 32000, 4096, "cuda") == 8192  # N x H / V = 16777 -> capped


# ---- whole model -------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["llama3", "qwen3_tied", "mistral"])
def test_model_with_fused_paths_matches_reference(family: str) -> None:
    """kernels=torch + fused loss against kernels=reference + full-logits loss: same loss, same grads."""
    models = {}
    for kernels in ("torch", "reference"):
        model = CausalLM(tiny_config(family, kernels=kernels))
        init_weights(model, seed=3)
        models[kernels] = model
    ids = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(4))
    labels = torch.roll(ids, -1, 1)
    labels[:, -1] = -100
    fused_sum, _ = causal_lm_loss(models["torch"], ids, labels, chunked=True, chunk_size=5)
    plain_sum, _ = causal_lm_loss(models["reference"], ids, labels, chunked=False)
    fused_sum.backward()
    plain_sum.backward()
    torch.testing.assert_close(fused_sum, plain_sum, atol=5e-5, rtol=1e-6)
    reference = dict(models["reference"].named_parameters())
    for name, param in models["torch"].named_parameters():
        torch.testing.assert_close(param.grad, reference[name].grad, atol=1e-5, rtol=1e-4, msg=name)


def test_auto_loss_chunks_on_a_plain_model() -> None:
    model = CausalLM(tiny_config("llama"))
    init_weights(model, seed=0)
    ids = torch.randint(0, 256, (2, 8))
    saved: list[tuple] = []

    def pack(t):
        saved.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        causal_lm_loss(model, ids, ids)  # chunked="auto"
    assert not any(len(s) >= 2 and s[-1] == 256 for s in saved), "auto kept a [*, vocab] logits tensor"
    with pytest.raises(ValueError, match="chunked must be"):
        causal_lm_loss(model, ids, ids, chunked="yes")
