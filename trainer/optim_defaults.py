"""The keyword defaults of a torch optimizer class, read from its source without importing torch.

The resume check (trainer/checkpoint.py) treats writing out an optimizer's own default
(``eps: 1.0e-8`` or ``amsgrad: false`` for AdamW) as no change, as ``inspect.signature`` of the
class would say; it also runs in the torch-free pre-flight and ``--dry-run``, so the signature is
read with ``ast`` from the installed torch's files (the way service/rules/targets.py reads them).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path
from typing import Any, Optional

OPTIM_PACKAGE = "torch.optim"


def _module_file(module: str) -> Optional[Path]:
    top, *rest = module.split(".")
    spec = importlib.util.find_spec(top)  # a top-level lookup imports nothing
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]).joinpath(*rest)
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _parse(module: str) -> Optional[ast.Module]:
    path = _module_file(module)
    try:
        return ast.parse(path.read_text(encoding="utf-8")) if path is not None else None
    except (OSError, SyntaxError, ValueError):
        return None


def _find_class(module: str, name: str, hops: int = 2) -> Optional[ast.ClassDef]:
    """The class ``name`` defined in ``module`` or imported into it (``from torch.optim.adamw import AdamW``)."""
    tree = _parse(module)
    if tree is None:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
        if isinstance(node, ast.ImportFrom) and hops and any((a.asname or a.name) == name for a in node.names):
            source = node.module or ""
            if node.level:  # relative: from .adamw import AdamW, inside the package torch.optim
                source = ".".join(module.split(".")[: len(module.split(".")) - node.level + 1] + [source]).strip(".")
            original = next(a.name for a in node.names if (a.asname or a.name) == name)
            return _find_class(source, original, hops - 1)
    return None


@functools.lru_cache(maxsize=32)
def optimizer_defaults(target: Optional[str]) -> dict[str, Any]:
    """``{keyword: default}`` of ``target``'s ``__init__`` for a ``torch.optim`` class, literal defaults
    only; ``{}`` for anything else or a source that cannot be read (then every written key counts)."""
    if not isinstance(target, str) or not target.startswith(OPTIM_PACKAGE + "."):
        return {}
    module, _, name = target.rpartition(".")
    cls = _find_class(module, name)
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None) if cls else None
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
        except ValueError:  # not a literal (a constant's name): that key is compared as written
            continue
    return defaults
