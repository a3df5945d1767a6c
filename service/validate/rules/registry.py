"""The rule registry: one small function per rule, with a stable code.

A rule function takes the facts it judges and returns ``None`` (fine) or a
``Violation`` (what is wrong, with the numbers, and a concrete fix). The
registry adds the code, the severity and the key; ``recipe-advisor validate --list-rules``
prints the table. ``service.validate.checks`` imports every rule module, so the tables read from
there are whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from service.facts import Finding


@dataclass(frozen=True)
class Violation:
    message: str
    fix: str
    severity: Optional[str] = None  # overrides the rule's default (e.g. a split Megatron accepts)
    key: Optional[str] = None  # overrides the rule's default key


@dataclass(frozen=True)
class Rule:
    code: str
    severity: str
    key: str
    title: str
    source: str
    check: Callable

    def finding(self, violation: Violation) -> Finding:
        return Finding(
            code=self.code,
            severity=violation.severity or self.severity,
            message=violation.message,
            key=violation.key or self.key,
            fix=violation.fix,
        )


LAYOUT_RULES: list[Rule] = []
CONFIG_RULES: list[Rule] = []


def _register(table: list[Rule], code: str, severity: str, key: str, title: str, source: str):
    def decorate(func: Callable) -> Callable:
        if any(rule.code == code for rule in LAYOUT_RULES + CONFIG_RULES):
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
