"""Validate a Megatron Bridge ConfigContainer YAML or Megatron-LM arguments with this product's rules: read into its
config (service/validate/megatron/dialect.py), judged as one, the findings pointed back at the dialect's keys and
lines."""

from __future__ import annotations

from typing import Callable, Optional

from recipe_index.errors import UnknownModelError
from service.configs.megatron_args import parse_megatron_args
from service.configs.yamlio import Document
from service.facts import Finding
from service.validate.megatron.dialect import (
    BRIDGE,
    MEGATRON_LM,
    PARALLEL_KEYS,
    Reading,
    read_bridge,
    read_lm,
    translate,
)
from service.validate.rules.bridge_peft import BRIDGE_NAMED


def bridge_findings(doc: Document, **flags) -> list[Finding]:
    reading = translate(read_bridge(doc), BRIDGE, flags.get("gpus"), flags.get("nodes"), flags.get("gpu_type"))
    return _judge(reading, doc.path, **flags)


def run_recipe_findings(text: str, path: str, local_files: bool = False, **flags) -> Optional[list[Finding]]:
    """A ``run_recipe.py --config-file FILE section.key=value ...`` command: the YAML it names (beside the script),
    with the dotted overrides over it at the command's lines, judged as a Bridge ConfigContainer. None when the
    text runs no run_recipe.py with a config file."""
    from pathlib import Path

    from service.configs.megatron_args import command_line_args, dotted_overrides
    from service.configs.yamlio import YamlError, load_yaml, read_file

    args = command_line_args(text)
    config = (args.get("config_file") or (None, 0))[0]
    if "run_recipe.py" not in text or not isinstance(config, str):
        return None
    if not local_files:  # a request's text names no file of this machine to read (the HTTP service, stdin)
        return [Finding(code="RA-F001", severity="error", line=args["config_file"][1], key="--config-file",
                        message=f"run_recipe.py's --config-file {config} is not read for a request",
                        fix="validate the ConfigContainer YAML itself (its overrides written into it)")]
    where = Path(path).parent / config if not Path(config).is_absolute() else Path(config)
    try:
        doc = load_yaml(read_file(str(where)), str(where))
    except (YamlError, OSError) as err:
        return [Finding(code="RA-F001", severity="error", line=args["config_file"][1], key="--config-file",
                        message=f"run_recipe.py's --config-file {config}: {getattr(err, 'reason', err)}",
                        fix="check the path (read beside this file)")]
    for dotted, (value, line) in dotted_overrides(text).items():
        node = doc.data
        *sections, leaf = dotted.split(".")
        for name in sections:
            node = node.setdefault(name, {}) if isinstance(node.get(name, {}), dict) else {}
        node[leaf] = value
        doc.positions[dotted] = (line, 1)
    findings = bridge_findings(doc, **flags)
    return findings


def megatron_lm_findings(text: str, path: str, local_files: bool = False, **flags) -> list[Finding]:
    """``local_files``: read the file a run_recipe.py command names (the CLI over a file; never for a request)."""
    recipe = run_recipe_findings(text, path, local_files, **flags)
    if recipe is not None:
        return recipe
    reading = translate(read_lm(parse_megatron_args(text)), MEGATRON_LM, flags.get("gpus"), flags.get("nodes"),
                        flags.get("gpu_type"))
    return _judge(reading, path, **flags)


def dialect_names(reading: Reading) -> list[tuple[str, str]]:
    """(our key, the dialect's) for every key the reading knows, longest first (so no key replaces part of
    another)."""
    names = dict(reading.names)
    for name, ours in PARALLEL_KEYS.items():
        names.setdefault(ours, reading.spell(name))
    return sorted(names.items(), key=lambda pair: -len(pair[0]))


def _judge(reading: Reading, path: str, gpus: Optional[int] = None, gpu_type: Optional[str] = None,
           nodes: Optional[int] = None, bridge_version: Optional[str] = None, **_) -> list[Finding]:
    from service.validate.native import finished, native_findings

    def resolve(name: str):
        if reading.card is None:
            raise UnknownModelError(name, reason="the arguments do not state the model's num_layers, hidden_size "
                                                 "and num_attention_heads")
        return reading.card

    doc = Document(data=reading.data, positions=reading.positions, path=path,
                   dialect_sections=reading.dialect_sections)
    deferred_fixes: dict[int, Callable[[], str]] = {}
    findings = native_findings(doc, gpus, gpu_type, nodes, resolve, bridge_version, deferred_fixes)
    findings = finished(findings, deferred_fixes)
    spelled = dialect_names(reading)
    for finding in findings:
        if finding.code in BRIDGE_NAMED:  # judged by the dialect's own names already
            finding.line, finding.column = reading.written_positions.get(finding.key, (finding.line, finding.column))
            continue
        for ours, theirs in spelled:  # the message and fix in the dialect's own names
            finding.message = finding.message.replace(ours, theirs)
            finding.fix = finding.fix.replace(ours, theirs) if finding.fix else finding.fix
        if finding.key in reading.names:
            finding.key = reading.names[finding.key]
        elif finding.key is not None and finding.key not in reading.positions:
            if finding.at not in reading.positions:  # a key the dialect did not write: no line of the file holds it
                finding.line = finding.column = None
            finding.key = dict(spelled).get(finding.key, finding.key)  # but its name is the dialect's
    return findings
