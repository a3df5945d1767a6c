"""Accepting findings, as ruff and mypy users do: ``--ignore CODE``, an inline
``# recipe-advisor: ignore[RA-L011] <reason>`` on the finding's line (a reason is required), and a baseline file
(``--write-baseline FILE`` records today's findings, ``--baseline FILE`` accepts those and fails only on new ones).
A suppressed finding stays in JSON and SARIF (SARIF ``suppressions``), and leaves text, GitHub and the counts.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from service.facts import Finding

if TYPE_CHECKING:  # pragma: no cover
    from service.validate.report import FileReport

INLINE = re.compile(r"#\s*recipe-advisor:\s*ignore\[([^\]]*)\](.*)$")
BASELINE_VERSION = 1


def apply_inline(findings: list[Finding], text: str) -> list[Finding]:
    """Mark the findings an ignore comment on their line names; a comment without a reason is not applied and
    is itself a finding (RA-F002)."""
    comments: dict[int, tuple[set[str], str]] = {}
    extra: list[Finding] = []
    if "recipe-advisor:" not in text:
        return findings
    for number, line in enumerate(text.splitlines(), start=1):
        match = INLINE.search(line)
        if match is None:
            continue
        codes = {c.strip() for c in match.group(1).split(",") if c.strip()}
        reason = match.group(2).strip()
        if not codes or not reason:
            extra.append(Finding(code="RA-F002", severity="warning", line=number, column=match.start() + 1,
                                 message="an ignore comment needs the codes and a reason; it is not applied",
                                 fix="write `# recipe-advisor: ignore[RA-L011] <why this is accepted>`"))
            continue
        comments[number] = (codes, reason)
    for finding in findings:
        codes, reason = comments.get(finding.line or -1, (set(), ""))
        if finding.code in codes:
            finding.suppressed = {"kind": "inSource", "justification": reason}
    return findings + extra


def apply_ignore(reports: Iterable["FileReport"], codes: Iterable[str]) -> None:
    wanted = set(codes)
    for report in reports:
        for finding in report.findings:
            if finding.code in wanted and not finding.suppressed:
                finding.suppressed = {"kind": "external", "justification": f"--ignore {finding.code}"}


def fingerprint(path: str, finding: Finding) -> str:
    """What a finding is, not where: its file, code, key and message with the numbers in it kept (a changed
    value is a new finding), the line left out (a moved line is the same one)."""
    text = "\0".join((Path(path).as_posix(), finding.code, finding.key or "", finding.message))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def write_baseline(reports: Iterable["FileReport"], path: str) -> int:
    prints = sorted({fingerprint(r.path, f) for r in reports for f in r.findings
                     if f.severity in ("error", "warning") and not f.suppressed})
    Path(path).write_text(json.dumps({"version": BASELINE_VERSION, "findings": prints}, indent=1) + "\n")
    return len(prints)


def read_baseline(path: str) -> set[str]:
    """The fingerprints of a baseline file; ValueError naming the file when it is not one."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"--baseline {path}: cannot read it as a baseline ({exc}); write one with --write-baseline")
    if not isinstance(data, dict) or not isinstance(data.get("findings"), list):
        raise ValueError(f"--baseline {path}: not a baseline file (no findings list); write one with --write-baseline")
    return {str(x) for x in data["findings"]}


def apply_baseline(reports: Iterable["FileReport"], baseline: set[str]) -> None:
    for report in reports:
        for finding in report.findings:
            if not finding.suppressed and fingerprint(report.path, finding) in baseline:
                finding.suppressed = {"kind": "external", "justification": "in the baseline"}
