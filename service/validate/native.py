"""The findings on a config in the advisor's own format (schema -> facts -> every rule), and the finishing every
dialect's findings get (ordering, capping, deferred fixes). Below service/validate/document.py, which picks the
dialect, and service/validate/megatron, which judges a Megatron reading through the same rules.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Callable, Optional

from pydantic import ValidationError

from recipe_index.cards import HardwareCard, ModelCard
from recipe_index.known_issues import KNOWN_ISSUES
from service.configs.yamlio import Document
from service.facts import Facts, Finding, Layout, split_world
from service.layouts.arithmetic import PIPELINE_SPLIT_KEYS
from service.validate.checks import CONFIG_RULES, LAYOUT_RULES
from service.validate.readings import layout_findings_by_reading
from service.validate.resolution import _emit, _resolve_hardware, _resolve_model
from service.validate.view import ConfigView
from trainer.contract.config import RecipeConfig, section_fields, top_level_keys
from trainer.contract.fast_paths import TRAINER_LOSSES, adapts_lm_head
from trainer.contract.text import clipped

ModelResolver = Callable[[str], ModelCard]
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def _loc_key(loc: tuple) -> str:
    key = ""
    for part in loc:
        key += f"[{part}]" if isinstance(part, int) else (f".{part}" if key else str(part))
    return key


def _schema(view: ConfigView, data: dict) -> Optional[RecipeConfig]:
    """Parse into the schema; drop each offending key and retry so the other rules still run."""
    data = copy.deepcopy(data)
    reported: set[str] = set()
    for _ in range(4):
        try:
            return RecipeConfig.model_validate(data)
        except ValidationError as exc:
            drops = []
            for err in exc.errors():
                loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
                key = _loc_key(loc)
                # A required key that is missing cannot be dropped: drop its section for the retry.
                drops.append(loc[:-1] if err["type"] == "missing" and len(loc) > 1 else loc)
                if key in reported:
                    continue
                reported.add(key)
                if err["type"] == "extra_forbidden":
                    section = key.rpartition(".")[0]
                    options = section_fields(section) if section else top_level_keys()
                    view.unknown_keys.append((key, options))
                else:
                    got = err.get("input")
                    shown = repr(got) if not isinstance(got, dict) else "a mapping"
                    view.invalid_values.append(
                        (key, f"`{key}`: {err['msg']} (got {shown[:80]})", _fix_for(err)))
            # Last index first, so that dropping one list element does not shift the next one's index.
            for loc in sorted(drops, key=lambda loc: [(0, p) if isinstance(p, int) else (1, str(p)) for p in loc],
                              reverse=True):
                _drop(data, loc)
    return None


def _fix_for(err: dict) -> str:
    ctx = err.get("ctx") or {}
    if "expected" in ctx:
        return f"use one of {ctx['expected']}"
    if err["type"].startswith(("greater_than", "less_than")):
        return "use a value in range: " + ", ".join(f"{k} {v}" for k, v in ctx.items())
    if err["type"] == "missing":
        return "add the key"
    return "fix the value's type"


def _drop(data, loc: tuple) -> None:
    node = data
    for part in loc[:-1]:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return
    if isinstance(node, dict):
        node.pop(loc[-1], None)
    elif isinstance(node, list) and isinstance(loc[-1], int) and loc[-1] < len(node):
        node.pop(loc[-1])


def facts_from_config(cfg: RecipeConfig, model: Optional[ModelCard], hardware: Optional[HardwareCard],
                      gpus_per_node: int, num_nodes: int) -> Facts:
    d = cfg.distributed
    layout = Layout(tp=d.tp_size, pp=d.pp_size, vp=d.vp_size if (d.vp_size or 1) > 1 else None, cp=d.cp_size,
                    ep=d.ep_size, etp=d.etp_size or 1, sp=d.sequence_parallel,
                    micro_batch_size=cfg.step_scheduler.local_batch_size, recompute=d.activation_checkpointing)
    mode = cfg.metadata.mode if cfg.metadata else ("peft" if cfg.peft else "pretrain")
    model_keys = cfg.model.model_extra or {}
    extra = _pipeline_layout_facts(d.pipeline_layout, model_keys)
    extra["grad_reduce_dtype"] = d.grad_reduce_dtype
    extra["megatron"], extra["dataset"] = dict(model_keys), cfg.dataset.kwargs()  # Megatron's settings (pitfalls.py)
    split = {k: v for k, v in model_keys.items() if k in PIPELINE_SPLIT_KEYS}
    if split:  # Megatron's own split settings, written in the model config as RA-L011's fix says
        extra["pipeline_split"] = split
    if cfg.metadata is not None:  # the Bridge recipe and precision recipe a megatron run loads (RA-P001..3)
        extra.update({k: v for k, v in (("precision_recipe", cfg.metadata.precision_recipe),
                                        ("megatron_recipe", cfg.metadata.megatron_recipe),
                                        ("recipe_kind", cfg.metadata.kind)) if v})
    if d.strategy == "megatron" and (d.use_megatron_fsdp or d.use_distributed_optimizer is False):
        extra["sharding"] = "full" if d.use_megatron_fsdp else "none"  # the memory-fit rule's sharding
    if d.strategy != "megatron":
        extra["fused_loss"] = _fused_loss(cfg)
    return Facts(layout=layout, world_size=gpus_per_node * num_nodes, model=model, hardware=hardware,
                 gpus_per_node=gpus_per_node, global_batch_size=cfg.step_scheduler.global_batch_size,
                 seq_length=cfg.seq_length, model_seq_length=cfg.model.seq_length, precision=cfg.precision,
                 mode=mode, strategy=d.strategy, peft=cfg.peft is not None, extra=extra)


def _pipeline_layout_facts(ours: Optional[str], model_keys: dict) -> dict:
    """A layout in our spelling (distributed.pipeline_layout) or in Megatron's own under `model:` (what RA-L019's
    fix names, a string or Megatron's list form), with the key it was written under, and the model config's
    mtp_num_layers (Megatron's; the layout must place that many mtp layers)."""
    extra = {}
    theirs = model_keys.get("pipeline_model_parallel_layout")
    if theirs not in (None, "", []):
        extra.update(pipeline_layout=theirs, pipeline_layout_key="model.pipeline_model_parallel_layout")
    elif ours:
        extra.update(pipeline_layout=ours, pipeline_layout_key="distributed.pipeline_layout")
    # Not written: the model provider's own (Bridge reads DeepSeek-V3's from its HF config), unknown here.
    mtp = model_keys.get("mtp_num_layers", False)
    if mtp is None or (isinstance(mtp, int) and not isinstance(mtp, bool)):
        extra["mtp_num_layers"] = mtp or 0  # Megatron: None places no mtp layer
    return extra


def _fused_loss(cfg: RecipeConfig) -> bool:
    """Whether the bundled trainer runs its chunked linear + cross-entropy (no full logits): only its
    own loss does, and only unless the config turns ``loss_fn.chunked`` off (trainer/loss.py)."""
    chunked = cfg.loss_fn.kwargs().get("chunked", "auto")
    # `auto` takes the plain loss for a LoRA-adapted head (trainer/loss.py), `true` is refused with one
    return cfg.loss_fn.target in TRAINER_LOSSES and chunked is not False and not (
        chunked == "auto" and adapts_lm_head(cfg))


def config_json_resolver(path: str) -> ModelResolver:
    """A model resolver that reads the architecture from this config.json (a file, or a folder holding one),
    offline, whatever name the config gives its model: for a model the index has no card for yet."""
    def resolve(name: str) -> ModelCard:
        from recipe_index.models import resolve_model

        card = resolve_model(path)
        return card.model_copy(update={"id": name or card.id})

    return resolve


def _model_config_path(doc: Document, cfg: RecipeConfig) -> Optional[str]:
    """``model.config``: a config.json path next to the model's name, relative to the file's folder."""
    written = (cfg.model.model_extra or {}).get("config")
    if not isinstance(written, str) or not written.strip():
        return None
    return str(Path(doc.path).parent / written) if doc.path and not doc.path.startswith("<") else written


def build_view(doc: Document, gpus: Optional[int] = None, gpu_type: Optional[str] = None,
               nodes: Optional[int] = None, resolve_model: Optional[ModelResolver] = None) -> ConfigView:
    """``resolve_model``: where model names resolve (None: the index, a local config.json, the Hub cache; then a
    `model.config` path in the file is read too; the HTTP service passes one that reads no local path)."""
    view = ConfigView(doc=doc)
    view.config = cfg = _schema(view, doc.data)
    if cfg is None:
        return view
    if resolve_model is None and _model_config_path(doc, cfg):
        resolve_model = config_json_resolver(_model_config_path(doc, cfg))
    model, view.model_error, view.model_unknown = _resolve_model(cfg.model.pretrained_model_name_or_path, resolve_model)
    hardware, view.hardware_error = _resolve_hardware(gpu_type or cfg.hardware.gpu_type)
    if gpus is not None:
        view.gpus_flag = gpus
        gpn, n = split_world(gpus, nodes, hardware.gpus_per_node if hardware else gpus)
        if nodes is None and gpn == gpus:  # read per node (not as a total): the file's node count stands
            n = cfg.hardware.num_nodes
        view.gpus_read_as_total, view.nodes_flag = nodes is None and gpn != gpus, nodes
    else:
        gpn, n = cfg.hardware.gpus_per_node, nodes or cfg.hardware.num_nodes
    view.facts = facts_from_config(cfg, model, hardware, gpn, n)
    return view

def native_findings(doc: Document, gpus: Optional[int], gpu_type: Optional[str], nodes: Optional[int],
                    resolve_model: Optional[ModelResolver], bridge_version: Optional[str],
                    deferred_fixes: dict[int, Callable[[], str]]) -> list[Finding]:
    """The unfinished findings of every config and layout rule on a config in the advisor's format; a rule's fix
    that is costly to search is left in ``deferred_fixes`` for `finished`."""
    findings: list[Finding] = []
    view = build_view(doc, gpus, gpu_type, nodes, resolve_model)
    view.bridge_version_flag = bridge_version
    for rule in CONFIG_RULES:
        findings.extend(_emit(rule, rule.check(view), doc, deferred_fixes))
    if view.facts is not None:
        def run(facts: Facts) -> list[Finding]:
            return [found for rule in LAYOUT_RULES for found in _emit(rule, rule.check(facts), doc, deferred_fixes)]

        findings.extend(layout_findings_by_reading(view, bridge_version, run, doc.position))
    _mark_known_issues(findings, view)
    return findings


def finished(findings: list[Finding], deferred_fixes: dict[int, Callable[[], str]]) -> list[Finding]:
    """The findings as reported: repeats dropped, ordered by line and severity, capped per code, and the listed
    ones given their deferred fix."""
    findings = _without_repeated_preflight_keys(findings)
    if any(f.code == "RA-M001" for f in findings):
        # weights alone do not fit: the whole-memory estimate would only repeat it
        findings = [f for f in findings if f.code != "RA-M002"]
    findings.sort(key=lambda f: (f.line or 0, SEVERITY_ORDER[f.severity], f.code))
    listed = _capped(findings)
    for finding in listed:  # only the listed findings pay for their fix's search
        deferred_fix = deferred_fixes.get(id(finding))
        if deferred_fix is not None:
            finding.fix = deferred_fix()
    return listed


def _without_repeated_preflight_keys(findings: list[Finding]) -> list[Finding]:
    """RA-E009 names each pre-flight refusal no other finding names: a rule that says more about the same key
    (RA-E004's step callables, RA-E008's pipeline, a schema error) speaks for it."""
    named = {f.key for f in findings if f.code != "RA-E009"}
    return [f for f in findings if f.code != "RA-E009" or f.key not in named]


# A pasted file of 50,000 unknown keys made a 18 MB answer: past this many findings
# of one code and severity in one file, the last one listed says how many more there are (and the
# summary still counts them).
MAX_FINDINGS_PER_CODE = 100


def _capped(findings: list[Finding]) -> list[Finding]:
    kept: list[Finding] = []
    seen: dict[tuple[str, str], int] = {}
    for finding in findings:
        finding.message = clipped(finding.message, 4000, 2000)  # any echo of config text stays bounded
        kind = (finding.code, finding.severity)
        seen[kind] = seen.get(kind, 0) + 1
        if seen[kind] <= MAX_FINDINGS_PER_CODE:
            kept.append(finding)
    for finding in reversed(kept):
        more = seen.get((finding.code, finding.severity), 0) - MAX_FINDINGS_PER_CODE
        if more > 0:
            finding.not_listed = more
            finding.message += f" (and {more:,} more {finding.code} {finding.severity}(s) in this file, not listed)"
            seen[(finding.code, finding.severity)] = 0
    return kept


def _mark_known_issues(findings: list[Finding], view: ConfigView) -> None:
    """Errors a shipped Bridge recipe is known to carry stay visible, as warnings: the codes its
    ``metadata.known_issues`` lists *and* the index's reviewed table records for that recipe name
    (recipe_index/known_issues.py). A file under review cannot waive its own findings by
    listing them (``known_issues: [RA-S001]`` would pass a foreign ``_target_``)."""
    meta = view.config.metadata if view.config else None
    known = set(meta.known_issues) & set(KNOWN_ISSUES.get(meta.name or "", ())) if meta else set()
    for finding in findings:
        if finding.code in known and finding.severity == "error":
            finding.severity = "warning"
            finding.message = f"known upstream issue, kept as shipped: {finding.message}"
