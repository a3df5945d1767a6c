"""LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models") for `CausalLM`.

A targeted `nn.Linear` becomes a `LoRALinear`: the same frozen weight (same name, so checkpoints
and tensor names do not move) plus `lora_A` [r, in] and `lora_B` [out, r] kept in fp32:
    y = W x + b + (alpha / r) * B A dropout(x).
A starts as PEFT's kaiming_uniform(a=sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)), B as zeros, so the
adapted model starts equal to the base. Both are drawn per name from the seed, so every rank
agrees without a broadcast (FSDP2 does not broadcast).

Adapters are saved in the Hugging Face PEFT layout: `adapter_model.safetensors` with keys
`base_model.model.<module>.lora_A.weight` and `adapter_config.json` (peft_type LORA).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from trainer.contract.model_settings import ALL_LINEAR
from trainer.contract.safe_paths import give_umask_mode, write_text_no_follow
from trainer.models.builder import (
    DEFAULT_SEED,
    assign_full_tensor,
    clean_fqn,
    initial_value,
    is_meta,
    skip_init,
    unwrap_model,
)

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
PEFT_PREFIX = "base_model.model."


class LoRALinear(nn.Linear):
    """`nn.Linear` with a trainable low-rank update; `weight`/`bias` are the frozen base."""

    def __init__(self, base: nn.Linear, *, rank: int, alpha: float, dropout: float):
        device = base.weight.device
        super().__init__(base.in_features, base.out_features, bias=False, device="meta")
        self.weight = base.weight
        self.bias = base.bias
        self.rank, self.alpha = rank, alpha
        self.scaling = alpha / rank
        self.lora_dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.lora_A = nn.Linear(base.in_features, rank, bias=False, device=device, dtype=torch.float32)
        self.lora_B = nn.Linear(rank, base.out_features, bias=False, device=device, dtype=torch.float32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.linear(x, self.weight, self.bias)
        update = self.lora_B(self.lora_A(self.lora_dropout(x.to(self.lora_A.weight.dtype))))
        return out + (update * self.scaling).to(out.dtype)

    def delta_weight(self) -> torch.Tensor:
        """(alpha / r) * B @ A, the update merging folds into `weight`."""
        return (self.lora_B.weight.float() @ self.lora_A.weight.float()) * self.scaling

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, rank={self.rank}, alpha={self.alpha}"


def _is_target(module_name: str, module: nn.Module, targets: Union[str, Sequence[str]]) -> bool:
    if not isinstance(module, nn.Linear) or isinstance(module, LoRALinear):
        return False
    leaf = module_name.rsplit(".", 1)[-1]
    if targets == ALL_LINEAR:
        return leaf != "lm_head"
    return any(module_name == t or module_name.endswith("." + t) for t in targets)


def apply_lora(
    model: nn.Module,
    *,
    rank: int,
    alpha: float,
    dropout: float = 0.0,
    target_modules: Union[str, Sequence[str]] = ("q_proj", "k_proj", "v_proj", "o_proj"),
    seed: Optional[int] = None,
) -> nn.Module:
    """Freeze the model and put LoRA adapters on the targeted linears (module-name suffixes, or
    "all-linear" for every linear but the LM head). Works on a meta-device model too: the adapters
    then get their values (from `model.init_source.seed`) when the model is materialised."""
    if rank < 1:
        raise ValueError(f"peft.rank must be >= 1, got {rank}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"peft.dropout must be in [0, 1), got {dropout}")
    targets = [(name, module) for name, module in model.named_modules() if _is_target(name, module, target_modules)]
    # Every entry must adapt something: a typo (v_prj) or a non-linear (embed_tokens) beside a good entry would
    # otherwise train nothing there while adapter_config.json still lists it.
    unmatched = [] if target_modules == ALL_LINEAR else [
        t for t in target_modules if not any(_is_target(name, module, [t]) for name, module in targets)]
    if not targets or unmatched:
        shown = target_modules if isinstance(target_modules, str) else list(unmatched or target_modules)
        from trainer.models.moe import moe_layers

        experts = ("; the experts of an MoE model (stacked grouped weights) and its router take no adapters: LoRA "
                   "adapts its attention and dense layers") if moe_layers(model) else ""
        raise ValueError(f"peft.target_modules {shown} matched no linear layer{experts}; use names such as q_proj, "
                         "v_proj, gate_proj or 'all-linear'")
    for param in model.parameters():
        param.requires_grad_(False)
    meta = is_meta(model)
    if seed is None:
        source = getattr(unwrap_model(model), "init_source", None)
        seed = source.seed if source is not None else DEFAULT_SEED
    std = unwrap_model(model).config.initializer_range
    for name, base in targets:
        parent_name, _, leaf = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        with skip_init():  # every adapter value is set below, or at materialisation
            lora = LoRALinear(base, rank=rank, alpha=alpha, dropout=dropout)
        setattr(parent, leaf, lora)
        if not meta:
            with torch.no_grad():
                for suffix in ("lora_A.weight", "lora_B.weight"):
                    param = lora.get_parameter(suffix)
                    full_name = clean_fqn(f"{name}.{suffix}")
                    param.copy_(initial_value(full_name, param.shape, std, seed, param.device))
    return model


def lora_modules(model: nn.Module) -> Iterable[tuple[str, LoRALinear]]:
    for name, module in model.named_modules():
        if isinstance(module, LoRALinear):
            yield clean_fqn(name), module


def lora_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Full adapter tensors in PEFT naming (collective under FSDP2: call on every rank)."""
    from torch.distributed.tensor import DTensor

    out = {}
    for name, param in model.named_parameters():
        if ".lora_A." in name or ".lora_B." in name:
            tensor = param.full_tensor() if isinstance(param, DTensor) else param
            out[PEFT_PREFIX + clean_fqn(name)] = tensor.detach().to("cpu").contiguous()
    return out


def adapter_config(
    *, rank: int, alpha: float, dropout: float, target_modules: Union[str, Sequence[str]],
    base_model_name_or_path: Optional[str]
) -> dict:
    """The `adapter_config.json` PEFT's `LoraConfig.from_pretrained` reads."""
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model_name_or_path,
        "revision": None,
        "inference_mode": True,
        "r": rank,
        "lora_alpha": alpha,
        "lora_dropout": dropout,
        "target_modules": target_modules if isinstance(target_modules, str) else sorted(target_modules),
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "init_lora_weights": True,
        "modules_to_save": None,
        "layers_to_transform": None,
        "layers_pattern": None,
        "rank_pattern": {},
        "alpha_pattern": {},
    }


def save_adapter(
    model: nn.Module,
    out_dir: Union[str, os.PathLike],
    *,
    rank: int,
    alpha: float,
    dropout: float,
    target_modules: Union[str, Sequence[str]],
    base_model_name_or_path: Optional[str],
) -> Optional[Path]:
    """Write `adapter_model.safetensors` + `adapter_config.json`. Collective: every rank calls it,
    rank 0 writes. Returns the folder on the writing rank, None elsewhere."""
    from safetensors.torch import save_file

    tensors = lora_state_dict(model)
    if not tensors:
        raise ValueError("the model has no LoRA adapters to save; apply_lora first")
    if dist.is_initialized() and dist.get_rank() != 0:
        return None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    give_umask_mode(out / ADAPTER_WEIGHTS)
    config = adapter_config(
        rank=rank, alpha=alpha, dropout=dropout, target_modules=target_modules,
        base_model_name_or_path=base_model_name_or_path,
    )
    write_text_no_follow(out / ADAPTER_CONFIG, json.dumps(config, indent=2) + "\n")
    return out


def load_adapter(model: nn.Module, adapter_dir: Union[str, os.PathLike]) -> nn.Module:
    """Put a saved PEFT LoRA adapter on `model` (applying LoRA from its config when absent)."""
    from safetensors.torch import load_file

    folder = Path(adapter_dir)
    try:
        config = json.loads((folder / ADAPTER_CONFIG).read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{folder / ADAPTER_CONFIG}: no such file; not a PEFT adapter folder") from None
    if config.get("peft_type") != "LORA":
        raise ValueError(f"{folder / ADAPTER_CONFIG}: peft_type {config.get('peft_type')!r} is not LORA")
    if not any(True for _ in lora_modules(model)):
        apply_lora(
            model, rank=config["r"], alpha=config["lora_alpha"], dropout=config.get("lora_dropout", 0.0),
            target_modules=config["target_modules"],
        )
    tensors = load_file(str(folder / ADAPTER_WEIGHTS))
    params = {clean_fqn(n): p for n, p in model.named_parameters() if ".lora_" in n}
    expected = {PEFT_PREFIX + n for n in params}
    if set(tensors) != expected:
        diff = sorted(set(tensors) ^ expected)[:5]
        raise ValueError(f"{folder / ADAPTER_WEIGHTS}: adapter keys do not match the model's LoRA layers ({diff})")
    for name, param in params.items():
        assign_full_tensor(param, tensors[PEFT_PREFIX + name])
    return model


def merged_state_dict(state_dict: dict[str, torch.Tensor], scalings: dict[str, float]) -> dict[str, torch.Tensor]:
    """Fold full LoRA tensors into base weights: W' = W + s * B @ A; the lora keys disappear.

    `scalings` maps a module name (`model.layers.0.self_attn.q_proj`) to alpha / r.
    """
    out = {k: v for k, v in state_dict.items() if ".lora_" not in k}
    for module, scaling in scalings.items():
        a = state_dict[f"{module}.lora_A.weight"].float()
        b = state_dict[f"{module}.lora_B.weight"].float()
        base = out[f"{module}.weight"]
        out[f"{module}.weight"] = (base.float() + scaling * (b @ a)).to(base.dtype)
    return out


def lora_scalings(model: nn.Module) -> dict[str, float]:
    return {name: module.scaling for name, module in lora_modules(model)}


@torch.no_grad()
def merge_lora(model: nn.Module) -> nn.Module:
    """Fold every adapter into its base weight and put plain `nn.Linear`s back (unsharded models)."""
    for name, module in list(model.named_modules()):
        if not isinstance(module, LoRALinear):
            continue
        module.weight.copy_((module.weight.float() + module.delta_weight()).to(module.weight.dtype))
        plain = nn.Linear(module.in_features, module.out_features, bias=module.bias is not None, device="meta")
        plain.weight, plain.bias = module.weight, module.bias
        parent_name, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, leaf, plain)
    return model
