"""The keyword defaults of a torch optimizer class, read from its source without importing torch.

The resume check (trainer/contract/resume_checks.py) treats writing out an optimizer's own default
(``eps: 1.0e-8`` or ``amsgrad: false`` for AdamW) as no change, as ``inspect.signature`` of the
class would say; it also runs in the torch-free pre-flight and ``--dry-run``, so the signature is
read with ``ast`` from the installed torch's files (trainer/contract/source_reader.py, as validate reads targets).
"""

from __future__ import annotations

from typing import Any, Optional

from trainer.contract.source_reader import literal_defaults

OPTIM_PACKAGE = "torch.optim"


def optimizer_defaults(target: Optional[str]) -> dict[str, Any]:
    """``{keyword: default}`` of ``target``'s ``__init__`` for a ``torch.optim`` class, literal defaults
    only; ``{}`` for anything else or a source that cannot be read (then every written key counts)."""
    if not isinstance(target, str) or not target.startswith(OPTIM_PACKAGE + "."):
        return {}
    return literal_defaults(target)
