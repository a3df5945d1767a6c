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
from typing import Any, Optional

from trainer.contract.builders import dataset_call, resolve_data_path, resolve_tokenizer_path
from trainer.contract.checkpoint_layout import resolve_restore
from trainer.contract.config import RecipeConfig, parse_config, section_fields
from trainer.contract.expert_checks import declared_experts
from trainer.contract.model_checks import (
    check_model_source,
    declared_positions,
    declared_size,
    declared_value,
)
from trainer.contract.overrides import ConfigError, FieldError, apply_overrides, load_yaml_file, parse_overrides
from trainer.contract.preflight_checks import CONFIG_CHECKS, Declared
from trainer.contract.resume_checks import checked_resume, model_signature, signature_differences
from trainer.contract.section_checks import section_problems


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
    for problem in section_problems(cfg):  # what the checks let through, the trainer runs and says how
        if problem.warning and is_rank_zero():
            print(f"warning: {problem}", file=sys.stderr)
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


def check_resume_before_launch(cfg: RecipeConfig, world_size: int) -> Optional[Path]:
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
