"""Build a `CausalLM` from a name or path: resolve its config, construct on the meta device, then
materialise with a deterministic init or Hugging Face weights.

Resolution order: a local folder / `config.json`, then a bundled id or alias of the
recipe index, then a Hugging Face hub repo (its cache; `HF_HUB_OFFLINE` honoured). Weights come from
the local folder or a hub snapshot (of the bundled card's `hf_id`).

Determinism: every parameter is drawn from its own generator seeded by (seed, Hugging Face name),
as a full tensor, and only then sliced to the local shard. The same seed therefore gives the same
weights on one process or many, sharded or not, built on CPU or on the meta device.
"""

from __future__ import annotations

import json
import math
import os
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import torch
from torch import nn

from recipe_index.models import hub_offline
from trainer.components.hf_io import SafetensorsReader, WeightsNotFoundError, has_hf_weights
from trainer.models.config import DecoderConfig, ModelConfigError
from trainer.models.decoder import CausalLM

# Prefixes that wrappers insert into parameter names (DDP, checkpoint_wrapper, torch.compile).
_WRAPPER_PARTS = ("_checkpoint_wrapped_module.", "_orig_mod.", "_fsdp_wrapped_module.")
DEFAULT_SEED = 0


@dataclass(frozen=True)
class InitSource:
    """How a meta-device model gets its values when it is materialised."""

    seed: int = DEFAULT_SEED
    weights_path: Optional[str] = None


def clean_fqn(name: str) -> str:
    """The Hugging Face name of a parameter, whatever wrappers sit around the model."""
    for part in _WRAPPER_PARTS:
        name = name.replace(part, "")
    return name[len("module.") :] if name.startswith("module.") else name


def unwrap_model(model: nn.Module) -> CausalLM:
    """The `CausalLM` inside DDP (FSDP2 and TP keep the class, so they need no unwrapping)."""
    for module in model.modules():
        if isinstance(module, CausalLM):
            return module
    raise TypeError(f"{type(model).__name__} holds no CausalLM")


def named_parameters_hf(model: nn.Module) -> Iterator[tuple[str, nn.Parameter]]:
    """(Hugging Face name, parameter), each shared parameter once (tied lm_head is skipped)."""
    for name, param in model.named_parameters():
        yield clean_fqn(name), param


@torch.no_grad()
def assign_full_tensor(param: torch.Tensor, full: torch.Tensor) -> None:
    """Copy a full (unsharded) tensor into a parameter, keeping only the local shard of a DTensor."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if tuple(full.shape) != tuple(param.shape):
        raise ValueError(f"shape {tuple(full.shape)} does not match the parameter's {tuple(param.shape)}")
    if isinstance(param, DTensor):
        full = full.to(device=param.to_local().device, dtype=param.dtype)
        # src_data_rank=None: every rank holds the same full tensor, so slice locally, no broadcast.
        shard = distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None)
        param.to_local().copy_(shard.to_local())
    else:
        param.copy_(full.to(device=param.device, dtype=param.dtype))


def _generator_seed(seed: int, name: str) -> int:
    return (seed * 0x9E3779B1 + zlib.crc32(name.encode())) % (2**63)


def initial_value(name: str, shape: torch.Size, std: float, seed: int, device: torch.device) -> torch.Tensor:
    """The init of one parameter by name: norms 1, biases (and the router's selection bias) 0, LoRA B 0,
    LoRA A as PEFT's kaiming_uniform(a=sqrt(5)) = U(-1/sqrt(fan_in), 1/sqrt(fan_in)), the rest N(0, std)
    (transformers)."""
    if name.endswith("norm.weight"):
        return torch.ones(shape, device=device)
    # e_score_correction_bias: DeepSeek-V3's expert-selection bias starts at 0, as transformers inits it.
    if name.endswith(".bias") or name.endswith("lora_B.weight") or name.endswith(".e_score_correction_bias"):
        return torch.zeros(shape, device=device)
    gen = torch.Generator(device=device).manual_seed(_generator_seed(seed, name))
    if name.endswith("lora_A.weight"):
        bound = 1.0 / math.sqrt(shape[-1])
        return torch.empty(shape, device=device).uniform_(-bound, bound, generator=gen)
    return torch.empty(shape, device=device).normal_(0.0, std, generator=gen)


def _param_device(param: torch.Tensor) -> torch.device:
    from torch.distributed.tensor import DTensor

    return param.to_local().device if isinstance(param, DTensor) else param.device


@torch.no_grad()
def init_weights(model: nn.Module, seed: int = DEFAULT_SEED) -> None:
    """Deterministic init (same seed, same weights, whatever the world size or sharding)."""
    fill_parameters(model, InitSource(seed=seed))


@torch.no_grad()
def load_weights_into(model: nn.Module, weights_path: str | os.PathLike, seed: int = DEFAULT_SEED) -> None:
    """Fill every parameter from Hugging Face safetensors by name (sharded ones take their slice);
    LoRA adapters, which a base checkpoint lacks, get the seeded init."""
    fill_parameters(model, InitSource(seed=seed, weights_path=str(weights_path)))


@torch.no_grad()
def fill_parameters(model: nn.Module, source: InitSource) -> None:
    std = unwrap_model(model).config.initializer_range
    reader = SafetensorsReader(source.weights_path) if source.weights_path else None
    config = unwrap_model(model).config
    if reader is not None and getattr(config, "moe", None) is not None:
        from trainer.models.moe_names import HubLayoutReader

        reader = HubLayoutReader(reader, config)  # per-expert Hub tensors, stacked as the model holds them
    params = dict(named_parameters_hf(model))
    if reader is not None:
        missing = sorted(n for n in params if n not in reader and ".lora_" not in n)
        if missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            raise WeightsNotFoundError(
                f"{source.weights_path}: weights lack {shown}; is this checkpoint for this model config?"
            )
    for name, param in params.items():
        if reader is not None and name in reader:
            full = reader.get(name)
        else:
            full = initial_value(name, param.shape, std, source.seed, _param_device(param))
        try:
            assign_full_tensor(param, full)
        except ValueError as err:
            raise ValueError(f"{source.weights_path or 'init'}: {name}: {err}") from None


# nn.init functions the module constructors (Linear, Embedding) call on their fresh parameters.
_INIT_FUNCTIONS = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "kaiming_uniform_",
                   "kaiming_normal_", "xavier_uniform_", "xavier_normal_", "orthogonal_")


def _skip(tensor: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    return tensor


@contextmanager
def skip_init() -> Iterator[None]:
    """Module constructors inside leave parameters uninitialised (transformers' `no_init_weights`).

    A meta-device model gets its values later from `materialize`, so the constructors' own init is
    wasted work, and on meta tensors it is slow work: `nn.init` on a meta tensor runs the Python
    reference kernels, whose first call imports torch._dynamo (about 3 s per process).
    """
    saved = {name: getattr(nn.init, name) for name in _INIT_FUNCTIONS}
    try:
        for name in saved:
            setattr(nn.init, name, _skip)
        yield
    finally:
        for name, fn in saved.items():
            setattr(nn.init, name, fn)


def materialize(model: nn.Module, device: str | torch.device, source: Optional[InitSource] = None) -> nn.Module:
    """Allocate a meta-device model (sharded or not) on `device` and fill it from its `InitSource`."""
    source = source or getattr(unwrap_model(model), "init_source", None) or InitSource()
    model.to_empty(device=device)
    inner = unwrap_model(model)
    if inner.config.tie_word_embeddings and inner.lm_head.weight is not inner.model.embed_tokens.weight:
        inner.tie_weights()
    fill_parameters(model, source)
    return model


def is_meta(model: nn.Module) -> bool:
    from torch.distributed.tensor import DTensor

    return any((p.to_local() if isinstance(p, DTensor) else p).is_meta for p in model.parameters())


# ---- resolving a name to a config and weights -------------------------------------------------


def _hub_snapshot(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(
            repo_id, allow_patterns=["*.json", "*.safetensors"], local_files_only=hub_offline()
        )
    except Exception as err:  # huggingface_hub raises several unrelated types for "not available"
        hint = " (HF_HUB_OFFLINE is set: download it first or unset it)" if hub_offline() else ""
        raise WeightsNotFoundError(f"{repo_id}: no Hugging Face snapshot available{hint}: {err}") from None
    return Path(folder)


def _hub_config(repo_id: str) -> DecoderConfig:
    from huggingface_hub import hf_hub_download

    try:
        path = hf_hub_download(repo_id, "config.json", local_files_only=hub_offline())
    except Exception as err:
        first_line = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ModelConfigError(
            f"model {repo_id!r}: not a local folder/config.json, not a bundled model{_suggestions(repo_id)}, "
            f"and not on the Hugging Face hub{' cache (HF_HUB_OFFLINE is set)' if hub_offline() else ''}: {first_line}"
        ) from None
    return DecoderConfig.from_file(path)


def _suggestions(name: str) -> str:
    try:
        from recipe_index import model_suggestions
    except ImportError:
        return ""
    close = model_suggestions(name)
    return f" (closest bundled ids: {', '.join(close)})" if close else ""


def resolve_config(name_or_path: str, *, need_weights: bool = False) -> tuple[DecoderConfig, Optional[Path]]:
    """(config, folder holding the weights or None) for a local path, bundled id or hub repo id."""
    local = Path(name_or_path).expanduser()
    if local.exists():
        folder = local if local.is_dir() else local.parent
        config = DecoderConfig.from_file(local)
        return config, (folder if has_hf_weights(folder) else None)
    card = _bundled_card(name_or_path)
    repo_id = (card.hf_id if card is not None and card.hf_id else None) or name_or_path
    if need_weights:
        snapshot = _hub_snapshot(repo_id)
        return DecoderConfig.from_file(snapshot), snapshot
    if card is not None:
        return _bundled_config(card), None
    return _hub_config(name_or_path), None


def _bundled_card(name: str):
    """The recipe index's bundled card for an id or alias, or None (or no index installed)."""
    try:
        from recipe_index import find_bundled_model
    except ImportError:
        return None
    return find_bundled_model(name)


def _bundled_config(card) -> DecoderConfig:
    """The bundled `config.json` itself when it lies in the index (exact), else the card's view."""
    from recipe_index.models import MODELS_DIR

    path = MODELS_DIR / f"{card.id}.json"
    if path.is_file():
        raw = json.loads(path.read_text())
        if raw.get("advisor_id", card.id) == card.id:
            try:
                return DecoderConfig.from_hf({k: v for k, v in raw.items() if not k.startswith("advisor_")})
            except ModelConfigError as err:
                raise ModelConfigError(f"bundled model {card.id} ({path}): {err}") from None
    return DecoderConfig.from_card(card)


def build_causal_lm(
    name_or_path: str,
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    seed: Optional[int] = None,
    load_weights: bool = False,
    attn_implementation: str = "sdpa",
    kernels: str = "torch",
) -> CausalLM:
    """Build a decoder, on the meta device first.

    device="meta" returns it unmaterialised (remembering its seed / weights in `model.init_source`)
    so that `parallelize_model` can shard it first and each rank allocates only its own shard.
    Any other device allocates and fills it now: weights from safetensors when `load_weights`,
    otherwise the deterministic init for `seed` (default 0). `kernels` picks the RMSNorm / SwiGLU /
    RoPE implementation (trainer/fused/ops.py).
    """
    config, weights_dir = resolve_config(name_or_path, need_weights=load_weights)
    config.attn_implementation = attn_implementation
    config.kernels = kernels
    config.validate()
    if load_weights and weights_dir is None:
        raise WeightsNotFoundError(
            f"{name_or_path}: load_weights is set but no model.safetensors or index lies beside its config.json"
        )
    with torch.device("meta"), skip_init():
        model = CausalLM(config)
    model.to(dtype=dtype)
    model.init_source = InitSource(
        seed=DEFAULT_SEED if seed is None else seed,
        weights_path=str(weights_dir) if load_weights else None,
    )
    if str(device) != "meta":
        materialize(model, device)
    return model
