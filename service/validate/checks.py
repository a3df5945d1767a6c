"""Every rule, registered: the layout checks the planner prunes with, and the tables validate runs.

Importing this module imports every rule module, so no caller judges by a partial table because it
happened to import one rule module first.
"""

from __future__ import annotations

from service.facts import Facts, Finding
from service.validate.automodel import mesh_rules, recipe_rules  # noqa: F401  (they register too)
from service.validate.rules import (  # noqa: F401  (they register)
    bridge_peft,
    config_rules,
    data_rules,
    engine,
    layout,
    memory_fit,
    output_paths,  # noqa: F401  (it registers)
    packing,
    pipeline,
    pitfalls,
    precision,
    targets,
)
from service.validate.rules.registry import AUTOMODEL_RULES, CONFIG_RULES, LAYOUT_RULES, Rule

__all__ = ["AUTOMODEL_RULES", "CONFIG_RULES", "LAYOUT_RULES", "all_rules", "check_layout"]


def check_layout(facts: Facts) -> list[Finding]:
    """Every layout/batch/hardware rule over one set of facts (the planner's pruning too)."""
    findings = []
    for rule in LAYOUT_RULES:
        violation = rule.check(facts)
        if violation is not None:
            findings.append(rule.finding(violation))
    return findings


def all_rules() -> list[Rule]:
    return sorted(LAYOUT_RULES + CONFIG_RULES + AUTOMODEL_RULES, key=lambda r: r.code)
