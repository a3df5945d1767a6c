"""`recipe-advisor validate PATH...`: the rules, for CI. Exit 0 clean/warnings, 1 errors, 2 unusable input."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional
from urllib.parse import quote

from service.configs.yamlio import YamlError, read_stdin
from service.facts import Finding
from service.validate.automodel.dialect import AUTO, DIALECTS
from service.validate.document import (
    BadArgument,
    FileReport,
    check_hardware_argument,
    config_json_resolver,
    expand_paths,
    unusable_finding,
    validate_file,
    validate_text,
)
from service.validate.suppress import apply_baseline, apply_ignore, read_baseline, write_baseline
from trainer.contract.text import one_line

EXIT_OK, EXIT_ERRORS, EXIT_UNUSABLE = 0, 1, 2


def add_parser(subparsers, name: str) -> None:
    p = subparsers.add_parser(name, help="check recipe/config YAML files (folders recurse)",
                              description="Check config files with the same rules the planner uses. "
                                          "Exit 0: clean or warnings only; 1: errors; 2: unusable input.")
    p.add_argument("paths", nargs="*", metavar="PATH", help="YAML files or folders; - reads one config from stdin")
    p.add_argument("--gpus", type=int, help="GPUs per node, as hardware.gpus_per_node (the file's num_nodes is "
                                            "kept unless --nodes is given; a count above the node size that fills "
                                            "whole nodes is the total)")
    p.add_argument("--gpu-type", help="hardware card, e.g. h100 (else hardware.gpu_type)")
    p.add_argument("--nodes", type=int, help="number of nodes")
    p.add_argument("--dialect", choices=list(DIALECTS), default=AUTO,
                   help="auto: tell each file's dialect from it (default); recipe-advisor: this product's configs; "
                        "automodel: NeMo AutoModel recipes (judged at --gpus/--nodes, else the GPUs their header "
                        "names, else 8)")
    p.add_argument("--bridge-version", help="the Megatron Bridge release (0.5.1) or checkout date (2026-07-01) whose "
                                            "defaults to assume, over the file's metadata.bridge_version (an unset "
                                            "etp_size means TP before v0.6.0, 1 from it)")
    p.add_argument("--automodel-version", help="the NeMo AutoModel release (0.4.0) or checkout date (2026-05-01) "
                                               "whose schema an AutoModel recipe is judged by, over its "
                                               "metadata.automodel_version (sections, keys and _target_ names)")
    p.add_argument("--model-config", metavar="CONFIG_JSON",
                   help="read the model's architecture from this config.json (file or folder), offline, whatever "
                        "name the config gives its model: for a model the index has no card for")
    p.add_argument("--ignore", action="append", default=[], metavar="CODE",
                   help="accept every finding of this code (repeatable, or comma-separated); inline, on a finding's "
                        "line: `# recipe-advisor: ignore[RA-L011] <reason>`")
    p.add_argument("--baseline", metavar="FILE", help="accept the findings recorded in this baseline file; fail "
                                                      "only on new ones")
    p.add_argument("--write-baseline", metavar="FILE", help="record today's errors and warnings in FILE and exit 0")
    p.add_argument("--format", choices=["text", "json", "github", "sarif"], default="text")
    p.add_argument("--list-rules", action="store_true", help="print the rule table and exit")
    p.set_defaults(func=run)


STDIN = "-"  # `cat c.yaml | recipe-advisor validate -`, as CI steps pipe a generated config


def validate_stdin(**kwargs) -> FileReport:
    """The config piped in, under the same size limit as a file (read no further than it)."""
    try:
        return validate_text(read_stdin(), "<stdin>", **kwargs)
    except YamlError as err:
        return FileReport(path="<stdin>", findings=[unusable_finding(err)], unusable=True)


def summary(reports: list[FileReport]) -> dict:
    return {"files": len(reports), "errors": sum(r.errors for r in reports),
            "warnings": sum(r.warnings for r in reports)}


def format_text(reports: list[FileReport]) -> str:
    lines = []
    for report in reports:
        for f in report.findings:
            if f.suppressed:
                continue
            where = f"{report.path}:{f.line or 1}:{f.column or 1}"
            fix = f" (fix: {f.fix})" if f.fix else ""
            lines.append(one_line(f"{where}: {f.code} {f.severity}: {f.message}{fix}"))
    s = summary(reports)
    lines.append(f"{s['files']} file(s): {s['errors']} error(s), {s['warnings']} warning(s)")
    return "\n".join(lines)


def _escape_gh(value: str, prop: bool = False) -> str:
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return value.replace(":", "%3A").replace(",", "%2C") if prop else value


def format_github(reports: list[FileReport]) -> str:
    level = {"error": "error", "warning": "warning", "info": "notice"}
    lines = []
    for report in reports:
        for f in report.findings:
            if f.suppressed:
                continue
            props = f"file={_escape_gh(report.path, True)},line={f.line or 1},col={f.column or 1}," \
                    f"title={_escape_gh(f.code, True)}"
            text = f.message + (f" (fix: {f.fix})" if f.fix else "")
            lines.append(f"::{level[f.severity]} {props}::{_escape_gh(text)}")
    return "\n".join(lines)


def format_sarif(reports: list[FileReport]) -> dict:
    level = {"error": "error", "warning": "warning", "info": "note"}
    rules = [{"id": r["code"], "name": r["name"], "shortDescription": {"text": r["title"]},
              "help": {"text": r["source"]}} for r in rule_list()]
    results = []
    for report in reports:
        for f in report.findings:
            results.append({
                "ruleId": f.code, "level": level[f.severity],
                "message": {"text": f.text},
                "locations": [{"physicalLocation": {
                    "artifactLocation": {"uri": _uri(report.path)},
                    "region": {"startLine": f.line or 1, "startColumn": f.column or 1}}}],
            } | ({"suppressions": [f.suppressed]} if f.suppressed else {}))
    return {"$schema": "https://json.schemastore.org/sarif-2.1.0.json", "version": "2.1.0",
            "runs": [{"tool": {"driver": {"name": "recipe-advisor", "rules": rules}}, "results": results}]}


def _read_baseline(path: Optional[str]) -> set[str]:
    if path is None:
        return set()
    try:
        return read_baseline(path)
    except ValueError as err:
        raise BadArgument(str(err)) from None


def check_model_config(path: Optional[str]) -> None:
    from recipe_index.models import resolve_model

    if path is None:
        return
    if not Path(path).exists():
        raise BadArgument(f"--model-config {path}: no such file or folder (give a config.json or its folder)")
    try:
        resolve_model(path)
    except (LookupError, ValueError, OSError) as err:
        raise BadArgument(f"--model-config {path}: {err}") from None


def check_automodel_version(version: Optional[str]) -> None:
    from service.validate.automodel.versions import schema

    if version is not None:
        try:
            schema().judged(version)
        except ValueError as err:
            raise BadArgument(f"--automodel-version: {err}") from None


def check_bridge_version(version: Optional[str]) -> None:
    from trainer.contract.bridge_version import parse_bridge_version

    if version is not None:
        try:
            parse_bridge_version(version)
        except ValueError as err:
            raise BadArgument(f"--bridge-version: {err}") from None


def check_counts(gpus: Optional[int], nodes: Optional[int]) -> None:
    """--gpus and --nodes within 1 and the bounds plan, recommend and the API share (service.request.LIMITS);
    BadArgument naming the flag otherwise."""
    if gpus is None and nodes is None:
        return
    from service.request import LIMITS  # only when given: validate alone stays light

    for flag, value in (("--gpus", gpus), ("--nodes", nodes)):
        limit = LIMITS[flag[2:]]
        if value is not None and not 1 <= value <= limit:
            raise BadArgument(f"{flag}: expected an integer from 1 to {limit:,}, got {value}")


def _uri(path: str) -> str:
    """A SARIF artifact URI: a relative path percent-encoded (code scanning resolves it against the
    repository), an absolute one as a file:// URI."""
    return Path(path).as_uri() if Path(path).is_absolute() else quote(path.replace(os.sep, "/"))


# Not a rule function: the file could not be read as a config at all (unusable input, exit 2).
FILE_RULE = {"code": "RA-F001", "severity": "error", "key": None, "name": "readable_config",
             "title": "the file is one readable YAML config within the size, depth and alias limits",
             "source": "service/configs/yamlio.py and trainer/contract/yaml_limits.py"}


def rule_list() -> list[dict]:
    """Every code validate can report, with its default severity, key, title and source."""
    from service.validate.checks import all_rules

    return sorted([FILE_RULE] + [{"code": r.code, "severity": r.severity, "key": r.key or None,
                                  "name": r.check.__name__, "title": r.title, "source": r.source}
                                 for r in all_rules()], key=lambda r: r["code"])


def rule_table() -> str:
    rows = [f"{r['code']:8} {r['severity']:8} {r['key'] or '-':38} {r['title']}" for r in rule_list()]
    return "\n".join(["code     severity key                                    rule"] + rows)


def _skipped(hidden: list[str]) -> str:
    if not hidden:
        return ""
    shown = ", ".join(hidden[:3]) + (f" and {len(hidden) - 3} more" if len(hidden) > 3 else "")
    return f" (hidden folders are skipped: {shown})"


def run(args) -> int:
    if args.list_rules:
        print(json.dumps(rule_list(), indent=2) if args.format == "json" else rule_table())
        return EXIT_OK
    if not args.paths:
        print("recipe-advisor validate: give at least one file or folder", file=sys.stderr)
        return EXIT_UNUSABLE
    if any(not path.strip() for path in args.paths):  # Path("") is the working folder: it would check all of it
        print("recipe-advisor validate: an empty path (an unset variable?); name a file or folder, or . for this "
              "folder", file=sys.stderr)
        return EXIT_UNUSABLE
    try:
        check_hardware_argument(args.gpu_type)
        check_counts(args.gpus, args.nodes)
        check_bridge_version(args.bridge_version)
        check_automodel_version(args.automodel_version)
        check_model_config(args.model_config)
        baseline = _read_baseline(args.baseline)
    except BadArgument as err:
        print(f"recipe-advisor validate: {err}", file=sys.stderr)
        return EXIT_UNUSABLE
    files, missing, empty = expand_paths(p for p in args.paths if p != STDIN)
    flags = {"gpus": args.gpus, "gpu_type": args.gpu_type, "nodes": args.nodes, "dialect": args.dialect,
             "bridge_version": args.bridge_version, "automodel_version": args.automodel_version}
    if args.model_config:
        flags["resolve_model"] = config_json_resolver(args.model_config)
    reports = [validate_stdin(**flags)] if STDIN in args.paths else []
    reports += [validate_file(path, **flags) for path in files]
    # A folder with nothing to check is a finding too, in every format: a CI step over a mistyped or emptied
    # folder must fail where it can be seen, and a JSON reader still gets a document.
    for path, message, fix in ([(p, "no such file or folder", "check the path") for p in missing]
                               + [(p, "no .yaml/.yml file in this folder or below it" + _skipped(hidden),
                                   "check the path, or name the config files themselves")
                                  for p, hidden in empty.items()]):
        reports.append(FileReport(path=path, unusable=True, findings=[Finding(
            code="RA-F001", severity="error", message=message, fix=fix)]))
    apply_ignore(reports, [code.strip() for codes in args.ignore for code in codes.split(",") if code.strip()])
    if baseline:
        apply_baseline(reports, baseline)
    if args.write_baseline:
        count = write_baseline(reports, args.write_baseline)
        print(f"recipe-advisor validate: wrote {count} finding(s) to {args.write_baseline}", file=sys.stderr)
        return EXIT_UNUSABLE if any(r.unusable for r in reports) else EXIT_OK
    if args.format == "json":
        print(json.dumps({"files": [r.to_dict() for r in reports], "summary": summary(reports)}, indent=2))
    elif args.format == "sarif":
        print(json.dumps(format_sarif(reports), indent=2))
    elif args.format == "github":
        out = format_github(reports)
        if out:
            print(out)
        s = summary(reports)
        print(f"{s['files']} file(s): {s['errors']} error(s), {s['warnings']} warning(s)", file=sys.stderr)
    else:
        print(format_text(reports))
    if any(r.unusable for r in reports):
        return EXIT_UNUSABLE
    return EXIT_ERRORS if any(r.errors for r in reports) else EXIT_OK
