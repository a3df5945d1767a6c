"""Validate config files: YAML with positions -> schema -> facts -> every rule.

The same layout rules the planner prunes with (``service.validate.checks``) run here, so a config
the recommender emits and a config a pull request edits are judged alike.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterable, Optional

from service.configs.yamlio import Document, YamlError, load_yaml, read_file
from service.facts import Finding
from service.validate.automodel.dialect import AUTO, AUTOMODEL, detect
from service.validate.automodel.validate import automodel_findings
from service.validate.native import (  # noqa: F401  (build_view, config_json_resolver, MAX_FINDINGS_PER_CODE: API)
    MAX_FINDINGS_PER_CODE,
    ModelResolver,
    build_view,
    config_json_resolver,
    facts_from_config,
    finished,
    native_findings,
)
from service.validate.report import FileReport
from service.validate.resolution import _resolve_hardware
from service.validate.suppress import apply_inline

YAML_SUFFIXES = (".yaml", ".yml")


class BadArgument(ValueError):
    """An unusable command-line value (unknown --gpu-type, ...)."""


def validate_document(doc: Document, gpus: Optional[int] = None, gpu_type: Optional[str] = None,
                      nodes: Optional[int] = None, resolve_model: Optional[ModelResolver] = None,
                      dialect: Optional[str] = None, text: str = "", bridge_version: Optional[str] = None,
                      automodel_version: Optional[str] = None) -> list[Finding]:
    """Every finding on one config. ``dialect``: ``recipe-advisor``, ``automodel`` (NeMo AutoModel's recipes,
    service/validate/automodel), or None/``auto`` to tell from the file; ``text``: the file's text, whose
    comment header an AutoModel recipe states its GPU count in; ``bridge_version``: the Megatron Bridge release
    whose defaults to assume (else the config's ``metadata.bridge_version``; service/validate/readings.py);
    ``automodel_version``: the AutoModel release or date whose schema an AutoModel recipe is judged by (else its
    ``metadata.automodel_version``; service/validate/automodel/versions.py)."""
    deferred_fixes: dict[int, Callable[[], str]] = {}
    from service.validate.megatron.dialect import BRIDGE, detect_megatron

    if dialect == BRIDGE or (dialect in (None, AUTO) and detect_megatron(doc.data) == BRIDGE):
        from service.validate.megatron.validate import bridge_findings

        findings = bridge_findings(doc, gpus=gpus, gpu_type=gpu_type, nodes=nodes, bridge_version=bridge_version)
    elif (dialect if dialect not in (None, AUTO) else detect(doc.data)) == AUTOMODEL:
        findings = automodel_findings(doc, text, deferred_fixes, gpus, gpu_type, nodes, resolve_model,
                                      automodel_version)
    else:
        findings = native_findings(doc, gpus, gpu_type, nodes, resolve_model, bridge_version, deferred_fixes)
    return finished(findings, deferred_fixes)


def unusable_finding(err: YamlError) -> Finding:
    return Finding(code="RA-F001", severity="error", message=err.reason, key=None, fix=err.fix,
                   line=err.line, column=err.column)


def validate_text(text: str, path: str = "<request>", gpus: Optional[int] = None, gpu_type: Optional[str] = None,
                  nodes: Optional[int] = None, resolve_model: Optional[ModelResolver] = None,
                  dialect: Optional[str] = None, bridge_version: Optional[str] = None,
                  local_files: bool = False, automodel_version: Optional[str] = None) -> FileReport:
    """Validate one document. Raises YamlError when it is not a usable config at all.

    ``resolve_model`` replaces ``recipe_index.resolve_model`` for the model the config names;
    the HTTP service passes one that never reads local paths or the network for a client.
    """
    from service.validate.megatron.dialect import MEGATRON_LM, looks_like_megatron_lm

    if dialect == MEGATRON_LM or (dialect in (None, AUTO) and looks_like_megatron_lm(text, path)):
        from service.validate.megatron.validate import megatron_lm_findings

        findings = megatron_lm_findings(text, path, local_files, gpus=gpus, gpu_type=gpu_type, nodes=nodes,
                                        bridge_version=bridge_version)
        return FileReport(path=path, findings=apply_inline(findings, text))
    doc = load_yaml(text, path)
    return FileReport(path=path, findings=apply_inline(
        validate_document(doc, gpus, gpu_type, nodes, resolve_model, dialect, text, bridge_version,
                          automodel_version), text))


def validate_file(path: str, **kwargs) -> FileReport:
    try:
        # read_file refuses pipes and devices first; a file on this machine may name another (run_recipe.py)
        return validate_text(read_file(path), path, local_files=True, **kwargs)
    except YamlError as err:
        return FileReport(path=path, findings=[unusable_finding(err)], unusable=True)
    except OSError as err:
        return FileReport(path=path, unusable=True, findings=[Finding(
            code="RA-F001", severity="error", message=f"cannot read file: {err.strerror or err}",
            fix="check the path and permissions")])


def expand_paths(paths: Iterable[str]) -> tuple[list[str], list[str], dict[str, list[str]]]:
    """(YAML files to check, paths that do not exist, folders that hold no YAML file with the hidden folders
    skipped in them), each path once however often it is named. Folders recurse and keep only *.yaml/*.yml (any
    case), skipping hidden folders (``.git``)."""
    files, missing, empty = {}, {}, {}
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found, hidden = 0, []
            for root, dirs, names in os.walk(path):
                hidden += [str(Path(root, d).relative_to(path)) for d in dirs if d.startswith(".")]
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(names):
                    if name.lower().endswith(YAML_SUFFIXES):
                        found += 1
                        files.setdefault(os.path.realpath(Path(root) / name), str(Path(root) / name))
            if not found:
                empty.setdefault(os.path.realpath(path), (raw, hidden))
        elif path.exists():
            files.setdefault(os.path.realpath(path), str(path))
        else:
            missing.setdefault(raw, raw)
    return list(files.values()), list(missing), dict(empty.values())


def check_hardware_argument(gpu_type: Optional[str]) -> None:
    if gpu_type is None:
        return
    _, error = _resolve_hardware(gpu_type)
    if error:
        raise BadArgument(error)
