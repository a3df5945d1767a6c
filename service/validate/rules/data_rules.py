"""Rules on the bundled trainer's data: what the tokens mean, and whether the data lasts the run.

Validate never opens a data file a config names (a config is data, and the service must not probe
its own disk for a caller): only what the config itself says is judged, e.g. a MockDataset's sample
count, whose default is read from the trainer's source like any `_target_` signature.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Iterator, Optional

from recipe_index import find_bundled_model
from service.validate.rules.registry import Violation, config_rule
from trainer.contract.source_reader import literal_defaults
from trainer.contract.step_scheduler import run_length, steps_per_epoch
from trainer.contract.tokenizer_files import TOKENIZING_DATASETS  # noqa: F401  (config_build reads it here too)

if TYPE_CHECKING:  # pragma: no cover
    from service.validate.view import ConfigView

MOCK_DATASET = "trainer.data.MockDataset"
DATA_SECTIONS = ("dataset", "validation_dataset")


@config_rule("RA-D001", "warning", "dataset.tokenizer", "published weights are fed their own tokenizer's ids",
             "a model reads token ids as its tokenizer wrote them; trainer/data.py load_tokenizer")
def weights_use_their_tokenizer(view: "ConfigView") -> Iterator[Violation]:
    cfg = view.config
    if cfg is None or cfg.model.kwargs().get("load_weights") is not True:
        return
    model = cfg.model.pretrained_model_name_or_path or "the model"
    if model.endswith(".json"):  # a config.json path: its tokenizer.json lies in the same folder
        model = str(PurePosixPath(model).parent)
    for name in DATA_SECTIONS:
        section = getattr(cfg, name)
        if section is None or not str(section.target or "").startswith(TOKENIZING_DATASETS):
            continue
        tokenizer = section.kwargs().get("tokenizer", "byte")
        if tokenizer in (None, "byte"):
            yield Violation(
                f"{name}.tokenizer is the byte tokenizer while model.load_weights loads {model}'s weights: their "
                "token ids mean other tokens to the model, so the run trains on garbage (the loss still falls)",
                f"set {name}.tokenizer: {model} (its tokenizer.json, read from the same place as the weights) or "
                "a path to the model's tokenizer.json", key=f"{name}.tokenizer")
        elif (other := _other_models_tokenizer(model, tokenizer)) is not None:
            yield Violation(
                f"{name}.tokenizer is {other}, while model.load_weights loads {model}'s weights: the "
                "token ids of one vocabulary mean other tokens to the other model (the loss still falls)",
                f"set {name}.tokenizer: {model}", key=f"{name}.tokenizer")


# Checkpoints of one tokenizer pad the embedding to different sizes (Qwen2.5 0.5B 151,936 rows, 7B
# 152,064: 0.08 %); different tokenizers differ by far more (Llama 3 128,256, Qwen 152,064, Llama 2 32,000).
SAME_VOCABULARY_TOLERANCE = 0.01


def _other_models_tokenizer(model: str, tokenizer) -> Optional[str]:
    """How to name ``tokenizer`` when it is a bundled model's whose vocabulary is not the weights'
    bundled model's, else None. Bundled cards only: validate reads no files and no network."""
    if not isinstance(tokenizer, str):
        return None
    weights, words = find_bundled_model(model), find_bundled_model(tokenizer)
    if weights is None or words is None or weights.id == words.id or not weights.vocab_size or not words.vocab_size:
        return None
    if abs(weights.vocab_size - words.vocab_size) <= SAME_VOCABULARY_TOLERANCE * weights.vocab_size:
        return None
    return (f"{words.id}'s tokenizer (that model's embedding has {words.vocab_size:,} rows, the weights' "
            f"{weights.vocab_size:,})")


def mock_sample_count(target, kwargs: dict) -> Optional[int]:
    """The samples of a data section that builds the trainer's MockDataset (its own ``num_samples`` or the
    class default, read from the trainer's source), or None for other data or an unusable count."""
    if target != MOCK_DATASET:
        return None
    samples = kwargs.get("num_samples", literal_defaults(MOCK_DATASET).get("num_samples"))
    return samples if isinstance(samples, int) and not isinstance(samples, bool) and samples > 0 else None


def _mock_samples(view: "ConfigView") -> Optional[int]:
    section = view.config.dataset
    return mock_sample_count(section.target, section.kwargs())


def _mock_steps_per_epoch(view: "ConfigView") -> Optional[int]:
    """Optimizer steps one pass over the bundled trainer's MockDataset gives, or None (other data, a
    Megatron config, or a layout whose batch does not divide: RA-B001's)."""
    cfg, facts = view.config, view.facts
    if cfg is None or facts is None or cfg.distributed.strategy == "megatron" or not facts.grad_accumulation_steps:
        return None
    samples = _mock_samples(view)
    if samples is None:
        return None
    s = cfg.step_scheduler
    return steps_per_epoch(samples, s.global_batch_size, s.local_batch_size, facts.dp)


@config_rule("RA-D002", "warning", "step_scheduler.max_steps", "the mock data lasts the run",
             "trainer/contract/step_scheduler.py: a run ends at min(max_steps, num_epochs x steps per epoch)")
def mock_data_lasts_the_run(view: "ConfigView") -> Optional[Violation]:
    per_epoch = _mock_steps_per_epoch(view)
    s = view.config.step_scheduler if view.config else None
    if not per_epoch or not s.max_steps:
        return None
    length = run_length(s.max_steps, s.num_epochs, per_epoch)
    if length >= s.max_steps:
        return None
    epochs = -(-s.max_steps // per_epoch)
    warmup = view.config.lr_scheduler.warmup_steps
    peak = (f"; the LR warmup ({warmup} steps) never reaches its peak" if warmup > length else "")
    return Violation(f"the mock data ends the run after {length} steps ({s.num_epochs} epoch(s) of {per_epoch}), "
                     f"not at step_scheduler.max_steps {s.max_steps}{peak}",
                     f"set step_scheduler.num_epochs: {epochs} (the mock data repeats; only throughput is measured), "
                     f"or max_steps: {length}", key="step_scheduler.num_epochs")


@config_rule("RA-D003", "error", "dataset.num_samples", "the mock data holds one global batch",
             "trainer/contract/step_scheduler.py: no optimizer step from the data is refused at start-up")
def mock_data_holds_a_batch(view: "ConfigView") -> Optional[Violation]:
    if _mock_steps_per_epoch(view) != 0:
        return None
    gbs, dp = view.config.step_scheduler.global_batch_size, view.facts.dp
    return Violation(f"dataset.num_samples {_mock_samples(view)} is fewer than one global batch of {gbs} (over {dp} "
                     "data-parallel ranks): the trainer refuses to start", f"set dataset.num_samples to at least {gbs}",
                     key="dataset.num_samples")


@config_rule("RA-D004", "error", "validation_dataset.num_samples",
             "the validation mock data holds a local batch per rank",
             "trainer/recipes/train_ft.py: a validation loader with no batch is refused after the workers start")
def validation_mock_holds_a_batch(view: "ConfigView") -> Optional[Violation]:
    cfg, facts = view.config, view.facts
    if cfg is None or facts is None or cfg.validation_dataset is None or cfg.distributed.strategy == "megatron":
        return None
    section = cfg.validation_dataset
    samples = mock_sample_count(section.target, section.kwargs())
    local, dp = cfg.step_scheduler.local_batch_size, facts.dp
    if samples is None or not dp or samples >= local * dp:
        return None
    return Violation(f"validation_dataset.num_samples {samples} is fewer than one local batch ({local}) per "
                     f"data-parallel rank ({dp}): every rank's validation would be empty, and the trainer refuses "
                     "it once the workers have started", f"set validation_dataset.num_samples to at least {local * dp}",
                     key="validation_dataset.num_samples")


@config_rule("RA-D005", "error", "dataset", "a free-form dataset key is not a misspelt known one",
             "service/configs/dataset_keys.py: this product's keys, Megatron Bridge's dataset configs "
             "(DataloaderConfig, GPTDatasetConfig, GPTSFTDatasetConfig), Megatron-Core's dataset configs")
def dataset_near_miss_keys(view: "ConfigView") -> Iterator[Violation]:
    from service.configs.dataset_keys import PRESET_KEYS
    from service.configs.near_miss import near_miss

    for section in DATA_SECTIONS:
        node = view.doc.data.get(section)
        if not isinstance(node, dict) or node.get("_target_"):  # a _target_'s keywords are its signature's (RA-S002)
            continue
        for key in node:
            known = near_miss(str(key), PRESET_KEYS) if isinstance(key, str) else None
            if known is not None:
                yield Violation(f"{section}.{key} is not a key of this dataset; it reads as `{known}`, so as written "
                                f"the run leaves {known} at its default",
                                f"rename {section}.{key} to {section}.{known}", key=f"{section}.{key}")
