"""Single-process checks of parallelize.py: activation checkpointing, compile, layout errors."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from trainer.distributed.parallelize import (
    ParallelConfigError,
    autocast_context,
    build_mesh,
    check_tensor_parallel,
    full_state_dict,
    load_full_state_dict,
    parallelize_model,
)
from trainer.loss import causal_lm_loss
from trainer.models import CausalLM, init_weights
from trainer.models.builder import named_parameters_hf
from trainer.models.presets import tiny_config


def grads_after_step(family: str, **parallel_kwargs) -> tuple[float, dict[str, torch.Tensor]]:
    model = CausalLM(tiny_config(family, num_hidden_layers=3))
    init_weights(model, seed=21)
    model = parallelize_model(model, None, **parallel_kwargs)
    gen = torch.Generator().manual_seed(22)
    ids = torch.randint(0, 256, (2, 12), generator=gen)
    labels = torch.roll(ids, -1, dims=1)
    loss_sum, count = causal_lm_loss(model, ids, labels)
    (loss_sum / count).backward()
    return loss_sum.item(), {name: p.grad.clone() for name, p in named_parameters_hf(model)}


@pytest.mark.parametrize("family", ["llama3", "qwen3_tied"])
@pytest.mark.parametrize("mode", ["selective", "full"])
def test_activation_checkpointing_keeps_loss_and_grads(family: str, mode: str) -> None:
    ref_loss, ref_grads = grads_after_step(family)
    loss, grads = grads_after_step(family, activation_checkpointing=mode)
    assert loss == pytest.approx(ref_loss, abs=1e-6)
    assert grads.keys() == ref_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, ref_grads[name], atol=1e-6, rtol=1e-5, msg=name)


def test_activation_checkpointing_wraps_every_block_and_saves_memory() -> None:
    model = parallelize_model(CausalLM(tiny_config("llama", num_hidden_layers=3)), None,
                              activation_checkpointing="full")
    assert all(type(block).__name__ == "CheckpointWrapper" for block in model.layers)
    # Names keep the Hugging Face form once wrapper prefixes are dropped.
    assert "model.layers.0.self_attn.q_proj.weight" in full_state_dict(model)



def backward_op_counts(mode: str) -> Counter:
    """How often each aten op runs during backward: recomputation shows up as forward ops there."""
    model = CausalLM(tiny_config("llama", num_hidden_layers=2))
    init_weights(model, seed=1)
    model = parallelize_model(model, None, activation_checkpointing=mode)
    loss = model(torch.randint(0, 256, (2, 8)), return_hidden=True).sum()
    counts: Counter = Counter()

    class CountOps(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            counts[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    with CountOps():
        loss.backward()
    return counts


def test_selective_recomputes_pointwise_ops_but_not_matmuls() -> None:
    none, selective, full = (backward_op_counts(m) for m in ("none", "selective", "full"))
    # Full recomputes each block's forward, matmuls included; selective reuses the saved matmuls.
    assert full["mm"] > selective["mm"] == none["mm"]
    # SwiGLU's silu and the norms' rsqrt run again under both kinds of checkpointing, never without.
    for op in ("silu", "rsqrt"):
        assert none[op] == 0 and selective[op] > 0 and full[op] > 0


def test_compile_per_block_keeps_grads() -> None:
    ref_loss, ref_grads = grads_after_step("qwen2")
    loss, grads = grads_after_step("qwen2", compile=True, compile_backend="aot_eager", activation_checkpointing="full")
    assert loss == pytest.approx(ref_loss, abs=1e-5)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, ref_grads[name], atol=1e-5, rtol=1e-4, msg=name)


def test_state_dict_round_trip_and_meta_model_is_materialised() -> None:
    source = CausalLM(tiny_config("qwen3_tied"))
    init_weights(source, seed=5)
    with torch.device("meta"):
        target = CausalLM(tiny_config("qwen3_tied"))
    target = parallelize_model(target, None, activation_checkpointing="full")
    assert not any(p.is_meta for p in target.parameters())
    load_full_state_dict(target, full_state_dict(source))
    ids = torch.randint(0, 256, (1, 7))
    torch.testing.assert_close(target(ids), source(ids))
    with pytest.raises(KeyError, match="lacks"):
        load_full_state_dict(target, {})


def test_layout_errors_name_the_setting() -> None:
    config = tiny_config("llama")  # 4 heads, 2 KV heads, vocab 256
    check_tensor_parallel(config, 2)
    with pytest.raises(ParallelConfigError, match=r"tp_size \(4\) must divide the model's num_key_value_heads \(2\)"):
        check_tensor_parallel(config, 4)
    model = CausalLM(config)
    with pytest.raises(ParallelConfigError, match="strategy 'megatron'"):
        parallelize_model(model, None, strategy="megatron")
    with pytest.raises(ParallelConfigError, match="activation_checkpointing 'some'"):
        parallelize_model(model, None, activation_checkpointing="some")
    with pytest.raises(ParallelConfigError, match="precision 'fp8'"):
        parallelize_model(model, None, precision="fp8")
    with pytest.raises(ParallelConfigError, match=r"tp_size \(2\) differs from the mesh"):
        parallelize_model(model, None, tp_size=2)
    with pytest.raises(ParallelConfigError, match="must divide the number of processes"):
        build_mesh(3, 2, "cpu")
    assert build_mesh(1, 1, "cpu") is None


def test_autocast_for_unsharded_models() -> None:
    model = CausalLM(tiny_config("llama"))
    init_weights(model, seed=2)
    with autocast_context(model, "bf16", "cpu"):
        assert model(torch.tensor([[1, 2, 3]])).dtype == torch.bfloat16
    with autocast_context(model, "fp32", "cpu"):
        assert model(torch.tensor([[1, 2, 3]])).dtype == torch.float32
