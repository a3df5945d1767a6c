"""The causal-LM loss: a token sum with its count, and the chunked path equal to the plain one."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from trainer.loss import causal_lm_loss
from trainer.models import CausalLM, init_weights
from trainer.models.presets import tiny_config


def model_and_batch(family: str = "llama3"):
    model = CausalLM(tiny_config(family))
    init_weights(model, seed=11)
    gen = torch.Generator().manual_seed(12)
    ids = torch.randint(0, 256, (3, 10), generator=gen)
    labels = torch.roll(ids, -1, dims=1)
    labels[:, -1] = -100
    labels[0, :4] = -100  # a masked prompt
    return model, ids, labels


def test_plain_loss_is_sum_over_label_tokens() -> None:
    model, ids, labels = model_and_batch()
    loss_sum, count = causal_lm_loss(model, ids, labels)
    assert count == int((labels != -100).sum()) == 3 * 9 - 4
    expected = F.cross_entropy(model(ids).reshape(-1, 256), labels.reshape(-1), reduction="mean")
    torch.testing.assert_close(loss_sum / count, expected)


@pytest.mark.parametrize("family", ["llama3", "qwen3_tied"])
@pytest.mark.parametrize("chunk_size", [1, 7, 30, 1000])
def test_chunked_loss_and_grads_equal_plain(family: str, chunk_size: int) -> None:
    model, ids, labels = model_and_batch(family)
    plain_sum, plain_count = causal_lm_loss(model, ids, labels, chunked=False)
    plain_sum.backward()
    plain_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    chunk_sum, chunk_count = causal_lm_loss(model, ids, labels, chunked=True, chunk_size=chunk_size)
    chunk_sum.backward()
    assert chunk_count == plain_count
    # The fused path computes softmax - one_hot itself and sums d W over chunks: fp32 rounding apart.
    torch.testing.assert_close(chunk_sum, plain_sum, atol=5e-5, rtol=1e-6)
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, plain_grads[name], atol=1e-5, rtol=1e-5, msg=name)


def test_chunked_loss_never_holds_full_logits() -> None:
    """Saved activations for backward stay below one [tokens, vocab] logits tensor."""
    model = CausalLM(tiny_config("llama", vocab_size=2048))
    init_weights(model, seed=1)
    ids = torch.randint(0, 2048, (2, 64))
    labels = torch.roll(ids, -1, dims=1)
    full_logits_bytes = ids.numel() * 2048 * 4

    def saved_bytes(chunked: bool) -> int:
        sizes: list[int] = []

        def pack(t: torch.Tensor):
            sizes.append(t.numel() * t.element_size() if t.dim() > 1 and t.shape[-1] == 2048 else 0)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            causal_lm_loss(model, ids, labels, chunked=chunked, chunk_size=16)[0].backward()
        return max(sizes)

    assert saved_bytes(chunked=False) >= full_logits_bytes
    assert saved_bytes(chunked=True) <= full_logits_bytes // 8


def test_bad_arguments_are_explained() -> None:
    model, ids, labels = model_and_batch()
    with pytest.raises(ValueError, match="labels shape"):
        causal_lm_loss(model, ids, labels[:, :-1])
    with pytest.raises(ValueError, match="chunk_size"):
        causal_lm_loss(model, ids, labels, chunked=True, chunk_size=0)
