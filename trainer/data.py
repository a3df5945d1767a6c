"""Datasets, tokenizers and a data-parallel loader whose position is saved and restored exactly.

Every dataset yields ``{"input_ids": LongTensor[S], "labels": LongTensor[S]}`` with
labels already shifted (``labels[t]`` is the token that follows ``input_ids[t]``, the
contract of trainer.loss.causal_lm_loss) and ``-100`` where a position carries no
loss (prompt tokens, padding).

Sampling over data-parallel ranks interleaves one permutation of the dataset:
rank ``r`` of ``R`` takes positions ``r, r+R, r+2R, ...``. When every rank consumes
``G/R`` samples per step, step ``k`` uses exactly permutation positions
``[kG, (k+1)G)`` whatever R is, so a run on 1 process and a run on 2 see the same
global batches, and the position is one number: samples consumed this epoch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from trainer.contract.builders import resolve_data_path, resolve_tokenizer_path
from trainer.contract.overrides import FieldError

IGNORE_INDEX = -100


# ----------------------------------------------------------------------------- files and tokenizers

class ByteTokenizer:
    """UTF-8 bytes as tokens 0..255, then BOS, EOS and PAD: a tokenizer that needs no files."""

    bos_id, eos_id, pad_id = 256, 257, 258
    vocab_size = 259

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


class JsonTokenizer:
    """A Hugging Face ``tokenizer.json`` through the ``tokenizers`` package.

    Special tokens come from a ``tokenizer_config.json`` beside it when present,
    else from the usual names (Llama 3, Llama 2, Qwen, GPT-2)."""

    # Each list ends with the special of the byte tokenizer.json (trainer/contract/tokenizer_files.py).
    _BOS = ("<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>", "<|byte_bos|>")
    _EOS = ("<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>", "<|im_end|>", "<|byte_eos|>")
    _PAD = ("<pad>", "<|pad|>", "<|finetune_right_pad_id|>", "<|byte_pad|>")

    def __init__(self, path: Path):
        from tokenizers import Tokenizer

        self.path = path
        self._tok = Tokenizer.from_file(str(path))
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        named = self._config_specials(path.parent / "tokenizer_config.json")
        self.bos_id = self._find(named.get("bos_token"), self._BOS)
        self.eos_id = self._find(named.get("eos_token"), self._EOS)
        self.pad_id = self._find(named.get("pad_token"), self._PAD)
        # As a Hugging Face config.json names them: before pad_id falls back below to a token that is no pad.
        self.config_ids = {"bos_token_id": self.bos_id, "eos_token_id": self.eos_id, "pad_token_id": self.pad_id}
        if self.pad_id is None:
            self.pad_id = self.eos_id if self.eos_id is not None else 0

    @staticmethod
    def _config_specials(cfg_path: Path) -> dict[str, str]:
        if not cfg_path.is_file():
            return {}
        data = json.loads(cfg_path.read_text(encoding="utf-8"))
        out = {}
        for key in ("bos_token", "eos_token", "pad_token"):
            value = data.get(key)
            if isinstance(value, dict):
                value = value.get("content")
            if isinstance(value, str):
                out[key] = value
        return out

    def _find(self, preferred: Optional[str], names: Sequence[str]) -> Optional[int]:
        for name in ((preferred,) if preferred else ()) + tuple(names):
            token_id = self._tok.token_to_id(name)
            if token_id is not None:
                return token_id
        return None

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(list(ids))


def load_tokenizer(spec: Optional[str], field: str = "tokenizer"):
    """``"byte"`` (or unset) for the built-in byte tokenizer; else a ``tokenizer.json``, a folder with one,
    or a model whose published tokenizer it is (``builders.resolve_tokenizer_path``)."""
    if spec is None or spec == "byte":
        return ByteTokenizer()
    path = resolve_tokenizer_path(spec, field)
    try:
        return JsonTokenizer(path)
    except Exception as exc:  # the tokenizers package raises its own exception type
        raise FieldError(field, f"{path} is not a readable tokenizer.json: {exc}") from None


def _read_jsonl(path: Path, field: str, keys: Sequence[str]) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise FieldError(field, f"{path}:{lineno}: not valid JSON ({exc.msg}); "
                                        "one JSON object per line") from None
            if not isinstance(row, dict):
                raise FieldError(field, f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
            missing = [k for k in keys if not isinstance(row.get(k), str)]
            if missing:
                raise FieldError(field, f"{path}:{lineno}: missing text field(s) {', '.join(missing)}")
            rows.append(row)
    if not rows:
        raise FieldError(field, f"{path} has no records")
    return rows


def _check_seq_length(seq_length: Any) -> int:
    if not isinstance(seq_length, int) or seq_length < 2:
        raise FieldError("seq_length", f"expected an integer >= 2, got {seq_length!r}; set dataset.seq_length")
    return seq_length


# ----------------------------------------------------------------------------- datasets

class MockDataset(Dataset):
    """Synthetic token sequences for pretraining smoke runs and benchmarks.

    With ``learnable`` (default) each sequence walks one fixed random cycle through
    the vocabulary (a bigram rule ``x[t+1] = next(x[t])``, drawn from ``rule_seed``)
    from a random start, so the loss visibly falls; otherwise tokens are uniform
    noise. Sample ``i`` depends only on ``seed``, ``rule_seed`` and ``i``: a
    validation set with another ``seed`` follows the same rule from other starts.
    """

    def __init__(self, seq_length: int, vocab_size: Optional[int] = None, num_samples: int = 1024,
                 seed: int = 1234, learnable: bool = True, rule_seed: int = 0):
        self.seq_length = _check_seq_length(seq_length)
        if not isinstance(vocab_size, int) or vocab_size < 2:
            raise FieldError("vocab_size", f"expected an integer >= 2, got {vocab_size!r}")
        if not isinstance(num_samples, int) or num_samples < 1:
            raise FieldError("num_samples", f"expected a positive integer, got {num_samples!r}")
        self.vocab_size, self.num_samples, self.seed, self.learnable = vocab_size, num_samples, seed, learnable
        self.max_token_id = vocab_size - 1
        self._cycle = torch.randperm(vocab_size, generator=torch.Generator().manual_seed(rule_seed))

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + int(index))
        if self.learnable:
            start = torch.randint(self.vocab_size, (1,), generator=gen)
            ids = self._cycle[(start + torch.arange(self.seq_length + 1)) % self.vocab_size]
        else:
            ids = torch.randint(self.vocab_size, (self.seq_length + 1,), generator=gen)
        return {"input_ids": ids[:-1], "labels": ids[1:]}


class JsonlPretrainDataset(Dataset):
    """JSON lines with a text field, tokenized, joined with EOS and packed into ``seq_length`` chunks.

    Sample ``i`` reads tokens ``[iS, (i+1)S]`` (S+1 tokens: inputs and their shifted
    labels overlap by one, as in Megatron's GPT dataset); a tail shorter than that is dropped.
    """

    def __init__(self, path: str, seq_length: int, tokenizer: Optional[str] = "byte", text_key: str = "text"):
        self.seq_length = _check_seq_length(seq_length)
        self.tokenizer = load_tokenizer(tokenizer)
        file = resolve_data_path(path)
        stream: list[int] = []
        for row in _read_jsonl(file, "path", [text_key]):
            if self.tokenizer.bos_id is not None:
                stream.append(self.tokenizer.bos_id)
            stream.extend(self.tokenizer.encode(row[text_key]))
            if self.tokenizer.eos_id is not None:
                stream.append(self.tokenizer.eos_id)
        count = (len(stream) - 1) // self.seq_length
        if count <= 0:
            raise FieldError("path", f"{file} has {len(stream)} tokens, fewer than one sequence of "
                                     f"{self.seq_length} + 1; add text or lower dataset.seq_length")
        self._tokens = torch.tensor(stream[: count * self.seq_length + 1], dtype=torch.long)
        self._count = count
        self.sample_unit = f"sequences of {self.seq_length} tokens packed from {file.name}"  # error messages
        self.max_token_id = int(self._tokens.max())

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        start = int(index) * self.seq_length
        window = self._tokens[start: start + self.seq_length + 1]
        return {"input_ids": window[:-1], "labels": window[1:]}


class JsonlSFTDataset(Dataset):
    """JSON lines with a prompt and an answer; only the answer (and its EOS) carries loss.

    ``[BOS] prompt answer [EOS]`` is cut to ``seq_length + 1`` tokens and padded; the
    label of position t is token t+1, or ``-100`` where token t+1 is part of BOS/prompt
    or padding, so the loss covers exactly the answer and its EOS.
    """

    def __init__(self, path: str, seq_length: int, tokenizer: Optional[str] = "byte",
                 prompt_key: str = "prompt", answer_key: str = "answer"):
        self.seq_length = _check_seq_length(seq_length)
        self.tokenizer = tok = load_tokenizer(tokenizer)
        file = resolve_data_path(path)
        inputs, labels = [], []
        for row in _read_jsonl(file, "path", [prompt_key, answer_key]):
            prompt = ([tok.bos_id] if tok.bos_id is not None else []) + tok.encode(row[prompt_key])
            answer = tok.encode(row[answer_key]) + ([tok.eos_id] if tok.eos_id is not None else [])
            full = (prompt + answer)[: self.seq_length + 1]
            targets = ([IGNORE_INDEX] * len(prompt) + answer)[1: self.seq_length + 1]
            ids = full[:-1]
            pad = self.seq_length - len(ids)
            inputs.append(ids + [tok.pad_id] * pad)
            labels.append(targets + [IGNORE_INDEX] * (self.seq_length - len(targets)))
        self._inputs = torch.tensor(inputs, dtype=torch.long)
        self._labels = torch.tensor(labels, dtype=torch.long)
        self.max_token_id = int(self._inputs.max())
        if not bool((self._labels != IGNORE_INDEX).any()):
            raise FieldError("seq_length", f"every answer in {file} is cut off at {self.seq_length} tokens; "
                                           "raise dataset.seq_length")

    def __len__(self) -> int:
        return self._inputs.shape[0]

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self._inputs[index], "labels": self._labels[index]}


# ----------------------------------------------------------------------------- sampling and loading

class ResumableDistributedSampler(Sampler[int]):
    """One (optionally shuffled) permutation per epoch, interleaved over ranks, starting at ``start``.

    The permutation is truncated to a multiple of ``num_replicas`` so every rank
    yields the same count (collectives would hang otherwise).
    """

    def __init__(self, num_samples: int, num_replicas: int, rank: int, *, shuffle: bool, seed: int):
        self.num_samples, self.num_replicas, self.rank = num_samples, num_replicas, rank
        self.shuffle, self.seed = shuffle, seed
        self.epoch = 0
        self.start = 0  # samples of this rank already consumed this epoch

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_samples // self.num_replicas - self.start

    def __iter__(self) -> Iterator[int]:
        if self.shuffle:
            order = torch.randperm(self.num_samples, generator=torch.Generator().manual_seed(self.seed + self.epoch))
        else:
            order = torch.arange(self.num_samples)
        usable = self.num_samples - self.num_samples % self.num_replicas
        local = order[self.rank:usable:self.num_replicas]
        return iter(local[self.start:].tolist())


def collate(samples: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {key: torch.stack([s[key] for s in samples]) for key in samples[0]}


class ResumableDataLoader:
    """Batches of ``batch_size`` for one data-parallel rank; ``state_dict`` is the exact position.

    The position is kept as *global* samples consumed this epoch, so it also
    restores onto a different data-parallel size, as long as it divides.
    """

    def __init__(self, dataset: Dataset, *, batch_size: int, dp_size: int, dp_rank: int, shuffle: bool,
                 seed: int, num_workers: int = 0, pin_memory: bool = False):
        self.dataset, self.batch_size, self.dp_size = dataset, batch_size, dp_size
        self.sampler = ResumableDistributedSampler(len(dataset), dp_size, dp_rank, shuffle=shuffle, seed=seed)
        self.num_workers, self.pin_memory = num_workers, pin_memory
        self.epoch = 0
        self.batches_yielded = 0

    def __len__(self) -> int:
        """Full batches per epoch on this rank."""
        return (len(self.dataset) // self.dp_size) // self.batch_size

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch, self.batches_yielded = epoch, 0

    def rewind(self) -> None:
        """Back to the start of the current epoch (a validation pass reads the whole set each time)."""
        self.batches_yielded = 0

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        self.sampler.set_epoch(self.epoch)
        self.sampler.start = self.batches_yielded * self.batch_size
        # A generator of its own: a DataLoader iterator otherwise draws its base seed from the global RNG,
        # which LoRA's dropout also draws from, so a resume or a validation pass (one more iterator)
        # would change the dropout masks. The sampler orders the data; this seed only seeds the workers.
        generator = torch.Generator().manual_seed(self.epoch)
        loader = DataLoader(self.dataset, batch_size=self.batch_size, sampler=self.sampler, drop_last=True,
                            collate_fn=collate, num_workers=self.num_workers, pin_memory=self.pin_memory,
                            generator=generator)
        for batch in loader:
            self.batches_yielded += 1
            yield batch

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "global_samples": self.batches_yielded * self.batch_size * self.dp_size}

    def load_state_dict(self, state: dict[str, int]) -> None:
        per_batch = self.batch_size * self.dp_size
        if state["global_samples"] % per_batch:
            raise ValueError(f"the checkpoint's data position ({state['global_samples']} samples) does not fall on "
                             f"a batch boundary of {per_batch} samples (local batch x DP); resume with the "
                             "local batch size and data-parallel size of the saved run")
        self.epoch = int(state["epoch"])
        self.batches_yielded = state["global_samples"] // per_batch
