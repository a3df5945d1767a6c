"""What validate resolves from a config (its model and hardware cards) and how a rule's result becomes findings.

Below both validators (``service.validate.document`` and ``service.validate.automodel.validate``).
"""

from __future__ import annotations

from typing import Callable, Iterable, Optional

from recipe_index.cards import HardwareCard, ModelCard
from service.configs.yamlio import Document
from service.facts import Finding
from service.validate.rules.registry import Violation

ModelResolver = Callable[[str], ModelCard]


def _resolve_model(name: Optional[str], resolver: Optional[ModelResolver] = None
                   ) -> tuple[Optional[ModelCard], Optional[str], bool]:
    """The model card, else what went wrong and whether the name resolved to nothing at all
    (``True``) rather than to a config.json that cannot describe a model (``False``)."""
    if not name:
        return None, None, False
    from recipe_index import resolve_model
    from recipe_index.errors import UnknownModelError

    try:
        return (resolver or resolve_model)(name), None, False
    except UnknownModelError as exc:  # RA-C009 gives its own fix: keep the finding to what went wrong
        hint = f"; closest bundled ids: {', '.join(exc.suggestions)}" if exc.suggestions else ""
        return None, f"{exc.problem}{hint}", True
    except (LookupError, ValueError, OSError) as exc:
        return None, str(exc).rstrip("."), False


def _resolve_hardware(name: str) -> tuple[Optional[HardwareCard], Optional[str]]:
    from recipe_index import get_hardware

    try:
        return get_hardware(name), None
    except (LookupError, ValueError) as exc:
        return None, str(exc)


def _emit(rule, result, doc: Document, deferred_fixes: dict[int, Callable[[], str]]) -> Iterable[Finding]:
    violations = [result] if isinstance(result, Violation) else list(result or [])
    for violation in violations:
        finding, deferred_fix = rule.finding_with_deferred_fix(violation)
        if deferred_fix is not None:
            deferred_fixes[id(finding)] = deferred_fix
        written = finding.at is None or finding.key in doc.positions
        finding.line, finding.column = doc.position(finding.key if written else finding.at)
        yield finding
