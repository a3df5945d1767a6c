"""`_target_` checks without importing anything.

A config names callables; validating or serving it must never import or call
one. Targets outside the allow-list are findings. For allowed targets the
keyword names are checked against the callable's signature, read from the
module's *source* with ``ast`` (as ``tune validate`` checks kwargs, but
without executing the module), so validate stays torch-free and safe.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from dataclasses import dataclass
from difflib import get_close_matches
from functools import lru_cache
from pathlib import Path
from typing import Optional

ALLOWED_PREFIXES = ("torch.optim.", "torch.nn.", "trainer.")
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
_MAX_HOPS = 8


@dataclass(frozen=True)
class Signature:
    names: frozenset[str]
    accepts_any: bool  # **kwargs, or a signature we could not read statically


ANY = Signature(frozenset(), True)


class TargetNotFound(LookupError):
    pass


def is_allowed(target: str) -> bool:
    return bool(_DOTTED.match(target)) and target.startswith(ALLOWED_PREFIXES)


def _module_file(module: str) -> Optional[Path]:
    """The source file of a module, found on disk without importing it or its parents."""
    top, *rest = module.split(".")
    spec = importlib.util.find_spec(top)  # a top-level lookup imports nothing
    if spec is None:
        return None
    if spec.submodule_search_locations:
        base = Path(list(spec.submodule_search_locations)[0])
    elif spec.origin and not rest:
        return Path(spec.origin)
    else:
        return None
    path = base.joinpath(*rest)
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    return None


@lru_cache(maxsize=256)
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _function_signature(fn: ast.FunctionDef | ast.AsyncFunctionDef, drop_first: bool) -> Signature:
    args = fn.args
    positional = [a.arg for a in args.posonlyargs + args.args]
    if drop_first and positional:
        positional = positional[1:]
    names = frozenset(positional + [a.arg for a in args.kwonlyargs])
    return Signature(names, args.kwarg is not None)


def _find(module: str, name: str, hops: int) -> Signature:
    if hops > _MAX_HOPS:
        return ANY
    path = _module_file(module)
    if path is None:
        raise TargetNotFound(f"module {module} not found")
    tree = _parse(path)
    is_package = path.name == "__init__.py"
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return _function_signature(node, drop_first=False)
        if isinstance(node, ast.ClassDef) and node.name == name:
            return _class_signature(module, node, hops)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ANY  # an alias or factory result: its signature is not statically known
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            source = _absolute(module, node, is_package)
            for alias in node.names:
                if alias.name == "*" or (alias.asname or alias.name) == name:
                    try:
                        return _find(source, alias.name if alias.name != "*" else name, hops + 1)
                    except TargetNotFound:
                        if alias.name != "*":
                            raise
    raise TargetNotFound(f"{name} is not defined in {module}")


def _absolute(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _class_signature(module: str, cls: ast.ClassDef, hops: int) -> Signature:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            return _function_signature(node, drop_first=True)
    for base in cls.bases:  # inherited __init__
        if isinstance(base, ast.Name):
            try:
                return _find(module, base.id, hops + 1)
            except TargetNotFound:
                return ANY
    if any(isinstance(d, (ast.Name, ast.Attribute, ast.Call)) for d in cls.decorator_list):
        return ANY  # dataclass-style: fields are the signature; accept
    return Signature(frozenset(), False)


@lru_cache(maxsize=512)
def signature_of(target: str) -> Signature:
    """The keyword names a dotted target accepts. Raises TargetNotFound."""
    module, _, name = target.rpartition(".")
    return _find(module, name, 0)


def unknown_kwargs(target: str, kwargs: list[str]) -> list[tuple[str, list[str]]]:
    """(kwarg, suggestions) for each keyword the target does not accept."""
    sig = signature_of(target)
    if sig.accepts_any:
        return []
    return [(k, get_close_matches(k, sorted(sig.names), n=3)) for k in kwargs if k not in sig.names]
