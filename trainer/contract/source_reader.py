"""Definitions in installed Python modules, read from their source with ``ast``; nothing is imported.

Two callers must look at a callable without importing its module: validate checks a config's
``_target_`` keywords (service/validate/rules/targets.py; a config is data, so nothing it names may run),
and the trainer's torch-free pre-flight reads an optimizer's keyword defaults
(trainer/contract/optim_defaults.py). Both follow ``from x import y`` re-exports to where the name is defined.
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional, Union

MAX_HOPS = 8  # re-exports followed before a name counts as unreadable

Node = Union[ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign]


class DefinitionNotFound(LookupError):
    pass


@dataclass(frozen=True)
class Definition:
    module: str  # where the name is defined (after following re-exports)
    node: Node  # an ``ast.Assign`` means an alias or factory result: its signature is not static
    hops: int


def module_file(module: str) -> Optional[Path]:
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
def parse(path: Path) -> ast.Module:
    """The module's syntax tree. Raises OSError, SyntaxError or ValueError for unreadable source."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _absolute(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def find_definition(module: str, name: str, hops: int = 0) -> Optional[Definition]:
    """Where ``module.name`` is defined, following ``from ... import`` chains (``*`` included);
    None past :data:`MAX_HOPS`. Raises DefinitionNotFound, or OSError/SyntaxError/ValueError for
    a module whose source cannot be read."""
    if hops > MAX_HOPS:
        return None
    path = module_file(module)
    if path is None:
        raise DefinitionNotFound(f"module {module} not found")
    tree = parse(path)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return Definition(module, node, hops)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return Definition(module, node, hops)
    is_package = path.name == "__init__.py"
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            source = _absolute(module, node, is_package)
            for alias in node.names:
                if alias.name == "*" or (alias.asname or alias.name) == name:
                    try:
                        return find_definition(source, alias.name if alias.name != "*" else name, hops + 1)
                    except DefinitionNotFound:
                        if alias.name != "*":
                            raise
    raise DefinitionNotFound(f"{name} is not defined in {module}")


@lru_cache(maxsize=64)
def literal_defaults(target: str) -> dict:
    """``{keyword: default}`` of a class's ``__init__`` (``module.Class``), literal defaults only; ``{}``
    when the class or its source cannot be read."""
    module, _, name = target.rpartition(".")
    try:
        found = find_definition(module, name)
    except (DefinitionNotFound, OSError, SyntaxError, ValueError):
        return {}
    if found is None or not isinstance(found.node, ast.ClassDef):
        return {}
    init = next((n for n in found.node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is None:
        return {}
    args = init.args
    positional = args.posonlyargs + args.args
    pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
    defaults = {}
    for arg, node in pairs:
        try:
            defaults[arg.arg] = ast.literal_eval(node)
        except ValueError:  # not a literal (a constant's name): unknown here
            continue
    return defaults
