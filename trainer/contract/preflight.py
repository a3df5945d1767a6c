"""Loading a config of the bundled trainer and its pre-flight: every check that needs no torch and no model.

``recipe-advisor train`` runs them before it spawns anything (service/cli/train.py), ``validate`` runs the
config's checks too (trainer/contract/preflight_checks.py: RA-E009, with the section and step problems each
reported in full as RA-E004, RA-E005), and every trainer process runs them first
(trainer/launch.py), so a bad config stops with one clear message naming the key, before any process
group, model or checkpoint exists.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, NamedTuple, Optional

from trainer.contract.builders import dataset_call, resolve_data_path, resolve_tokenizer_path
from trainer.contract.capabilities import CAPABILITIES
from trainer.contract.checkpoint_layout import resolve_restore
from trainer.contract.config import RecipeConfig, parse_config, section_fields
from trainer.contract.expert_checks import declared_experts
from trainer.contract.fast_paths import adapts_lm_head, fused_step_runs
from trainer.contract.model_checks import (
    check_model_keys,
    check_model_source,
    check_peft_targets,
    declared_positions,
    declared_size,
    declared_value,
)
from trainer.contract.overrides import ConfigError, FieldError, apply_overrides, load_yaml_file, parse_overrides
from trainer.contract.preflight_checks import CONFIG_CHECKS, Declared
from trainer.contract.resume_checks import checked_resume, model_signature, signature_differences
from trainer.contract.source_reader import literal_defaults


def load_config(path: str, overrides: list[str]) -> tuple[dict[str, Any], RecipeConfig]:
    """(effective plain config, validated RecipeConfig); ConfigError with the key for anything wrong."""
    raw = apply_overrides(load_yaml_file(path), overrides)
    try:
        cfg = parse_config(raw)
    except ValueError as exc:  # pydantic.ValidationError
        flags = {key for key, _ in parse_overrides(overrides)}
        raise ConfigError(_format_validation_error(exc, path, flags)) from None
    return raw, cfg


def _format_validation_error(exc: Exception, path: str, flags: set[str] = frozenset()) -> str:
    """One clause per problem, each naming where the value came from: the override flag that set the key
    (or a section above it), else the config file."""
    errors = getattr(exc, "errors", None)
    if errors is None:
        return f"{path}: {exc}"
    lines = []
    for err in errors():
        key = ".".join(str(p) for p in err.get("loc", ()))
        flag = next((f for f in flags if key == f or key.startswith(f + ".")), None)
        where = f"--{flag}: " + (f"{key}: " if flag != key else "") if flag else f"{path}: {key}: "
        if err.get("type") == "extra_forbidden":
            section = key.rpartition(".")[0]
            known = sorted(section_fields(section)) if section else []
            hint = f"; known keys: {', '.join(known)}" if known else ""
            lines.append(f"{where}unknown key{hint}")
        else:
            lines.append(f"{where}{err.get('msg')} (got {err.get('input')!r})")
    return "; ".join(lines)


def declared_model(section: Any) -> Declared:
    """What the model's config.json or bundled card declares (nothing for a custom builder or a hub model)."""
    return Declared(name=section.pretrained_model_name_or_path or "",
                    model_type=declared_value(section, "model_type")[1],
                    layers=declared_size(section, "num_hidden_layers")[1], positions=declared_positions(section)[1],
                    experts=declared_experts(section))


def preflight(cfg: RecipeConfig, world_size: int, *, compare_resume: bool = True) -> Optional[Path]:
    """Every check that needs no torch and no model: run before any work, on every rank alike. The config's
    checks are the one list validate runs too (trainer/contract/preflight_checks.py CONFIG_CHECKS); then what
    this machine must hold (the data and tokenizer files, the model's files, the checkpoint to restore).
    ``compare_resume``: also the resume checks of the checkpoint this run would resume
    (check_resume_before_launch), which is returned (None: a fresh start, or not compared); the workers
    run them after the model's signature check instead."""
    d = cfg.distributed
    if d.strategy == "megatron":
        raise ConfigError(
            "distributed.strategy: megatron configs run on Megatron Bridge, not on the bundled trainer; "
            "use fsdp2 or ddp here (recipe-advisor recommend --engine bundled), or launch with run_recipe.py"
        )
    model = declared_model(cfg.model)
    for check in CONFIG_CHECKS:
        check.run(cfg, world_size, model)
    if d.sequence_parallel and d.tp_size == 1 and is_rank_zero():
        print("warning: distributed.sequence_parallel has no effect with tp_size 1", file=sys.stderr)
    check_machine_files(cfg)
    return check_resume_before_launch(cfg, world_size) if compare_resume else None


def check_machine_files(cfg: RecipeConfig) -> None:
    """What the machine that trains must hold: the data and tokenizer files, the model's files (a local folder,
    a bundled id, or the hub cache when offline), the checkpoint to restore."""
    for section_name in ("dataset", "validation_dataset"):
        section = getattr(cfg, section_name)
        if section is None:
            continue
        call = dataset_call(section, section_name)
        try:
            if call.get("path") is not None or "Jsonl" in call["_target_"]:
                resolve_data_path(call.get("path"), "path")
            if call.get("tokenizer") not in (None, "byte"):
                resolve_tokenizer_path(call["tokenizer"], fetch=False)  # a model's: fetched by the workers
        except FieldError as exc:
            raise ConfigError(f"{section_name}.{exc.field}: {exc.reason}") from None
    if cfg.model.target is None and cfg.model.pretrained_model_name_or_path:  # the default loader's model
        check_model_source(cfg.model.pretrained_model_name_or_path,
                           weights=cfg.model.kwargs().get("load_weights") is True)
    if cfg.restore_from is not None and cfg.restore_from.path is not None:
        resolve_restore(cfg.restore_from.path, Path(cfg.checkpoint.checkpoint_dir))


class Problem(NamedTuple):
    """One thing the trainer cannot build from: the key, why, the fix, and whether the key is left out."""
    key: str
    why: str
    fix: str = ""
    missing: bool = False

    def __str__(self) -> str:
        return f"{self.key}: {self.why}" + (f"; {self.fix}" if self.fix else "")


def _problem(exc: ConfigError) -> Problem:
    """A ConfigError of the shared checks (``key: why; fix``) as a Problem."""
    key, _, rest = str(exc).partition(": ")
    why, _, fix = rest.partition("; ")
    return Problem(key, why, fix, missing=why == "missing")


def section_problems(cfg: RecipeConfig) -> list[Problem]:
    """Each section the trainer cannot build from: a dataset, optimizer or model it is not told, keys
    and values the default model loader refuses, LoRA targets that match no layer, LoRA with tensor
    parallel. Reads no file and no network. The pre-flight refuses the first; validate reports each
    (RA-E005)."""
    problems = []
    for name in ("dataset", "validation_dataset"):
        if getattr(cfg, name) is not None:
            try:
                dataset_call(getattr(cfg, name), name)
            except ConfigError as exc:
                problems.append(_problem(exc))
    if cfg.optimizer.target is None:
        problems.append(Problem("optimizer._target_", "missing",
                                "e.g. optimizer: {_target_: torch.optim.AdamW, lr: 3.0e-4}", missing=True))
    if cfg.model.target is None and not cfg.model.pretrained_model_name_or_path:
        problems.append(Problem("model.pretrained_model_name_or_path", "missing",
                                "name a model (bundled id, folder or hub id)", missing=True))
    checks = [lambda: check_model_keys(cfg.model)]
    if cfg.peft is not None:
        checks.append(lambda: check_peft_targets(cfg.peft.target_modules, default_loader=cfg.model.target is None,
                                                 layers=declared_size(cfg.model, "num_hidden_layers")[1]))
    for check in checks:
        try:
            check()
        except ConfigError as exc:
            problems.append(_problem(exc))
    if cfg.peft is not None and cfg.distributed.tp_size > 1 and not CAPABILITIES.get("tp_with_lora"):
        problems.append(Problem("distributed.tp_size", "LoRA runs with data parallel only here", "set tp_size: 1"))
    return problems


def step_callable_problems(cfg: RecipeConfig) -> list[tuple[str, str, str]]:
    """(key, why, fix) for each optimizer or loss setting the training step cannot call: fused steps
    torch lacks for the strategy, chunking under TP or with an adapted LM head. (An optimizer that is not
    first-order, or a loss outside the trainer's signature, is not in the registry: refused before this.)
    The pre-flight refuses the first; validate reports each (RA-E004)."""
    problems = []
    optimizer, strategy = cfg.optimizer.target or "", cfg.distributed.strategy
    if cfg.optimizer.fused and optimizer.startswith("torch.optim.") and not fused_step_runs(optimizer, strategy):
        if "fused" in literal_defaults(optimizer):
            fix = "set optimizer.fused: false, or distributed.strategy: ddp"
        else:
            fix = (f"drop optimizer.fused ({optimizer} takes no such keyword): write the section without it, e.g. "
                   f"--optimizer \"{{_target_: {optimizer}, lr: {cfg.optimizer.lr}}}\"")
        problems.append(("optimizer.fused", f"{optimizer} has no fused step for the sharded (DTensor) parameters "
                         f"of strategy {strategy} (torch fuses only Adam and AdamW there)", fix))
    if cfg.loss_fn.kwargs().get("chunked") is True and cfg.distributed.tp_size > 1:
        problems.append(("loss_fn.chunked", f"true does not run with tensor parallel (tp_size "
                         f"{cfg.distributed.tp_size}: the LM head is split over the tp mesh)",
                         "set loss_fn.chunked: auto or false, or distributed.tp_size: 1"))
    if cfg.loss_fn.kwargs().get("chunked") is True and adapts_lm_head(cfg):
        problems.append(("loss_fn.chunked", "true multiplies by lm_head.weight alone, so the LoRA adapter "
                         "peft.target_modules puts on lm_head would never train",
                         "set loss_fn.chunked: auto or false, or drop lm_head from peft.target_modules"))
    return problems


def check_resume_before_launch(cfg: RecipeConfig, world_size: int) -> None:
    """The resume checks of the workers (trainer.recipes.base_recipe.select_checkpoint) that need no
    model, so that the launcher and ``--dry-run`` refuse what the workers would: the config
    comparison, and the PEFT part of the signature (the architecture part needs the built model)."""
    peft = cfg.peft.model_dump() if cfg.peft is not None else None

    def peft_differences(saved: dict) -> list[str]:
        if "peft" not in saved:
            return []
        return signature_differences({"peft": model_signature(None, peft)["peft"]}, {"peft": saved["peft"]})

    return checked_resume(cfg, Path(cfg.checkpoint.checkpoint_dir), world_size, peft_differences)[0]


def is_rank_zero() -> bool:
    return os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")) == "0"
