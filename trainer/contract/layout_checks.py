"""Torch-free checks of a context- or pipeline-parallel layout of the bundled trainer, run by the pre-flight
(before any process starts) and again by the workers once the model is built (its layer count may only be
known then). Each refusal names the key, why, and how to fix it.
"""

from __future__ import annotations

from typing import Any, Optional

from trainer.contract.model_checks import SEQUENCE_SECTIONS
from trainer.contract.overrides import ConfigError
from trainer.contract.pipeline_split import stage_layer_counts

PIPELINE_SCHEDULES = ("1f1b", "interleaved_1f1b")


def check_world(cfg: Any, world_size: int) -> None:
    d = cfg.distributed
    model_parallel = d.tp_size * d.cp_size * d.pp_size
    if d.cp_size == d.pp_size == 1:
        return  # tp_size alone: the pre-flight's own check names it
    if world_size % model_parallel:
        keys = [f"distributed.{key}" for key in ("pp_size", "cp_size", "tp_size") if getattr(d, key) > 1]
        raise ConfigError(f"{' x '.join(keys)}: tp_size x cp_size x pp_size = {d.tp_size} x {d.cp_size} x "
                          f"{d.pp_size} = {model_parallel} does not divide the {world_size} processes; pick sizes "
                          f"whose product divides {world_size}")


def check_context_parallel(cfg: Any) -> None:
    """CP cuts each sequence into 2 x cp_size equal chunks (load balance for causal attention)."""
    cp = cfg.distributed.cp_size
    if cp == 1:
        return
    for section_name in SEQUENCE_SECTIONS:
        section = getattr(cfg, section_name)
        seq = section.seq_length if section is not None else None
        if seq is not None and seq % (2 * cp):
            fit = seq // (2 * cp) * 2 * cp
            raise ConfigError(f"{section_name}.seq_length: {seq} is not a multiple of 2 x distributed.cp_size = "
                              f"{2 * cp} (context parallel cuts each sequence into {2 * cp} equal chunks, two per "
                              f"rank); use {fit or 2 * cp} or another multiple of {2 * cp}, or a cp_size whose "
                              f"double divides {seq}")


def check_pipeline(cfg: Any, layers: Optional[int], world_size: Optional[int] = None) -> None:
    """What PP composes with in the bundled trainer, and whether the layers split over PP x VP stages.
    ``layers`` None: the model's depth is not known yet (the workers check it)."""
    d = cfg.distributed
    vp = d.vp_size or 1
    if d.pp_size == 1:
        if vp > 1:
            raise ConfigError(f"distributed.vp_size: {vp} virtual stages need pipeline parallel (pp_size > 1); "
                              "remove vp_size or raise distributed.pp_size")
        return
    if d.strategy == "ddp":
        raise ConfigError("distributed.pp_size: pipeline parallel runs with strategy fsdp2 in the bundled trainer "
                          "(FSDP2 shards each stage over data parallel); set distributed.strategy: fsdp2")
    for key, value, what in (("tp_size", d.tp_size, "tensor parallel"), ("cp_size", d.cp_size, "context parallel")):
        if value > 1:
            raise ConfigError(f"distributed.pp_size: pipeline parallel does not combine with {what} "
                              f"(distributed.{key} {value}) in the bundled trainer; set one of them to 1")
    if cfg.peft is not None:
        raise ConfigError("distributed.pp_size: pipeline parallel does not run LoRA (peft) in the bundled trainer; "
                          "set distributed.pp_size: 1 or remove the peft section")
    s = cfg.step_scheduler
    if world_size is not None and world_size % (d.pp_size * d.tp_size * d.cp_size) == 0:
        dp = world_size // (d.pp_size * d.tp_size * d.cp_size)
        micro = s.global_batch_size // max(s.local_batch_size * dp, 1)
        if 0 < micro < d.pp_size:
            raise ConfigError(f"step_scheduler.global_batch_size: {s.global_batch_size} gives {micro} micro batch(es) "
                              f"of local_batch_size {s.local_batch_size} per data-parallel rank ({dp}), fewer than "
                              f"the {d.pp_size} pipeline stages (1F1B keeps every stage busy with one each); raise "
                              f"global_batch_size to {s.local_batch_size * dp * d.pp_size} or more, or lower "
                              "local_batch_size")
    if layers is None:
        return
    if d.pp_size > layers:
        raise ConfigError(f"distributed.pp_size: {d.pp_size} stages are deeper than the model's {layers} decoder "
                          f"layers; use a pp_size of at most {layers}")
    if stage_layer_counts(layers, d.pp_size, vp) is None:
        fits = [v for v in range(1, layers + 1) if stage_layer_counts(layers, d.pp_size, v) is not None]
        raise ConfigError(f"distributed.vp_size: {layers} decoder layers do not split over pp_size {d.pp_size} x "
                          f"vp_size {vp} = {d.pp_size * vp} stages without leaving a stage empty; use a vp_size in "
                          f"{fits} or a smaller pp_size")


def check_fp8(cfg: Any) -> None:
    """torchao float8 runs with data parallel only here: not inside a pipeline or a CP group (untested there)."""
    d = cfg.distributed
    if cfg.precision != "fp8":
        return
    for key, size in (("pp_size", d.pp_size), ("cp_size", d.cp_size)):
        if size > 1:
            raise ConfigError(f"distributed.{key}: precision fp8 runs with data parallel only in the bundled trainer, "
                              f"not with {key} {size}; set distributed.{key}: 1 or precision: bf16")


def check_layout(cfg: Any, world_size: int, layers: Optional[int]) -> None:
    check_fp8(cfg)
    check_world(cfg, world_size)
    check_context_parallel(cfg)
    check_pipeline(cfg, layers, world_size)
