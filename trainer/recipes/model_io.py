"""The model side of a recipe: build, PEFT, checkpoint weights, layout checks, sharding, saving.

Kept apart from the loop so ``train_ft.py`` reads top to bottom. Every error a
config can cause is turned into a ConfigError that names the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer.components.targets import instantiate
from trainer.contract.config import RecipeConfig
from trainer.contract.model_checks import (
    ELSEWHERE,
    check_default_loader_kwargs,
    check_seq_lengths,
    declared_positions,
    dtype_name,
)
from trainer.contract.overrides import ConfigError
from trainer.distributed.dist import DistInfo

CONSOLIDATED, SHARDED = "consolidated", "sharded"


def parse_dtype(value: Any) -> torch.dtype:
    if isinstance(value, torch.dtype):
        return value
    return getattr(torch, dtype_name(value))


def build_model(section, *, seed: int, device_type: str = "cpu", compile_enabled: bool = False) -> nn.Module:
    """The model on the meta device (``model._target_`` or, absent, trainer.models.build_causal_lm).
    ``model.kernels`` (default auto) is resolved for ``device_type`` (trainer.fused.runtime)."""
    from trainer.fused.runtime import resolve_kernels, resolve_loss_kernels

    kwargs = section.kwargs()
    setting = kwargs.pop("kernels", "auto")
    kernels = resolve_kernels(setting, device_type, compile_enabled=compile_enabled)
    model = _build_model(section, kwargs, seed, kernels)
    model.loss_kernels = resolve_loss_kernels(setting, device_type)  # read by trainer.loss
    return model


def _build_model(section, kwargs: dict, seed: int, kernels: str) -> nn.Module:
    from trainer.models import build_causal_lm

    name = section.pretrained_model_name_or_path
    dtype = parse_dtype(kwargs.pop("dtype", "float32"))
    try:
        if section.target is not None:
            return instantiate({"_target_": section.target, **kwargs}, "model", name_or_path=name, dtype=dtype,
                               device="meta", seed=seed, kernels=kernels)
        check_default_loader_kwargs(kwargs)
        return build_causal_lm(name, dtype=dtype, device="meta", seed=seed,
                               load_weights=bool(kwargs.get("load_weights", False)),
                               attn_implementation=kwargs.get("attn_implementation", "sdpa"), kernels=kernels)
    except ConfigError:
        raise
    except (ValueError, FileNotFoundError, OSError) as exc:  # unknown model, bad config.json, no weights
        raise ConfigError(f"model.pretrained_model_name_or_path: {name!r}: {exc}") from None


def check_layout(model_config, cfg: RecipeConfig) -> None:
    """What the parallel layout needs from this model and data, checked before anything is allocated."""
    from trainer.contract.attention_checks import check_latent_attention_layout

    tp = cfg.distributed.tp_size
    check_latent_attention_layout(getattr(model_config, "model_type", None), tp_size=tp,
                                  cp_size=cfg.distributed.cp_size)
    _check_experts(model_config, cfg)
    for field in ("num_attention_heads", "num_key_value_heads"):
        heads = getattr(model_config, field)
        if heads % tp:
            options = [d for d in range(1, heads + 1) if heads % d == 0]
            raise ConfigError(f"distributed.tp_size: {tp} does not divide the model's {field} ({heads}); "
                              f"tensor parallel splits whole heads: use tp_size in {options}")
    # The pre-flight checked what it could read without torch; a hub model or a custom builder only here.
    if declared_positions(cfg.model)[0] == ELSEWHERE:
        check_seq_lengths(cfg, getattr(model_config, "max_position_embeddings", None),
                          cfg.model.pretrained_model_name_or_path or cfg.model.target)
    from trainer.contract.layout_checks import check_context_parallel, check_pipeline

    check_context_parallel(cfg)
    check_pipeline(cfg, getattr(model_config, "num_hidden_layers", None))
    if cfg.distributed.pp_size > 1 and getattr(model_config, "tie_word_embeddings", False):
        raise ConfigError("distributed.pp_size: this model ties its LM head to the input embedding "
                          "(tie_word_embeddings), which the bundled pipeline cannot split over the first and last "
                          "stages; set distributed.pp_size: 1 (context parallel or FSDP2 instead)")
    seq = cfg.dataset.seq_length
    if tp > 1 and cfg.distributed.sequence_parallel and seq is not None and seq % tp:
        raise ConfigError(f"dataset.seq_length: {seq} is not a multiple of tp_size {tp}; sequence parallel "
                          "splits the sequence over the TP ranks")


def _check_experts(model_config, cfg: RecipeConfig) -> None:
    import torch.distributed as dist

    from trainer.contract.expert_checks import check_expert_layout

    d, moe = cfg.distributed, getattr(model_config, "moe", None)
    check_expert_layout(num_experts=moe.num_experts if moe is not None else 0, ep_size=d.ep_size,
                        etp_size=d.etp_size or 1, tp_size=d.tp_size, strategy=d.strategy,
                        world_size=dist.get_world_size() if dist.is_initialized() else 1,
                        activation_checkpointing=d.activation_checkpointing)


def configure_balancing(model: nn.Module, cfg: RecipeConfig) -> None:
    """The config's `model.moe_*` load-balancing keys (Megatron's names) over the family's own (its config.json),
    on each MoE layer and on the model config that the checkpoint's config.json is written from (no-op for a
    dense model). A Megatron Bridge config's `moe_aux_loss_coeff` is converted (contract/balancing_checks.py)."""
    import dataclasses

    from trainer.contract.balancing_checks import aux_loss_coefficient, check_expert_bias
    from trainer.models.moe import moe_layers
    from trainer.models.moe_config import DEEPSEEK_BIAS_UPDATE_RATE

    layers, moe, section = moe_layers(model), getattr(model.config, "moe", None), cfg.model
    if not layers or moe is None:
        return
    check_expert_bias(model.config.model_type, section.moe_router_enable_expert_bias)
    balancing = section.moe_router_load_balancing_type or moe.load_balancing_type
    coefficient = aux_loss_coefficient(cfg, len(layers), moe.top_k, balancing)
    rate = 0.0
    if moe.score_correction_bias and section.moe_router_enable_expert_bias is not False:
        given = section.moe_router_bias_update_rate
        rate = given if given is not None else (moe.bias_update_rate or DEEPSEEK_BIAS_UPDATE_RATE)
    moe = dataclasses.replace(
        moe, load_balancing_type=balancing,
        router_aux_loss_coef=moe.router_aux_loss_coef if coefficient is None else coefficient, bias_update_rate=rate)
    model.config.moe = moe
    for layer in layers:
        layer.load_balancing, layer.aux_loss_coef = moe.load_balancing_type, moe.router_aux_loss_coef
        layer.bias_update_rate = rate


def configure_moe(model: nn.Module, dp_group, dp_size: int, grad_acc_steps: int) -> None:
    """The load-balancing loss of an MoE model sums over the DP batch (no-op for a dense model)."""
    from trainer.distributed.expert_parallel import configure_aux_loss

    configure_aux_loss(model, dp_group, dp_size, grad_acc_steps)


def apply_peft(model: nn.Module, section) -> nn.Module:
    from trainer.components.peft import apply_lora, unwrap_model

    try:
        model = apply_lora(model, rank=section.rank, alpha=section.alpha, dropout=section.dropout,
                           target_modules=section.target_modules)
    except ValueError as exc:  # its messages name the peft key
        raise ConfigError(str(exc)) from None
    config = getattr(unwrap_model(model), "config", None)
    if section.merge_on_save and getattr(config, "tie_word_embeddings", False) and any(
            name.endswith("lm_head.lora_A") for name, _ in model.named_modules()):
        # The merged checkpoint keeps one tensor for the tied embedding and head: the head's update
        # would be dropped, or would change the input embedding too.
        raise ConfigError("peft.target_modules: an adapter on lm_head of a model with tied embeddings cannot be "
                          "merged (the head is the input embedding); drop lm_head from peft.target_modules, "
                          "or set peft.merge_on_save: false to save the adapter on its own")
    return model


def is_adapter_param(name: str) -> bool:
    return ".lora_A." in name or ".lora_B." in name


def freeze_all_but_adapters(model: nn.Module) -> None:
    for name, param in model.named_parameters():
        param.requires_grad_(is_adapter_param(name))


def restore_weights_before_sharding(model: nn.Module, ckpt_dir: Path, *, peft: bool) -> None:
    """Full runs with consolidated weights: they become the model's source, read when the model is
    materialised (each rank reads only its shard). Everything else is restored after sharding."""
    weights = ckpt_dir / "model" / CONSOLIDATED
    if peft or not weights.is_dir():
        return
    from trainer.models import InitSource, is_meta, load_weights_into

    if is_meta(model):
        seed = getattr(getattr(model, "init_source", None), "seed", 0)
        model.init_source = InitSource(seed=seed, weights_path=str(weights))
    else:
        load_weights_into(model, weights)


def restore_weights_after_sharding(model: nn.Module, ckpt_dir: Path, *, peft: bool) -> None:
    """LoRA runs: the adapter onto the (seeded or pretrained) base. Runs saved without consolidated
    weights (checkpoint.save_consolidated: false): the sharded copy, resharded by DCP."""
    if peft:
        from trainer.components.peft import load_adapter

        try:
            load_adapter(model, ckpt_dir / "model")
        except (ValueError, FileNotFoundError) as exc:
            raise ConfigError(f"restore_from.path: {ckpt_dir}: {exc}") from None
    elif (ckpt_dir / "model" / SHARDED).is_dir():
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

        from trainer.components.checkpoint_trust import load_dcp

        state = {"model": get_model_state_dict(model)}
        load_dcp(state, ckpt_dir / "model" / SHARDED)
        set_model_state_dict(model, state["model"])
    elif not (ckpt_dir / "model" / CONSOLIDATED).is_dir():
        raise ConfigError(f"restore_from.path: {ckpt_dir} holds no model weights (model/{CONSOLIDATED} or "
                          f"model/{SHARDED})")


def build_device_mesh(cfg: RecipeConfig, info: DistInfo):
    """(mesh or None, data-parallel process group, data-parallel size)."""
    from trainer.distributed.parallelize import ParallelConfigError, build_mesh

    d = cfg.distributed
    try:
        if d.cp_size > 1 or d.pp_size > 1:
            from trainer.distributed.mesh import build_layout_mesh

            mesh = build_layout_mesh(info.world_size, tp_size=d.tp_size, cp_size=d.cp_size, pp_size=d.pp_size,
                                     device_type=info.device.type)
        else:
            mesh = build_mesh(info.world_size, d.tp_size, info.device.type, ep_size=d.ep_size)
    except (ParallelConfigError, ValueError) as exc:
        raise ConfigError(f"distributed: {exc}") from None
    if mesh is None:
        return None, None, 1
    from trainer.distributed.mesh import data_mesh

    return mesh, data_mesh(mesh).get_group(), data_mesh(mesh).size()


def gradient_group(mesh) -> tuple[Any, int]:
    """(process group, size) of the ranks that average gradients: data x context parallel."""
    if mesh is None:
        return None, 1
    from trainer.distributed.mesh import gradient_mesh

    grad_mesh = gradient_mesh(mesh)
    return grad_mesh.get_group(), grad_mesh.size()


def apply_context_parallel(model: nn.Module, mesh):
    """With a ``cp`` mesh dimension over 1: attention gathers keys and values over it, and the returned
    sharder cuts each batch into this rank's tokens (None without context parallel)."""
    from trainer.distributed.mesh import dim_size

    if dim_size(mesh, "cp") == 1:
        return None
    from trainer.distributed import context_parallel

    context_parallel.apply_context_parallel(model, mesh["cp"])
    return context_parallel.SequenceSharder(mesh["cp"].size(), mesh["cp"].get_local_rank())


def parallelize(model: nn.Module, mesh, cfg: RecipeConfig, device: torch.device) -> nn.Module:
    from trainer.distributed.parallelize import ParallelConfigError, parallelize_model

    d = cfg.distributed
    if cfg.precision == "fp8":
        from trainer.fused.runtime import apply_fp8

        model = apply_fp8(model, device.type, d.tp_size)
    try:
        return parallelize_model(model, mesh, strategy=d.strategy, tp_size=d.tp_size,
                                 sequence_parallel=d.sequence_parallel and d.tp_size > 1,
                                 activation_checkpointing=d.activation_checkpointing,
                                 precision=compute_precision(cfg.precision),
                                 compile=cfg.compile.enabled, device=device, compile_backend=cfg.compile.backend,
                                 grad_reduce_dtype=d.grad_reduce_dtype)
    except ParallelConfigError as exc:
        raise ConfigError(str(exc)) from None


def compute_precision(precision: str) -> str:
    """The mixed precision around the GEMMs: fp8 runs torchao float8 linears inside a bf16 run."""
    return "bf16" if precision == "fp8" else precision


def autocast(model: nn.Module, precision: str, device_type: str):
    from trainer.distributed.parallelize import autocast_context

    return autocast_context(model, compute_precision(precision), device_type)


def _tokenizer_beside(cfg: RecipeConfig, folder: Path) -> None:
    from trainer.components.hf_io import write_special_token_ids
    from trainer.contract.tokenizer_files import save_tokenizer, training_tokenizer
    from trainer.recipes.base_recipe import log

    warning = save_tokenizer(training_tokenizer(cfg.dataset), folder)
    if warning:
        log(warning)
    write_special_token_ids(folder)


def build_pipeline(model: nn.Module, mesh, cfg: RecipeConfig, device: torch.device, micro_batches: int):
    """Pipeline parallel: this rank's stages, sharded, with their schedule (trainer/distributed/pipeline.py)."""
    from trainer.distributed.pipeline import build_pipeline as build

    d = cfg.distributed
    try:
        return build(model, mesh, vp_size=d.vp_size or 1, schedule=None, strategy=d.strategy,
                     precision=compute_precision(cfg.precision), activation_checkpointing=d.activation_checkpointing,
                     device=device, micro_batches=micro_batches, grad_reduce_dtype=d.grad_reduce_dtype)
    except ValueError as exc:
        raise ConfigError(f"distributed.pp_size: {exc}") from None


def save_model_files(model: nn.Module, out_dir: Path, cfg: RecipeConfig, info: DistInfo,
                     gather=None) -> None:
    """Collective (gathers full tensors); rank 0 writes. ``gather``: merges the full tensors of every
    pipeline stage onto rank 0 (pipeline parallel).

    Full runs: ``consolidated/`` (Hugging Face config.json + safetensors), or with
    ``checkpoint.save_consolidated: false`` only ``sharded/`` (DCP, one file per rank). LoRA runs: the adapter
    in the Hugging Face PEFT layout (``adapter_model.safetensors``, ``adapter_config.json``), plus
    merged weights in ``consolidated/`` when ``peft.merge_on_save`` is set.
    """
    from trainer.components.hf_io import save_hf_model
    from trainer.distributed.parallelize import full_state_dict
    from trainer.models import unwrap_model

    config = unwrap_model(model).config
    if cfg.peft is None and not cfg.checkpoint.save_consolidated:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=str(out_dir / SHARDED))
        return
    if cfg.peft is None:
        state = full_state_dict(model)
        if gather is not None:
            state = gather(state)
        if info.is_main:
            save_hf_model(state, config, out_dir / CONSOLIDATED)
            _tokenizer_beside(cfg, out_dir / CONSOLIDATED)
        return
    from trainer.components.peft import lora_scalings, merged_state_dict, save_adapter

    p = cfg.peft
    save_adapter(model, out_dir, rank=p.rank, alpha=p.alpha, dropout=p.dropout, target_modules=p.target_modules,
                 base_model_name_or_path=cfg.model.pretrained_model_name_or_path)
    if p.merge_on_save:
        state = full_state_dict(model)
        if info.is_main:
            save_hf_model(merged_state_dict(state, lora_scalings(model)), config, out_dir / CONSOLIDATED)
            _tokenizer_beside(cfg, out_dir / CONSOLIDATED)
