"""Defaults that moved between Megatron Bridge releases: which reading of an unset key a config's findings assume.

An unset ``distributed.etp_size`` with EP > 1 meant TP before Megatron Bridge v0.6.0 (commit 6f2f546e,
2026-07-01: Megatron-Core's ModelParallelConfig sets an unset expert_tensor_parallel_size to TP) and means 1
from it (Bridge's ``_set_moe_expert_tensor_parallel_default``). With the version known (``metadata.bridge_version``
or ``--bridge-version``) the rules judge that reading and a finding only it gives says so; unknown, a rule that
only one reading breaks is a warning naming the key that settles it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Optional

from service.facts import Facts, Finding
from service.validate.view import ConfigView
from trainer.contract.bridge_version import ETP_DEFAULT, parse_bridge_version

RunRules = Callable[[Facts], list[Finding]]


def etp_readings(view: ConfigView) -> Optional[tuple[Facts, Facts]]:
    """(before, after) facts for a Megatron config whose unset etp_size the two releases read differently."""
    cfg, facts = view.config, view.facts
    if cfg is None or facts is None:
        return None
    d, written = cfg.distributed, view.doc.data.get("distributed")
    unset = not isinstance(written, dict) or written.get("etp_size") is None  # the schema fills it in: read the file
    if d.strategy != "megatron" or not unset or d.ep_size == 1 or d.tp_size == 1:
        return None
    return replace(facts, layout=facts.layout.with_(etp=d.tp_size)), replace(facts, layout=facts.layout.with_(etp=1))


def _reading(after: bool, tp: int) -> str:
    if after:
        return f"reads the unset etp_size as 1, as {ETP_DEFAULT.since} and later do"
    return f"reads the unset etp_size as TP = {tp}, as Megatron Bridge before {ETP_DEFAULT.since} does"


def layout_findings_by_reading(view: ConfigView, version_flag: Optional[str], run: RunRules,
                               position: Callable[[str], tuple]) -> list[Finding]:
    """The layout rules' findings under the reading the config's Bridge version gives (the flag first), or under
    both readings when the version is unknown (an error only one gives becomes a warning on etp_size)."""
    readings = etp_readings(view)
    if readings is None:
        return run(view.facts)
    before, after = readings
    tp = view.config.distributed.tp_size
    meta = view.config.metadata
    written = version_flag or (meta.bridge_version if meta else None)
    if written is not None:
        is_after = ETP_DEFAULT.applies_after(parse_bridge_version(written))
        chosen, other = (after, before) if is_after else (before, after)
        view.facts = chosen
        others = {f.code for f in run(other)}
        found = run(chosen)
        for finding in found:
            if finding.code not in others:
                finding.message += f" (this {_reading(is_after, tp)}; bridge_version {written})"
        return found
    found_after, found_before = run(after), run(before)
    codes_after, codes_before = {f.code for f in found_after}, {f.code for f in found_before}
    out = [f for f in found_after if f.code in codes_before or f.severity != "error"]
    for is_after, only in ((True, [f for f in found_after if f.code not in codes_before and f.severity == "error"]),
                           (False, [f for f in found_before if f.code not in codes_after and f.severity == "error"])):
        for finding in only:
            out.append(_ambiguous(finding, is_after, tp, position))
    return out


def _ambiguous(finding: Finding, is_after: bool, tp: int, position: Callable[[str], tuple]) -> Finding:
    other = "1" if not is_after else str(tp)
    fix = (f"write the release this runs on as metadata.bridge_version (or pass --bridge-version), or set "
           f"distributed.etp_size explicitly (the reading that holds: {1 if is_after else tp} breaks this; "
           f"{other} does not)" + (f"; under that reading: {finding.fix}" if finding.fix else ""))
    line, column = position("distributed.etp_size")
    return replace(finding, severity="warning", key="distributed.etp_size", line=line, column=column, fix=fix,
                   message=f"if this {_reading(is_after, tp)}: {finding.message}")
