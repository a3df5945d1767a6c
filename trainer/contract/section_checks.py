"""What the trainer cannot build a section from, or call in its training step: each problem with its key, why and
the fix. Torch-free and reading no file: the pre-flight's checks (preflight_checks.py) refuse the first, validate
reports each (RA-E004, RA-E005)."""

from __future__ import annotations

from typing import NamedTuple

from trainer.contract.balancing_checks import balancing_problems
from trainer.contract.builders import dataset_call
from trainer.contract.capabilities import CAPABILITIES
from trainer.contract.config import RecipeConfig
from trainer.contract.fast_paths import adapts_lm_head, fused_step_runs
from trainer.contract.model_checks import check_model_keys, check_peft_targets, declared_size
from trainer.contract.overrides import ConfigError
from trainer.contract.source_reader import literal_defaults


class Problem(NamedTuple):
    """One thing the trainer cannot build from: the key, why, the fix, and whether the key is left out."""
    key: str
    why: str
    fix: str = ""
    missing: bool = False
    warning: bool = False  # the trainer runs it, and says how (a converted Megatron coefficient)

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
    problems += [Problem(key, why, fix, warning=warning) for key, why, fix, warning in balancing_problems(cfg)]
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
