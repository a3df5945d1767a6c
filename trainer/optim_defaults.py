"""The keyword defaults of a torch optimizer class, read from its source without importing torch.

The resume check (trainer/checkpoint.py) treats writing out an optimizer's own default
(``eps: 1.0e-8`` or ``amsgrad: false`` for AdamW) as no change, as ``inspect.signature`` of the
class would say; it also runs in the torch-free pre-flight and ``--dry-run``, so the signature is
read with ``ast`` from the installed torch's files (trainer/source_reader.py, as validate reads targets).
"""

from __future__ import annotations

import ast
import functools
from typing import Any, Optional

from trainer.source_reader import DefinitionNotFound, find_definition

OPTIM_PACKAGE = "torch.optim"


def _init_of(target: str) -> Optional[ast.FunctionDef]:
    module, _, name = target.rpartition(".")
    try:
        found = find_definition(module, name)
    except (DefinitionNotFound, OSError, SyntaxError, ValueError):
        return None
    if found is None or not isinstance(found.node, ast.ClassDef):
        return None
    return next((n for n in found.node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)


@functools.lru_cache(maxsize=32)
def optimizer_defaults(target: Optional[str]) -> dict[str, Any]:
    """``{keyword: default}`` of ``target``'s ``__init__`` for a ``torch.optim`` class, literal defaults
    only; ``{}`` for anything else or a source that cannot be read (then every written key counts)."""
    if not isinstance(target, str) or not target.startswith(OPTIM_PACKAGE + "."):
        return {}
    init = _init_of(target)
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
