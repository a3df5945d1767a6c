"""One file's validation report (service/validate/document.py fills it, service/validate/suppress.py marks it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from service.facts import Finding


@dataclass
class FileReport:
    path: str
    findings: list[Finding] = field(default_factory=list)
    unusable: bool = False

    @property
    def errors(self) -> int:
        return sum(1 + f.not_listed for f in self.findings if f.severity == "error" and not f.suppressed)

    @property
    def warnings(self) -> int:
        return sum(1 + f.not_listed for f in self.findings if f.severity == "warning" and not f.suppressed)

    def to_dict(self) -> dict:
        return {"path": self.path, "findings": [f.to_dict() for f in self.findings]}
