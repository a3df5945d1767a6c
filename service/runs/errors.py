"""The one error every way into the store raises on bad input: where (a field, or file:line), why, and the fix."""

from __future__ import annotations

from typing import Optional


class RunInputError(ValueError):
    """A run that cannot be recorded. ``where`` is a record field (``request.model``) or ``file:line``."""

    def __init__(self, where: str, problem: str, fix: Optional[str] = None):
        self.where, self.problem, self.fix = where, problem, fix
        super().__init__(f"{where}: {problem}" + (f"; {fix}" if fix else ""))

    def to_dict(self) -> dict:
        return {"field": self.where, "message": self.problem, "fix": self.fix}


def from_validation(exc, prefix: str = "") -> RunInputError:
    """The first error of a pydantic ValidationError, as the field it names."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "body"
    message = first["msg"].removeprefix("Value error, ")
    return RunInputError(f"{prefix}{where}", message, "fix the value and add the run again")
