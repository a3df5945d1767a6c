"""Import and call what a ``_target_`` section names (``optimizer: {_target_: torch.optim.AdamW, lr: 3e-4}``),
staying inside the allow-list at every step of the dotted path. The checks that import nothing (the
allow-list, dataset sections, data and tokenizer paths) are trainer/contract/builders.py, which the
pre-flight runs first.
"""

from __future__ import annotations

import importlib
import inspect
import types
from typing import Any, Callable, Mapping, Optional

from trainer.contract.builders import check_target, in_allow_list
from trainer.contract.overrides import ConfigError, FieldError


def resolve_target(target: Any, key: str) -> Callable[..., Any]:
    """Import and return the callable that ``target`` names, staying inside the allow-list."""
    check_target(target, key)
    parts = target.split(".")
    module: Optional[types.ModuleType] = None
    split = len(parts)
    while split > 1:
        name = ".".join(parts[:split])
        if in_allow_list(name + "."):
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
        if isinstance(obj, types.ModuleType) and not in_allow_list(obj.__name__ + "."):
            raise ConfigError(f"{key}._target_: {target!r} reaches module {obj.__name__}, outside the allow-list")
    if not callable(obj) or isinstance(obj, types.ModuleType):
        raise ConfigError(f"{key}._target_: {target!r} is not callable")
    owner = getattr(obj, "__module__", None) or ""
    if not in_allow_list(owner + "."):
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
