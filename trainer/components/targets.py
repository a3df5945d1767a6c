"""Import and call what a ``_target_`` section names (``optimizer: {_target_: torch.optim.AdamW, lr: 3e-4}``),
only once the registry (trainer/contract/target_registry.py) lists it for the section. The checks that import
nothing (the registry, dataset sections, data and tokenizer paths) are trainer/contract/builders.py, which the
pre-flight runs first.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Mapping, Optional

from trainer.contract.builders import check_target
from trainer.contract.overrides import ConfigError, FieldError


def resolve_target(target: Any, key: str) -> Callable[..., Any]:
    """Import and return the callable that ``target`` names, once the registry lists it for section ``key``:
    its module (the path up to the last dot) is imported and the name read from it, nothing else."""
    check_target(target, key)
    module_name, _, name = target.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{key}._target_: importing {module_name} failed: {exc}") from None
    obj = getattr(module, name, None)
    if obj is None:  # a name the installed torch does not have yet (torch.optim.Muon before 2.9)
        raise ConfigError(f"{key}._target_: {module_name} has no attribute {name!r} in this install; upgrade the "
                          "package that provides it, or name another registered callable")
    if not callable(obj):
        raise ConfigError(f"{key}._target_: {target!r} is not callable")
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
