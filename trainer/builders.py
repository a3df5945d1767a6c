"""Build recipe components from ``_target_`` config sections.

A section such as ``optimizer: {_target_: torch.optim.AdamW, lr: 3e-4}`` names a
callable; its other keys are keyword arguments (the Hydra / NeMo AutoModel
convention). Configs are data: a target is checked against an allow-list of
module prefixes *before anything is imported*, every step of the dotted path
must stay inside the allow-list, and private names are refused. A target
outside it (``os.system``, ``builtins.eval``, ...) is a ConfigError naming the
key, never an import.

No torch import at module level: ``resolve_target`` is also usable by tools
that only validate.
"""

from __future__ import annotations

import importlib
import inspect
import os
import types
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from recipe_index.models import REPO_ID, find_bundled_model, hub_offline
from trainer.config import ALLOWED_TARGET_PREFIXES, MAX_TARGET_CHARS, is_public_dotted_path
from trainer.model_checks import hub_cached
from trainer.overrides import ConfigError, FieldError
from trainer.text import clipped

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def _allowed(dotted: str) -> bool:
    return dotted.startswith(ALLOWED_TARGET_PREFIXES)


def check_target(target: Any, key: str) -> str:
    """Refuse a target outside the allow-list, without importing anything. Returns the target."""
    if not is_public_dotted_path(target):
        raise ConfigError(
            f"{key}._target_: {clipped(repr(target), 80, 60)} is not a dotted Python path like torch.optim.AdamW "
            f"(public names only: no leading underscores; at most {MAX_TARGET_CHARS} characters)"
        )
    if not _allowed(target):
        raise ConfigError(
            f"{key}._target_: {target!r} is outside the allowed module prefixes "
            f"({', '.join(ALLOWED_TARGET_PREFIXES)}); configs are data and may only name those callables"
        )
    return target


def resolve_target(target: Any, key: str) -> Callable[..., Any]:
    """Import and return the callable that ``target`` names, staying inside the allow-list."""
    check_target(target, key)
    parts = target.split(".")
    module: Optional[types.ModuleType] = None
    split = len(parts)
    while split > 1:
        name = ".".join(parts[:split])
        if _allowed(name + "."):
            try:
                module = importlib.import_module(name)
                break
            except ModuleNotFoundError as exc:
                # Only "this prefix is not a module" is expected; a missing dependency is real.
                if exc.name is None or not name.startswith(exc.name):
                    raise ConfigError(f"{key}._target_: importing {name} failed: {exc}") from None
        split -= 1
    if module is None:
        raise ConfigError(f"{key}._target_: no module found for {target!r}")
    obj: Any = module
    for depth in range(split, len(parts)):
        try:
            obj = getattr(obj, parts[depth])
        except AttributeError:
            where = ".".join(parts[:depth])
            raise ConfigError(f"{key}._target_: {where} has no attribute {parts[depth]!r}") from None
        # A module re-exported under an allowed name (e.g. `torch.nn.modules.module.sys`) must not
        # become a way out of the allow-list.
        if isinstance(obj, types.ModuleType) and not _allowed(obj.__name__ + "."):
            raise ConfigError(f"{key}._target_: {target!r} reaches module {obj.__name__}, outside the allow-list")
    if not callable(obj) or isinstance(obj, types.ModuleType):
        raise ConfigError(f"{key}._target_: {target!r} is not callable")
    owner = getattr(obj, "__module__", None) or ""
    if not _allowed(owner + "."):
        raise ConfigError(f"{key}._target_: {target!r} is defined in {owner}, outside the allow-list")
    return obj


def instantiate(section: Mapping[str, Any], key: str, **defaults: Any) -> Any:
    """Call ``section['_target_']`` with the section's other keys as kwargs.

    ``defaults`` fill keyword arguments the section leaves out, but only those the
    callable accepts (so a dataset gets the model's ``vocab_size`` only if it asks).
    Positional arguments are not supported on purpose: a config names every value.
    """
    target = section.get("_target_")
    if target is None:
        raise ConfigError(f"{key}: no _target_ given; name the callable, e.g. {key}._target_: ...")
    fn = resolve_target(target, key)
    kwargs = {k: v for k, v in section.items() if k != "_target_"}
    accepted = _accepted_kwargs(fn)
    for name, value in defaults.items():
        if name not in kwargs and (accepted is None or name in accepted):
            kwargs[name] = value
    if accepted is not None:
        unknown = sorted(set(kwargs) - accepted)
        if unknown:
            raise ConfigError(
                f"{key}: {target} takes no argument(s) {', '.join(unknown)}; "
                f"it accepts {', '.join(sorted(accepted)) or 'none'}"
            )
    try:
        return fn(**kwargs)
    except FieldError as exc:
        raise ConfigError(f"{key}.{exc.field}: {exc.reason}") from None
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{key}: {target}({_fmt_kwargs(kwargs)}) failed: {exc}") from None


def _accepted_kwargs(fn: Callable[..., Any]) -> Optional[set[str]]:
    """Keyword names ``fn`` accepts, or None when it takes **kwargs (anything goes)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    names = set()
    for name, p in sig.parameters.items():
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            return None
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
            names.add(name)
    names.discard("self")
    return names


def _fmt_kwargs(kwargs: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items() if k not in ("params",))


# The index's Megatron-style spelling of a dataset, for the presets the bundled trainer has.
DATASET_PRESETS = {"mock": "trainer.data.MockDataset"}
# Keys of a preset section that describe Megatron's data pipeline and mean nothing here (mock
# samples are full sequences already: "packed").
_PRESET_ONLY_KEYS = ("preset", "packed_sequence")


def dataset_call(section: Any, key: str) -> dict[str, Any]:
    """``{"_target_": ..., **kwargs}`` for a ``dataset``/``validation_dataset`` section
    (trainer.config.DatasetSection): its ``_target_``, or ``preset: mock``."""
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
