"""Hugging Face safetensors in and out: `config.json` + `model.safetensors` or shards + index.

The layout is transformers' `save_pretrained`: shards `model-00001-of-0000N.safetensors` and
`model.safetensors.index.json` = {"metadata": {"total_size": bytes}, "weight_map": {name: file}}.
Tied `lm_head.weight` is left out (transformers re-ties it from the embedding; safetensors refuses
two names for one storage).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Mapping

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from trainer.contract.model_checks import INDEX_FILE, SINGLE_FILE, has_hf_weights  # noqa: F401  (re-exported)
from trainer.contract.safe_paths import give_umask_mode, write_text_no_follow
from trainer.data import JsonTokenizer

if TYPE_CHECKING:
    from trainer.models.config import DecoderConfig

DEFAULT_MAX_SHARD_BYTES = 5 * 2**30
_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


class WeightsNotFoundError(FileNotFoundError):
    """No safetensors where a model's weights were expected; the message names the place."""


def save_hf_model(
    state_dict: Mapping[str, torch.Tensor],
    config: "DecoderConfig",
    out_dir: str | os.PathLike,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
) -> list[Path]:
    """Write `config.json` and the weights (one file, or shards + index when over `max_shard_bytes`).

    `state_dict` holds full (unsharded) tensors with Hugging Face names. Returns the files written.
    """
    adapters = [name for name in state_dict if ".lora_A." in name or ".lora_B." in name]
    if adapters:
        raise ValueError(
            f"the state dict holds LoRA tensors ({adapters[0]}, ...): save them with "
            "trainer.components.peft.save_adapter, and pass the base weights or "
            "trainer.components.peft.merged_state_dict here"
        )
    if getattr(config, "moe", None) is not None:
        from trainer.models.moe_names import to_hub_layout

        state_dict = to_hub_layout(state_dict, config)  # per-expert tensors, as transformers loads them
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {
        name: t.detach().to("cpu").contiguous()
        for name, t in state_dict.items()
        if not (config.tie_word_embeddings and name == "lm_head.weight")
    }
    hf_config = config.to_hf()
    float_dtypes = {t.dtype for t in tensors.values() if t.is_floating_point()}
    if len(float_dtypes) == 1 and next(iter(float_dtypes)) in _DTYPE_NAMES:
        hf_config["torch_dtype"] = hf_config["dtype"] = _DTYPE_NAMES[next(iter(float_dtypes))]
    write_text_no_follow(out / "config.json", json.dumps(hf_config, indent=2, sort_keys=True) + "\n")

    shards = _plan_shards(tensors, max_shard_bytes)
    written = [out / "config.json"]
    if len(shards) == 1:
        save_file(shards[0], str(out / SINGLE_FILE), metadata={"format": "pt"})
        give_umask_mode(out / SINGLE_FILE)  # safetensors creates it 0600
        return written + [out / SINGLE_FILE]
    weight_map: dict[str, str] = {}
    for i, shard in enumerate(shards, start=1):
        filename = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(out / filename), metadata={"format": "pt"})
        give_umask_mode(out / filename)
        weight_map.update(dict.fromkeys(shard, filename))
        written.append(out / filename)
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    write_text_no_follow(out / INDEX_FILE, json.dumps(index, indent=2) + "\n")
    return written + [out / INDEX_FILE]


def write_special_token_ids(folder: Path) -> None:
    """Name the BOS, EOS and PAD ids of the tokenizer saved in ``folder`` in its ``config.json``: without an
    ``eos_token_id`` there, ``generate()`` never stops. An EOS list the model's own config gives is kept when it
    holds the tokenizer's EOS (Llama 3 stops on several); a missing special leaves the config's value alone."""
    config_path, tokenizer_path = folder / "config.json", folder / "tokenizer.json"
    if not (config_path.is_file() and tokenizer_path.is_file()):
        return
    config = json.loads(config_path.read_text(encoding="utf-8"))
    for key, token_id in JsonTokenizer(tokenizer_path).config_ids.items():
        kept = key == "eos_token_id" and isinstance(config.get(key), list) and token_id in config[key]
        if token_id is not None and not kept:
            config[key] = token_id
    write_text_no_follow(config_path, json.dumps(config, indent=2, sort_keys=True) + "\n")


def _plan_shards(tensors: dict[str, torch.Tensor], max_shard_bytes: int) -> list[dict[str, torch.Tensor]]:
    """Greedy in name order; a tensor larger than the limit gets a shard of its own."""
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += nbytes
    return shards


class SafetensorsReader:
    """Lazy access to the tensors of a folder, a `.safetensors` file or an index json."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.files: dict[str, Path] = _locate_tensor_files(self.path)

    def keys(self) -> list[str]:
        return list(self.files)

    def __contains__(self, name: str) -> bool:
        return name in self.files

    def get(self, name: str) -> torch.Tensor:
        with safe_open(str(self.files[name]), framework="pt") as f:
            return f.get_tensor(name)

    def items(self) -> Iterator[tuple[str, torch.Tensor]]:
        by_file: dict[Path, list[str]] = {}
        for name, file in self.files.items():
            by_file.setdefault(file, []).append(name)
        for file, names in by_file.items():
            with safe_open(str(file), framework="pt") as f:
                for name in names:
                    yield name, f.get_tensor(name)


def load_hf_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """All tensors (CPU) of a Hugging Face model folder, safetensors file or index json."""
    return dict(SafetensorsReader(path).items())


def _locate_tensor_files(path: Path) -> dict[str, Path]:
    if path.is_dir():
        if (path / INDEX_FILE).is_file():
            path = path / INDEX_FILE
        elif (path / SINGLE_FILE).is_file():
            path = path / SINGLE_FILE
        else:
            candidates = sorted(path.glob("*.safetensors"))
            if len(candidates) != 1:
                raise WeightsNotFoundError(
                    f"{path}: no {SINGLE_FILE} or {INDEX_FILE}; save the model with save_pretrained "
                    "(safetensors) or point at the weights file"
                )
            path = candidates[0]
    if not path.is_file():
        raise WeightsNotFoundError(f"{path}: no such file")
    if path.name.endswith(".json"):
        try:
            weight_map = json.loads(path.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as err:
            raise WeightsNotFoundError(f"{path}: not a safetensors index (needs 'weight_map'): {err}") from None
        files = {name: path.parent / file for name, file in weight_map.items()}
        absent = sorted({str(f) for f in files.values() if not f.is_file()})
        if absent:
            raise WeightsNotFoundError(f"{path}: index names missing shard(s) {', '.join(absent)}")
        return files
    with safe_open(str(path), framework="pt") as f:
        return dict.fromkeys(f.keys(), path)
