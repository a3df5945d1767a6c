"""What recipe components are built from, checked before anything is built: ``_target_`` sections, the
dataset section, data and tokenizer paths.

A section such as ``optimizer: {_target_: torch.optim.AdamW, lr: 3e-4}`` names a
callable; its other keys are keyword arguments (the Hydra / NeMo AutoModel
convention). Configs are data: a target must be one the registry lists for its
section (trainer/contract/target_registry.py), checked *before anything is
imported*. Anything else (``os.system``, ``trainer.contract.atomic_files.write_atomic``,
a registered name in another section) is a ConfigError naming the key and the
registry's nearest names, never an import.

Torch-free: nothing here imports a target. trainer/components/targets.py imports and calls
them, once these checks have passed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from recipe_index.models import REPO_ID, find_bundled_model, hub_offline
from trainer.contract.config import MAX_TARGET_CHARS, is_public_dotted_path
from trainer.contract.model_checks import hub_cached
from trainer.contract.overrides import ConfigError, FieldError
from trainer.contract.target_registry import refusal, registered
from trainer.contract.text import clipped

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def check_target(target: Any, key: str) -> str:
    """Refuse a target the registry does not list for section ``key``, without importing anything. Returns it."""
    if not is_public_dotted_path(target):
        raise ConfigError(
            f"{key}._target_: {clipped(repr(target), 80, 60)} is not a dotted Python path like torch.optim.AdamW "
            f"(public names only: no leading underscores; at most {MAX_TARGET_CHARS} characters)"
        )
    if registered(key, target) is None:
        raise ConfigError(refusal(key, target, key))
    return target


# The index's Megatron-style spelling of a dataset, for the presets the bundled trainer has.
DATASET_PRESETS = {"mock": "trainer.data.MockDataset"}
# Keys of a preset section that describe Megatron's data pipeline and mean nothing here (mock
# samples are full sequences already: "packed").
_PRESET_ONLY_KEYS = ("preset", "packed_sequence")


def dataset_call(section: Any, key: str) -> dict[str, Any]:
    """``{"_target_": ..., **kwargs}`` for a ``dataset``/``validation_dataset`` section
    (trainer.contract.config.DatasetSection): its ``_target_``, or ``preset: mock``."""
    kwargs = section.kwargs()
    if section.seq_length is not None:
        kwargs["seq_length"] = section.seq_length
    if section.target is not None:
        return {"_target_": section.target, **kwargs}
    preset = kwargs.get("preset")
    if preset in DATASET_PRESETS:
        return {"_target_": DATASET_PRESETS[preset],
                **{k: v for k, v in kwargs.items() if k not in _PRESET_ONLY_KEYS}}
    if preset is not None:
        raise ConfigError(
            f"{key}.preset: {preset!r} is a Megatron Bridge dataset; the bundled trainer reads preset: mock or a "
            f"{key}._target_ such as trainer.data.JsonlSFTDataset (prompt/answer JSON lines) or "
            "trainer.data.JsonlPretrainDataset (text JSON lines)"
        )
    raise ConfigError(f"{key}._target_: missing; name a dataset, e.g. trainer.data.MockDataset")


def resolve_data_path(path: Any, field: str = "path") -> Path:
    """An absolute path, or relative to the working directory, else to the project root
    (so bundled recipes can name ``recipe_index/data/...`` from anywhere)."""
    if not isinstance(path, str) or not path:
        raise FieldError(field, f"expected a file path, got {path!r}")
    candidate = Path(path).expanduser()
    tried = [candidate] if candidate.is_absolute() else [Path.cwd() / candidate, PROJECT_ROOT / candidate]
    for option in tried:
        if option.exists():
            return option
    raise FieldError(field, f"file {path!r} not found (looked in {', '.join(str(p) for p in tried)}); "
                            "fix the path or create the file")


def resolve_tokenizer_path(spec: Any, field: str = "tokenizer", *, fetch: bool = True) -> Optional[Path]:
    """The ``tokenizer.json`` a tokenizer setting names: the file, a folder holding one, or a model (a
    bundled id or alias with published weights, or a Hugging Face repo id) whose tokenizer is read from
    the Hugging Face cache, fetched there first unless HF_HUB_OFFLINE is set. Fine-tuning published
    weights needs the tokenizer they were trained with: other token ids mean other things to them.
    ``fetch=False`` (the launcher's pre-flight) downloads nothing: online it leaves a model's tokenizer to
    the workers (None); under HF_HUB_OFFLINE it looks a model's up in the cache (a bundled card ships no
    tokenizer either), so a missing one is refused before launch, as the workers would refuse it."""
    try:
        path = resolve_data_path(spec, field)
    except FieldError:
        repo = _model_repo(spec) if isinstance(spec, str) else None
        if repo is None:
            raise
        if fetch or hub_offline():
            return _hub_tokenizer(repo, spec, field)
        return None
    if path.is_dir():
        path = path / "tokenizer.json"
        if not path.is_file():
            raise FieldError(field, f"folder {spec!r} has no tokenizer.json; name the file, a model, or use 'byte'")
    return path


def cached_tokenizer_path(spec: str) -> Optional[Path]:
    """A model's ``tokenizer.json`` as the Hugging Face cache holds it, without any network call (None when
    ``spec`` names no model, or the cache lacks it)."""
    repo = _model_repo(spec)
    return None if repo is None else hub_cached(repo, "tokenizer.json")


def _model_repo(spec: str) -> Optional[str]:
    """The Hugging Face repo whose tokenizer a model name means, or None when ``spec`` names no model."""
    card = find_bundled_model(spec)
    if card is not None:
        return card.hf_id or None
    looks_like_a_file = spec.endswith(".json") or spec.startswith((".", "/", "~"))
    return spec if REPO_ID.match(spec) and not looks_like_a_file else None


def _hub_tokenizer(repo: str, spec: str, field: str) -> Path:
    from huggingface_hub import hf_hub_download

    offline = hub_offline()
    try:
        path = Path(hf_hub_download(repo, "tokenizer.json", local_files_only=offline))
    except Exception as err:  # huggingface_hub raises several unrelated types for "not available"
        first_line = (str(err).splitlines()[0] if str(err) else type(err).__name__).rstrip(".")
        where = "the Hugging Face cache (HF_HUB_OFFLINE is set)" if offline else "the Hugging Face hub"
        raise FieldError(field, f"{spec!r} is no file or folder here, and {repo}'s tokenizer.json is not in {where}: "
                                f"{first_line}. Download it first (huggingface-cli download {repo} tokenizer.json "
                                "tokenizer_config.json), or name a tokenizer.json or its folder") from None
    try:  # its special tokens (BOS, EOS, PAD), which JsonTokenizer reads beside tokenizer.json
        hf_hub_download(repo, "tokenizer_config.json", local_files_only=offline)
    except Exception:  # optional: JsonTokenizer falls back to the usual token names
        pass
    return path
