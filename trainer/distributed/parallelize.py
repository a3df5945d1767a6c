"""Apply parallelism to a `CausalLM`, in torchtitan's order: tensor parallel, activation
checkpointing, torch.compile per block, then FSDP2 (per block, then the root) or DDP.

The model code knows nothing of this. Tensor parallel follows Megatron-LM (Shoeybi et al. 2019):
q/k/v and gate/up projections column-wise, o/down row-wise; with sequence parallel (Korthikanti et
al. 2022) the norms and residual stream are split along the sequence between those regions.

Activation checkpointing:
- "full": every block recomputes its forward in backward (`checkpoint_wrapper`).
- "selective": op-level selective checkpointing per block (torchtitan's "op" mode): outputs of
  matmuls and of fused SDPA attention are saved, every pointwise op (norms, RoPE, SiLU, residual
  adds) is recomputed. With `attn_implementation="eager"` the attention scores come from bmm
  and are recomputed too, which is Megatron's "selective" recompute of core attention.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager, nullcontext
from functools import partial
from typing import Callable, ContextManager, Iterator, Optional

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from trainer.distributed.mesh import gradient_mesh
from trainer.models.builder import (
    assign_full_tensor,
    clean_fqn,
    is_meta,
    materialize,
    named_parameters_hf,
    unwrap_model,
)

STRATEGIES = ("fsdp2", "ddp")
ACTIVATION_CHECKPOINTING = ("none", "selective", "full")
PRECISION_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class ParallelConfigError(ValueError):
    """A parallel layout this model or trainer cannot run; the message names the setting."""


def build_mesh(world_size: int, tp_size: int, device_type: str, ep_size: int = 1) -> Optional[DeviceMesh]:
    """A ("dp", "tp") mesh over all ranks, or None for a single process without a process group.
    With expert parallel (`ep_size` > 1): ("edp", "ep", "tp") with "dp" = edp x ep flattened from it
    (trainer/distributed/expert_parallel.py)."""
    if tp_size < 1 or world_size % tp_size:
        raise ParallelConfigError(
            f"distributed.tp_size ({tp_size}) must divide the number of processes ({world_size})"
        )
    if not dist.is_initialized():
        if world_size == 1:
            return None
        raise ParallelConfigError(f"world size {world_size} needs torch.distributed to be initialised first")
    if dist.get_world_size() != world_size:
        raise ParallelConfigError(f"world_size {world_size} differs from the process group's {dist.get_world_size()}")
    if ep_size > 1:
        if world_size % (tp_size * ep_size):
            raise ParallelConfigError(f"distributed.ep_size ({ep_size}) x tp_size ({tp_size}) must divide the number "
                                      f"of processes ({world_size})")
        shape = (world_size // (tp_size * ep_size), ep_size, tp_size)
        mesh = init_device_mesh(device_type, shape, mesh_dim_names=("edp", "ep", "tp"))
        mesh.data_mesh = mesh[("edp", "ep")]._flatten("dp")  # read by mesh.data_mesh, not sliced again
        return mesh
    return init_device_mesh(device_type, (world_size // tp_size, tp_size), mesh_dim_names=("dp", "tp"))


def parallelize_model(
    model: nn.Module,
    mesh: Optional[DeviceMesh],
    *,
    strategy: str = "fsdp2",
    tp_size: int = 1,
    sequence_parallel: bool = False,
    activation_checkpointing: str = "none",
    precision: str = "fp32",
    compile: bool = False,
    device: str | torch.device = "cpu",
    compile_backend: str = "inductor",
    grad_reduce_dtype: str = "fp32",
) -> nn.Module:
    """Shard / replicate `model` over `mesh` and return the module to train.

    ``grad_reduce_dtype``: the dtype gradients cross the wire in (FSDP2's ``reduce_dtype``; for DDP
    ``bf16`` registers :func:`bf16_reduce_hook`); the optimizer still steps on fp32 gradients.

    A model built on the meta device is materialised here, after sharding, so each rank allocates
    only its shard; its values come from `model.init_source` (seeded init or safetensors).
    """
    _check_layout(model, mesh, strategy, tp_size, activation_checkpointing, precision)
    device = torch.device(device)
    if tp_size > 1:
        apply_tensor_parallel(model, mesh["tp"], sequence_parallel=sequence_parallel)
    expert_parallel = mesh is not None and "ep" in (mesh.mesh_dim_names or ())
    if expert_parallel:
        from trainer.distributed.expert_parallel import apply_expert_parallel

        apply_expert_parallel(model, mesh["ep"])
    if activation_checkpointing != "none":
        apply_activation_checkpointing(model, activation_checkpointing)
    if compile:
        from trainer.models.moe import balance_eagerly

        balance_eagerly(model)
        for block in unwrap_model(model).layers:
            block.compile(backend=compile_backend)
    if mesh is not None and strategy == "fsdp2":
        if expert_parallel:
            from trainer.distributed.expert_parallel import shard_experts

            shard_experts(model, mesh["edp"], _mp_policy(precision, grad_reduce_dtype), mesh["ep"].size())
        apply_fsdp2(model, gradient_mesh(mesh), precision, grad_reduce_dtype)
        if is_meta(model):
            materialize(model, device)
        return model
    if is_meta(model):
        materialize(model, device)
    model.to(device)
    if mesh is None:
        return model
    from torch.nn.parallel import DistributedDataParallel

    grad_group = gradient_mesh(mesh).get_group()
    ddp = DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        process_group=grad_group,
    )
    if grad_reduce_dtype == "bf16":
        ddp.register_comm_hook(grad_group, bf16_reduce_hook)
    return ddp


def bf16_reduce_hook(group, bucket):
    """DDP communication hook: average a gradient bucket in bf16 and write it back in place.

    PyTorch's own ``bf16_compress_hook`` refuses anything but NCCL/XCCL; this is the same algorithm
    (compress, all-reduce the pre-divided values, decompress) on any backend, gloo included.
    """
    buffer = bucket.buffer()
    compressed = buffer.to(torch.bfloat16).div_(group.size())
    future = torch.distributed.all_reduce(compressed, group=group, async_op=True).get_future()

    def decompress(done):
        buffer.copy_(done.value()[0])
        return buffer

    return future.then(decompress)


def _check_layout(
    model: nn.Module,
    mesh: Optional[DeviceMesh],
    strategy: str,
    tp_size: int,
    activation_checkpointing: str,
    precision: str,
) -> None:
    if strategy not in STRATEGIES:
        raise ParallelConfigError(f"distributed.strategy {strategy!r}: the bundled trainer runs "
                                  f"{', '.join(STRATEGIES)}")
    if activation_checkpointing not in ACTIVATION_CHECKPOINTING:
        raise ParallelConfigError(
            f"distributed.activation_checkpointing {activation_checkpointing!r} is not one of "
            f"{', '.join(ACTIVATION_CHECKPOINTING)}"
        )
    if precision not in PRECISION_DTYPES:
        raise ParallelConfigError(f"precision {precision!r}: the bundled trainer runs {', '.join(PRECISION_DTYPES)}")
    mesh_tp = mesh["tp"].size() if mesh is not None else 1
    if tp_size != mesh_tp:
        raise ParallelConfigError(f"distributed.tp_size ({tp_size}) differs from the mesh's tp dimension ({mesh_tp})")
    if tp_size == 1:
        return
    if strategy == "ddp":
        raise ParallelConfigError("distributed.strategy ddp cannot be combined with tp_size > 1; use fsdp2")
    check_tensor_parallel(unwrap_model(model).config, tp_size)
    if any(".lora_A." in name for name, _ in model.named_parameters()):
        raise ParallelConfigError("LoRA adapters are not supported with tensor parallel; set distributed.tp_size: 1")


# ---- tensor parallel -----------------------------------------------------------------------


def check_tensor_parallel(config, tp_size: int) -> None:
    """TP splits attention heads (query and key/value) and the vocabulary: tp_size must divide each."""
    for field in ("num_attention_heads", "num_key_value_heads", "vocab_size"):
        value = getattr(config, field)
        if value % tp_size:
            raise ParallelConfigError(
                f"distributed.tp_size ({tp_size}) must divide the model's {field} ({value}); "
                f"pick a tp_size among {', '.join(str(d) for d in _divisors(value))}"
            )


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, min(n, 64) + 1) if n % d == 0]


def apply_tensor_parallel(model: nn.Module, tp_mesh: DeviceMesh, *, sequence_parallel: bool) -> None:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    lm = unwrap_model(model)
    # Between the TP regions the residual stream is split along the sequence (SP) or replicated.
    stream = Shard(1) if sequence_parallel else Replicate()
    top_plan = {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=stream),
        "lm_head": ColwiseParallel(input_layouts=stream, output_layouts=Replicate()),
    }
    if sequence_parallel:
        top_plan["model.norm"] = SequenceParallel()
    parallelize_module(lm, tp_mesh, top_plan)
    _reference_kernels_for_dtensor_inputs(lm, top_plan)

    for block in lm.model.layers:
        plan = {
            "self_attn.q_proj": ColwiseParallel(),
            "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(),
            "self_attn.o_proj": RowwiseParallel(output_layouts=stream),
            "mlp.gate_proj": ColwiseParallel(),
            "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(output_layouts=stream),
        }
        if sequence_parallel:
            plan.update(
                {
                    "input_layernorm": SequenceParallel(),
                    "post_attention_layernorm": SequenceParallel(),
                    "self_attn": PrepareModuleInput(
                        input_layouts=(Shard(1), None, None),
                        desired_input_layouts=(Replicate(), None, None),
                        use_local_output=True,
                    ),
                    "mlp": PrepareModuleInput(
                        input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True
                    ),
                }
            )
        if lm.config.qk_norm:
            # The per-head norms see only local heads: their weights' gradients need a TP all-reduce,
            # which a replicated weight over a head-sharded (dim 2) input gives (as torchtitan's Qwen3).
            plan["self_attn.q_norm"] = SequenceParallel(sequence_dim=2, use_local_output=True)
            plan["self_attn.k_norm"] = SequenceParallel(sequence_dim=2, use_local_output=True)
        parallelize_module(block, tp_mesh, plan)
        _reference_kernels_for_dtensor_inputs(block, plan)

    # Embedding (row-wise) and LM head (column-wise) both shard the [V, H] weight on dim 0, so a
    # tied weight stays one parameter: point the head at the embedding's sharded weight.
    lm.tie_weights()
    if sequence_parallel:
        lm.register_forward_pre_hook(partial(_check_sequence_divisible, tp_mesh.size()))


def _reference_kernels_for_dtensor_inputs(root: nn.Module, plan: dict) -> None:
    """Norms under SequenceParallel compute on DTensors: they take the reference math, which DTensor
    propagates op by op (the fused autograd functions of trainer/fused/ops.py work on local tensors)."""
    from torch.distributed.tensor.parallel import SequenceParallel

    for name, style in plan.items():
        if isinstance(style, SequenceParallel) and hasattr(root.get_submodule(name), "kernels"):
            root.get_submodule(name).kernels = "reference"


def _check_sequence_divisible(tp_size: int, module: nn.Module, args: tuple) -> None:
    seq_len = args[0].shape[1]
    if seq_len % tp_size:
        raise ParallelConfigError(
            f"sequence parallel splits the sequence over tp_size {tp_size}: sequence length {seq_len} "
            "must be a multiple of it (set dataset.seq_length accordingly)"
        )


# ---- activation checkpointing --------------------------------------------------------------


def _saved_ops() -> set:
    aten = torch.ops.aten
    names = [
        (aten.mm, "default"),
        (aten.addmm, "default"),
        (aten._scaled_dot_product_flash_attention, "default"),
        (aten._scaled_dot_product_efficient_attention, "default"),
        (aten._scaled_dot_product_cudnn_attention, "default"),
        (aten._scaled_dot_product_flash_attention_for_cpu, "default"),
        # Saving collective outputs keeps backward from repeating TP communication.
        (torch.ops._c10d_functional.reduce_scatter_tensor, "default"),
        (torch.ops._c10d_functional.all_reduce, "default"),
        (torch.ops._c10d_functional.all_gather_into_tensor, "default"),
    ]
    return {getattr(packet, overload) for packet, overload in names if hasattr(packet, overload)}


def _selective_policy(saved_ops: set, ctx, op, *args, **kwargs):
    from torch.utils.checkpoint import CheckpointPolicy

    return CheckpointPolicy.MUST_SAVE if op in saved_ops else CheckpointPolicy.PREFER_RECOMPUTE


def _selective_context():
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    return create_selective_checkpoint_contexts(partial(_selective_policy, _saved_ops()))


def apply_activation_checkpointing(model: nn.Module, mode: str) -> None:
    """Wrap each block in place: `mode` is "full" or "selective" (see the module docstring)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    layers = unwrap_model(model).layers
    for idx, block in enumerate(list(layers)):
        if mode == "full":
            layers[idx] = checkpoint_wrapper(block, preserve_rng_state=True)
        elif mode == "selective":
            layers[idx] = checkpoint_wrapper(block, context_fn=_selective_context, preserve_rng_state=True)
        else:
            raise ParallelConfigError(f"activation_checkpointing {mode!r} is not one of selective, full")


# ---- data parallel -------------------------------------------------------------------------


def apply_fsdp2(model: nn.Module, dp_mesh: DeviceMesh, precision: str, grad_reduce_dtype: str = "fp32") -> None:
    """`fully_shard` each block, then the root (embeddings, final norm, LM head)."""
    from torch.distributed.fsdp import fully_shard

    mp_policy = _mp_policy(precision, grad_reduce_dtype)
    layers = unwrap_model(model).layers
    last = len(layers) - 1
    for idx, block in enumerate(layers):
        # The last block's parameters are needed again at once by backward: keep them gathered.
        fully_shard(block, mesh=dp_mesh, mp_policy=mp_policy, reshard_after_forward=idx < last)
    fully_shard(model, mesh=dp_mesh, mp_policy=mp_policy)


def _mp_policy(precision: str, grad_reduce_dtype: str):
    from torch.distributed.fsdp import MixedPrecisionPolicy

    param_dtype = PRECISION_DTYPES[precision]
    return MixedPrecisionPolicy(param_dtype=None if param_dtype == torch.float32 else param_dtype,
                                reduce_dtype=PRECISION_DTYPES[grad_reduce_dtype])


def reshard_after_no_grad_forward(model: nn.Module) -> None:
    """Free what a forward without backward left gathered. The last block keeps its parameters after
    forward for the backward that follows (apply_fsdp2); a no-grad forward (validation) has none, so
    the block stays unsharded, and a parameter-keyed save (the optimizer state, the PEFT adapters)
    would then meet other tensors than the optimizer holds. No-op without FSDP2."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def autocast_context(model: nn.Module, precision: str, device_type: str) -> ContextManager:
    """Mixed precision for the forward of DDP or single-process models (FSDP2 casts by its policy)."""
    from torch.distributed.fsdp import FSDPModule

    if precision == "fp32" or isinstance(model, FSDPModule):
        return nullcontext()
    return torch.autocast(device_type=device_type, dtype=PRECISION_DTYPES[precision])


# ---- full (consolidated) state -------------------------------------------------------------


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer as a full CPU tensor with its Hugging Face name.

    Collective under FSDP2/TP: all ranks must call it (in the same order of calls).
    """
    from torch.distributed.tensor import DTensor

    out: dict[str, torch.Tensor] = {}
    with without_log_records(REDISTRIBUTE_LOGGER, _sequential_gather_notice):
        for name, tensor in model.state_dict().items():
            if isinstance(tensor, DTensor):
                tensor = tensor.full_tensor()
            out[clean_fqn(name)] = tensor.detach().cpu()
    return out


# An expert weight is sharded over "ep" and then by FSDP2 over "edp" (a _StridedShard): gathering it whole for a
# consolidated save takes one all-gather per mesh dimension, which torch cannot merge and says so on every rank.
# The save is a rare, whole-model gather, so the notice is dropped there and nowhere else.
REDISTRIBUTE_LOGGER = "torch.distributed.tensor._redistribute"


def _sequential_gather_notice(record: logging.LogRecord) -> bool:
    return record.getMessage().startswith("While redistributing from") and "sequential all_gather" in (
        record.getMessage())


@contextmanager
def without_log_records(logger_name: str, matches: Callable[[logging.LogRecord], bool]) -> Iterator[None]:
    """Drop the records of one logger that ``matches`` picks, for the duration of the block."""
    logger = logging.getLogger(logger_name)

    def keep(record: logging.LogRecord) -> bool:
        return not matches(record)

    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


def load_full_state_dict(model: nn.Module, state_dict: dict[str, torch.Tensor], *, strict: bool = True) -> None:
    """Copy full tensors (Hugging Face names) into a possibly sharded model; each rank keeps its shard."""
    params = dict(named_parameters_hf(model))
    if strict:
        missing = sorted(set(params) - set(state_dict))
        if missing:
            raise KeyError(f"state dict lacks {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    for name, param in params.items():
        if name in state_dict:
            assign_full_tensor(param, state_dict[name])
