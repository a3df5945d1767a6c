"""Whether a run may resume a checkpoint: its weights must fit this model and PEFT setup (the signature),
and its training config must match this run's on the keys that decide the updates from it on.

Torch-free: the launcher's pre-flight (trainer/contract/preflight.py) runs these checks, all but the
architecture part of the signature, before any process starts; the workers
(trainer.recipes.base_recipe.select_checkpoint) run them again with the built model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from trainer.contract.checkpoint_layout import read_signature, read_steps_per_epoch, resolve_restore, saved_world_size
from trainer.contract.config import RecipeConfig, parse_config
from trainer.contract.model_settings import ALL_LINEAR, LINEAR_MODULES, target_path
from trainer.contract.optim_defaults import optimizer_defaults
from trainer.contract.overrides import ConfigError, load_yaml_file
from trainer.contract.step_scheduler import run_length

# Fields of the model signature; a checkpoint whose values differ cannot be loaded into this model.
SIGNATURE_FIELDS = ("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                    "num_attention_heads", "num_key_value_heads", "head_dim", "tie_word_embeddings",
                    "attention_bias")
# DeepSeek-V3's multi-head latent attention (trainer/models/mla_config.py): the widths that shape its weights.
LATENT_ATTENTION_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def checked_resume(cfg: Any, checkpoint_dir: Path, world_size: Optional[int],
                   fit_differences: Callable[[dict[str, Any]], list[str]]) -> tuple[Optional[Path], list[str]]:
    """(checkpoint the run resumes from, warnings to log), or (None, []) for a fresh start.

    Auto-resume belongs to runs that checkpoint; an explicit ``restore_from.path`` always works. A
    checkpoint whose weights do not fit (``fit_differences`` of its saved signature is not empty) is
    refused, then the config is compared (``check_resume_config``). The workers
    (BaseRecipe.select_checkpoint) and the launcher's pre-flight, which knows no built model, share it."""
    restore_from = cfg.restore_from.path if cfg.restore_from else None
    if restore_from is None and not cfg.checkpoint.enabled:
        return None, []
    path, explicit = resolve_restore(restore_from, checkpoint_dir)
    if path is None:
        return None, []
    diffs = fit_differences(read_signature(path))
    if diffs:
        raise unfit_checkpoint_error(path, diffs, explicit)
    chosen_by = "restore_from.path" if explicit else "checkpoint.checkpoint_dir"
    return path, check_resume_config(path, cfg, chosen_by, world_size)


# ----------------------------------------------------------------------------- compatibility

def _targets(target_modules: Any) -> list:
    # A list in any order, with repeats, names the same modules; on the bundled decoder a dotted suffix without
    # a layer index (self_attn.q_proj) selects what its last part does in every layer; one with an index
    # (layers.0.self_attn.q_proj) is one layer's. "all-linear" names the decoder's linears but the LM head
    # (trainer.components.peft), so it and that list written out are one setting.
    if target_modules == ALL_LINEAR:
        return sorted(m for m in LINEAR_MODULES if m != "lm_head")

    def selected(target: str) -> str:
        path = target_path(target)
        if path is None:
            return target
        return path[-1] if "N" in path else ".".join(path)  # every layer's: its leaf; one layer's: its whole path

    names = {selected(str(t)) for t in target_modules or []}
    # one layer's module is inside the every-layer target of its leaf
    return sorted(n for n in names if "." not in n or n.rsplit(".", 1)[-1] not in names)


def model_signature(model_config: Any, peft: Optional[dict[str, Any]]) -> dict[str, Any]:
    """The architecture fields that decide whether weights fit, plus the PEFT setup (it changes the format)."""
    sig = {name: getattr(model_config, name, None) for name in SIGNATURE_FIELDS}
    moe = getattr(model_config, "moe", None)
    if moe is not None:  # MoE only, so dense checkpoints keep their signature
        sig["experts"] = {"num_experts": moe.num_experts, "top_k": moe.top_k,
                          "expert_intermediate_size": moe.expert_intermediate_size}
        # Qwen2-MoE's and DeepSeek-V3's shapes only where set, so that other MoE checkpoints keep their signature.
        for name in ("shared_expert_intermediate_size", "n_shared_experts", "first_k_dense_replace"):
            if getattr(moe, name, 0):
                sig["experts"][name] = getattr(moe, name)
    mla = getattr(model_config, "mla", None)
    if mla is not None:
        sig["latent_attention"] = {name: getattr(mla, name) for name in LATENT_ATTENTION_FIELDS}
    if peft:
        sig["peft"] = {"method": peft.get("method", "lora"), "rank": peft.get("rank"),
                       "alpha": float(peft.get("alpha", 0.0)),
                       "target_modules": _targets(peft.get("target_modules"))}
    else:
        sig["peft"] = None
    return sig


def _normalise(value: Any) -> Any:
    # YAML/JSON round trips turn tuples into lists and may turn 16 into 16.0.
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in sorted(value.items())}
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def signature_differences(current: dict[str, Any], saved: dict[str, Any]) -> list[str]:
    """``field: checkpoint X, this run Y`` for each field that differs."""
    diffs = []
    for key in sorted(set(current) | set(saved)):
        now, then = _normalise(current.get(key)), _normalise(saved.get(key))
        if now != then:
            diffs.append(f"{key}: checkpoint {then!r}, this run {now!r}")
    return diffs


def unfit_checkpoint_error(ckpt: Path, differences: list[str], explicit: bool) -> ConfigError:
    """The refusal of a checkpoint whose weights do not fit this model or PEFT setup. An auto-detected
    one is refused too: starting fresh in its folder would overwrite it at the first save of its step
    (and ``keep_last`` would then delete the rest). ``allow_config_change`` cannot help: the weights
    themselves do not load."""
    detail = "; ".join(differences)
    cannot = "checkpoint.allow_config_change cannot resume it, the weights do not load into this model"
    if explicit:
        return ConfigError(f"restore_from.path: checkpoint {ckpt} does not fit this model ({detail}); restore a "
                           f"checkpoint of the same architecture and PEFT setup ({cannot})")
    return ConfigError(
        f"checkpoint.checkpoint_dir: {ckpt.parent} holds checkpoint {ckpt.name} of another model or PEFT setup "
        f"({detail}); starting fresh there would overwrite it. Give this run a new checkpoint.checkpoint_dir, or "
        f"remove the old checkpoints from {ckpt.parent} to start over there ({cannot})")


# ----------------------------------------------------------------------------- config changes on resume

# Keys a resumed run must share with the run that saved the checkpoint, or it continues another
# experiment from that run's weights and optimizer state: the keys `recipe-advisor diff`
# (service/configs/changes.py) classifies as convergence that decide the updates from the checkpoint on.
# Listed here rather than imported because the trainer never imports the service. Left out on
# purpose: validation_dataset and the log/validation/checkpoint intervals (they measure the run,
# the trained weights do not depend on them), restore_from (it names the checkpoint being resumed)
# and metadata (the trainer never reads it).
RESUME_CONVERGENCE_KEYS = ("recipe", "model", "peft", "precision", "rng", "dataset", "dataloader.shuffle",
                           "dataloader.drop_last", "step_scheduler.global_batch_size", "optimizer",
                           "lr_scheduler", "loss_fn", "clip_grad_norm", "distributed.grad_reduce_dtype")
# Same math through other kernels, or what is written on save: execution, as `diff` has them.
RESUME_EXECUTION_KEYS = ("model.kernels", "model.attn_implementation", "optimizer.fused", "optimizer.foreach",
                         "loss_fn.chunked", "loss_fn.chunk_size", "peft.merge_on_save")
# The run's length sets the LR schedule's length only where lr_scheduler.decay_steps is unset and the
# schedule decays (trainer.components.lr_schedule.build_lr_scheduler); otherwise it only says where the run stops,
# and stopping early then resuming for longer equals the straight run.
RUN_LENGTH_KEYS = ("step_scheduler.max_steps", "step_scheduler.num_epochs")
NOT_COMPARED = ("restore_from", "metadata", "checkpoint.allow_config_change")
_ABSENT = object()


def _under(key: str, prefixes: tuple[str, ...]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in prefixes)


@dataclass(frozen=True)
class ConfigChange:
    """One key whose value differs between a checkpoint's config and this run's."""

    key: str
    old: Any
    new: Any
    convergence: bool

    @staticmethod
    def _shown(value: Any) -> str:
        if value is _ABSENT or value is None:
            return "unset"
        return value if isinstance(value, str) else json.dumps(value)

    def __str__(self) -> str:
        return f"{self.key} {self._shown(self.old)} -> {self._shown(self.new)}"


def _changed_keys(old: Any, new: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    # Down to the leaves while both sides are sections; a section set on one side only is one change.
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            out += _changed_keys(old.get(key, _ABSENT), new.get(key, _ABSENT), f"{prefix}.{key}" if prefix else key)
        return out
    return [] if _normalise(old) == _normalise(new) else [(prefix, old, new)]


def _is_convergence(key: str, current: RecipeConfig, same_length: bool = False) -> bool:
    if _under(key, RESUME_EXECUTION_KEYS):
        return False
    if _under(key, RUN_LENGTH_KEYS):
        schedule = current.lr_scheduler
        return schedule.decay_steps is None and schedule.schedule != "constant" and not same_length
    return _under(key, RESUME_CONVERGENCE_KEYS)


# Values the schema derives from other keys (RecipeConfig._etp_default): a change that only follows
# its source is no change of its own, so only a value the user set differently is listed.
DERIVED_KEYS = {"distributed.etp_size": lambda c: 1 if c.distributed.ep_size > 1 else c.distributed.tp_size}


def _comparable(cfg: RecipeConfig, defaults: dict[str, Any]) -> dict[str, Any]:
    dump = cfg.model_dump(mode="json", by_alias=True)
    for key, source in DERIVED_KEYS.items():
        section, _, name = key.partition(".")
        if dump[section][name] == source(cfg):
            dump[section][name] = None
    # The optimizer's own defaults written out (eps 1e-8, amsgrad false for AdamW) are no change.
    for name, value in defaults.items():
        if dump["optimizer"].get(name) is None:
            dump["optimizer"][name] = value
    if dump.get("peft"):  # "all-linear" and the list it names are one setting
        dump["peft"]["target_modules"] = _targets(dump["peft"]["target_modules"])
    return dump


def config_changes(saved: RecipeConfig, current: RecipeConfig,
                   steps_per_epoch: Optional[int] = None) -> list[ConfigChange]:
    """Every key whose value, schema defaults (and the optimizer's own) applied, differs between the
    checkpoint's config and this run's, in key order, each marked convergence or not (the key lists
    above). ``steps_per_epoch`` (of the saved run) tells whether a changed max_steps / num_epochs
    keeps the run's length, and so the LR schedule's: then it only says where the run stops."""
    same_target = saved.optimizer.target == current.optimizer.target
    defaults = optimizer_defaults(current.optimizer.target) if same_target else {}
    old, new = _comparable(saved, defaults), _comparable(current, defaults)
    same_length = steps_per_epoch is not None and (
        run_length(saved.step_scheduler.max_steps, saved.step_scheduler.num_epochs, steps_per_epoch)
        == run_length(current.step_scheduler.max_steps, current.step_scheduler.num_epochs, steps_per_epoch))
    return [ConfigChange(key, before, after, _is_convergence(key, current, same_length))
            for key, before, after in _changed_keys(old, new) if not _under(key, NOT_COMPARED)]


def check_resume_config(ckpt: Path, current: RecipeConfig, chosen_by: str,
                        world_size: Optional[int] = None) -> list[str]:
    """Compare this run's config with the ``config.yaml`` the checkpoint was saved under.

    Convergence changes (a new LR, schedule, global batch, data, ...) raise ConfigError naming each
    key (old -> new), unless ``checkpoint.allow_config_change`` is set: then the first line returned
    is a warning listing them. Execution changes (layout, micro batch, kernels, logging) give an
    info line. ``chosen_by`` is the key that picked the checkpoint (restore_from.path or
    checkpoint.checkpoint_dir), named by the error with the way out that fits it. A ``world_size``
    other than the saving run's is listed with the execution changes. Returns the lines to log (rank 0)."""
    try:
        saved = parse_config(load_yaml_file(ckpt / "config.yaml"))
    except (ConfigError, ValueError) as exc:  # no config.yaml, or one this schema no longer reads
        reason = str(exc).splitlines()[0]
        return [f"warning: cannot compare this config with the one {ckpt} was saved under ({reason}); "
                "resuming without that check"]
    changes = config_changes(saved, current, read_steps_per_epoch(ckpt))
    convergence = "; ".join(str(c) for c in changes if c.convergence)
    execution = "; ".join([str(c) for c in changes if not c.convergence] + _world_change(ckpt, world_size))
    lines = []
    if convergence and not current.checkpoint.allow_config_change:
        fresh = ("Restore a checkpoint saved under this config (restore_from.path), unset restore_from.path to "
                 "start fresh" if chosen_by == "restore_from.path" else
                 "Start fresh with a new checkpoint.checkpoint_dir")
        shape = any(_under(c.key, ("model", "peft")) for c in changes if c.convergence)
        raise ConfigError(
            f"{chosen_by}: checkpoint {ckpt} was saved under another training config ({convergence}); resuming "
            f"it would continue a different experiment. {fresh}, or resume anyway with "
            "--checkpoint.allow_config_change true (the LR, batch and data then follow this config"
            + ("; a checkpoint of another architecture or PEFT shape does not load even then)" if shape else ")"))
    if convergence:
        lines.append(f"warning: resuming {ckpt} under a changed training config (checkpoint.allow_config_change): "
                     f"{convergence}; from its step on, training follows this config")
    if execution:
        lines.append(f"resuming {ckpt} with other execution settings (the same training): {execution}")
    return lines


def _world_change(ckpt: Path, world_size: Optional[int]) -> list[str]:
    saved = saved_world_size(ckpt)
    return [f"world size {saved} -> {world_size}"] if world_size and saved and saved != world_size else []
