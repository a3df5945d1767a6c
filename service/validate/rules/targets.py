"""`_target_` checks without importing anything.

A config names callables; validating or serving it must never import or call
one. Targets the registry does not list for their section are findings
(trainer/contract/target_registry.py). For registered targets the
keyword names are checked against the callable's signature, read from the
module's *source* with ``ast`` (as ``tune validate`` checks kwargs, but
without executing the module), so validate stays torch-free and safe.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from difflib import get_close_matches
from functools import lru_cache

from trainer.contract.source_reader import DefinitionNotFound, find_definition
from trainer.contract.target_registry import registered


@dataclass(frozen=True)
class Signature:
    names: frozenset[str]
    accepts_any: bool  # **kwargs, or a signature we could not read statically


ANY = Signature(frozenset(), True)


TargetNotFound = DefinitionNotFound  # the name validate and `train` catch


def is_registered(section: str, target: object) -> bool:
    """Whether the registry lists ``target`` for ``section`` (a top-level config key): all a config may name."""
    return registered(section, target) is not None


def _function_signature(fn: ast.FunctionDef | ast.AsyncFunctionDef, drop_first: bool) -> Signature:
    args = fn.args
    positional = [a.arg for a in args.posonlyargs + args.args]
    if drop_first and positional:
        positional = positional[1:]
    names = frozenset(positional + [a.arg for a in args.kwonlyargs])
    return Signature(names, args.kwarg is not None)


def _find(module: str, name: str, hops: int) -> Signature:
    found = find_definition(module, name, hops)
    if found is None or isinstance(found.node, ast.Assign):
        return ANY  # too many re-exports, or an alias / factory result: not statically known
    if isinstance(found.node, ast.ClassDef):
        return _class_signature(found.module, found.node, found.hops)
    return _function_signature(found.node, drop_first=False)


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
