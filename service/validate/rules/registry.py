"""The rule registry: one small function per rule, with a stable code.

A rule function takes the facts it judges and returns ``None`` (fine) or a
``Violation`` (what is wrong, with the numbers, and a concrete fix). The
registry adds the code, the severity and the key; ``recipe-advisor validate --list-rules``
prints the table. ``service.validate.checks`` imports every rule module, so the tables read from
there are whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Union

from service.facts import Finding


@dataclass(frozen=True)
class Violation:
    message: str
    # A callable for a fix that costs a search (did you mean): validate calls it only for the findings it lists,
    # so a file of 10,000 unknown keys searches for the 100 shown.
    fix: Union[str, Callable[[], str]]
    severity: Optional[str] = None  # overrides the rule's default (e.g. a split Megatron accepts)
    key: Optional[str] = None  # overrides the rule's default key
    at: Optional[str] = None  # the key whose line to point at while ``key`` is not written yet (Finding.at)


@dataclass(frozen=True)
class Rule:
    code: str
    severity: str
    key: str
    title: str
    source: str
    check: Callable

    def finding(self, violation: Violation) -> Finding:
        finding, deferred_fix = self.finding_with_deferred_fix(violation)
        if deferred_fix is not None:
            finding.fix = deferred_fix()
        return finding

    def finding_with_deferred_fix(self, violation: Violation) -> tuple[Finding, Optional[Callable[[], str]]]:
        """The finding, and the call that writes its fix when the violation deferred it (None otherwise)."""
        deferred = violation.fix if callable(violation.fix) else None
        return Finding(
            code=self.code,
            severity=violation.severity or self.severity,
            message=violation.message,
            key=violation.key or self.key,
            fix=None if deferred else violation.fix,
            at=violation.at,
        ), deferred


LAYOUT_RULES: list[Rule] = []
CONFIG_RULES: list[Rule] = []
AUTOMODEL_RULES: list[Rule] = []  # over an AutoModel recipe (service/validate/automodel)


def _register(table: list[Rule], code: str, severity: str, key: str, title: str, source: str):
    def decorate(func: Callable) -> Callable:
        if any(rule.code == code for rule in LAYOUT_RULES + CONFIG_RULES + AUTOMODEL_RULES):
            raise ValueError(f"rule code {code} registered twice")
        table.append(Rule(code, severity, key, title, source, func))
        return func

    return decorate


def layout_rule(code: str, severity: str, key: str, title: str, source: str):
    """A rule over ``Facts`` (layout, model, hardware, batch): shared by validate and the planner."""
    return _register(LAYOUT_RULES, code, severity, key, title, source)


def config_rule(code: str, severity: str, key: str, title: str, source: str):
    """A rule over a whole parsed config (``ConfigView``): validate only."""
    return _register(CONFIG_RULES, code, severity, key, title, source)


def automodel_rule(code: str, severity: str, key: str, title: str, source: str):
    """A rule over an AutoModel recipe (``service.validate.automodel.view.RecipeView``): validate only."""
    return _register(AUTOMODEL_RULES, code, severity, key, title, source)
