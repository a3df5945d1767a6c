"""The tokenizer a run's data was encoded with, saved beside its consolidated weights.

A consolidated checkpoint is a Hugging Face model folder: fine-tuning from it (``model.pretrained_model_name_or_path:
<folder>``, ``dataset.tokenizer: <folder>``) and ``AutoTokenizer.from_pretrained(<folder>)`` need the ids the
weights were trained on. A run on the byte tokenizer gets an equivalent ``tokenizer.json`` (a byte-level BPE with
no merges: byte b is id b, then BOS, EOS and PAD as trainer.data.ByteTokenizer numbers them, under names text is
unlikely to spell: a tokenizers special token is split out of any text that does); a run on a model's
``tokenizer.json`` gets a copy of it (and of its ``tokenizer_config.json``), from the Hugging Face cache where the
run's workers put it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from trainer.contract.builders import cached_tokenizer_path, resolve_tokenizer_path
from trainer.contract.overrides import FieldError
from trainer.contract.safe_paths import copy_no_follow, write_text_no_follow

# Datasets that encode text with ``tokenizer`` (the others, such as MockDataset, hold token ids already).
TOKENIZING_DATASETS = ("trainer.data.JsonlPretrainDataset", "trainer.data.JsonlSFTDataset")
_WARNED: set[str] = set()  # specs whose missing tokenizer this process has warned about
BYTE_SPECIALS = ("<|byte_bos|>", "<|byte_eos|>", "<|byte_pad|>")  # ids 256, 257, 258: ByteTokenizer's bos, eos, pad


def training_tokenizer(dataset: Any) -> Optional[str]:
    """The tokenizer spec the training data was encoded with ("byte" by default), or None for data that is
    not text."""
    if dataset is None or dataset.target not in TOKENIZING_DATASETS:
        return None
    return dataset.kwargs().get("tokenizer") or "byte"


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte, which the ByteLevel pre-tokenizer maps bytes to."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + n) for n, b in enumerate(extra)}}


def byte_tokenizer_json() -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    chars = _bytes_to_unicode()
    tokenizer = Tokenizer(models.BPE(vocab={chars[b]: b for b in range(256)}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(BYTE_SPECIALS))
    return tokenizer.to_str()


def save_tokenizer(spec: Optional[str], folder: Path) -> Optional[str]:
    """Write the tokenizer of ``spec`` (see :func:`training_tokenizer`) into ``folder``; nothing for None. Returns
    a warning when a model's tokenizer cannot be found without the network."""
    if spec is None:
        return None
    if spec == "byte":
        write_text_no_follow(folder / "tokenizer.json", byte_tokenizer_json())
        bos, eos, pad = BYTE_SPECIALS
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": eos, "pad_token": pad}
        write_text_no_follow(folder / "tokenizer_config.json", json.dumps(config, indent=2) + "\n")
        return None
    # A file or folder as named; a model's from the cache its dataset filled (no network call at every save).
    try:
        source = resolve_tokenizer_path(spec, "dataset.tokenizer", fetch=False) or cached_tokenizer_path(spec)
    except FieldError:  # offline, the cache lacks it (the dataset found it where no longer is)
        source = None
    if source is None:
        if spec in _WARNED:
            return None
        _WARNED.add(spec)  # once per run, not at every save
        return (f"warning: {spec}'s tokenizer.json is not in the Hugging Face cache, so {folder} holds no "
                "tokenizer; name it with dataset.tokenizer when fine-tuning from this checkpoint")
    copy_no_follow(source, folder / "tokenizer.json")
    if (source.parent / "tokenizer_config.json").is_file():
        copy_no_follow(source.parent / "tokenizer_config.json", folder / "tokenizer_config.json")
    return None
