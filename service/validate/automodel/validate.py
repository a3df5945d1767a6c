"""Validate an AutoModel recipe: its schema and targets, AutoModel's mesh and batch rules, and the shared
model, memory and hardware rules over the facts it states, at the world it states (``dialect.stated_world``).

Models resolve from the bundled index and the Hugging Face cache only, so a CI job over a folder of
recipes never waits on the Hub; ``RECIPE_ADVISOR_ALLOW_HUB=1`` lets each unknown id be asked once.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Optional

from recipe_index.cards import ModelCard
from service.configs.yamlio import Document
from service.facts import Finding
from service.lookups import hub_allowed
from service.validate.automodel.dialect import ci_cluster, stated_world
from service.validate.automodel.facts import facts_of, model_name, sizes_of
from service.validate.automodel.schema_rules import judged_for
from service.validate.automodel.versions import VERSION_KEY, Judged
from service.validate.automodel.view import RecipeView
from service.validate.checks import AUTOMODEL_RULES, CONFIG_RULES, LAYOUT_RULES
from service.validate.resolution import _emit, _resolve_hardware, _resolve_model
from service.validate.view import ConfigView

DEFAULT_GPU_TYPE = "h100"  # AutoModel's examples are sized and measured on H100 nodes
# The shared rules that hold for an AutoModel run as they do for any: experts over EP, EP needing an MoE
# model, TP within one NVLink domain, and the memory fit (FSDP2 shards every state over dp·cp).
SHARED_LAYOUT_CODES = ("RA-L008", "RA-L009", "RA-L015", "RA-M001", "RA-M002")
SHARED_CONFIG_CODES = ("RA-C003", "RA-C009")
_OFFLINE_WORDS = "and HF_HUB_OFFLINE is set"
_CACHE_ONLY_WORDS = ("and an AutoModel recipe's model is read from the cache only (RECIPE_ADVISOR_ALLOW_HUB=1 asks "
                     "the Hub once per id)")


def default_resolver() -> Callable[[str], ModelCard]:
    from recipe_index.models import resolve_model, resolve_model_from_cache

    return resolve_model if hub_allowed() else resolve_model_from_cache


CI_OVERRIDES = ("local_batch_size", "max_steps")  # ci.<key> -> step_scheduler.<key> (tests/ci_tests/README.md)


def _with_ci_overrides(doc: Document) -> Document:
    """The recipe as AutoModel's CI runs it on ci.nodes: its ci.local_batch_size / ci.max_steps over the
    step scheduler's, at the ci key's line."""
    ci = doc.data.get("ci") if isinstance(doc.data.get("ci"), dict) else {}
    overrides = {key: ci[key] for key in CI_OVERRIDES if key in ci}
    if not overrides or not isinstance(doc.data.get("step_scheduler"), dict):
        return doc
    data = dict(doc.data, step_scheduler={**doc.data["step_scheduler"], **overrides})
    positions = dict(doc.positions)
    positions.update({f"step_scheduler.{key}": doc.positions[f"ci.{key}"] for key in overrides
                      if f"ci.{key}" in doc.positions})
    return replace(doc, data=data, positions=positions)


def _judged(doc: Document, flag: Optional[str]) -> Judged:
    """The AutoModel versions the recipe is judged under: ``--automodel-version``, else its
    ``metadata.automodel_version``, else inferred (schema_rules.judged_for); an unusable stated one is RA-A015's."""
    meta = doc.data.get("metadata") if isinstance(doc.data.get("metadata"), dict) else {}
    stated, source = (flag, "--automodel-version") if flag is not None else (meta.get("automodel_version"),
                                                                             VERSION_KEY)
    try:
        return judged_for(doc.data, stated, source)
    except ValueError as err:
        return replace(judged_for(doc.data, None, source), problem=str(err))


def automodel_findings(doc: Document, text: str, deferred: dict[int, Callable[[], str]], gpus: Optional[int] = None,
                       gpu_type: Optional[str] = None, nodes: Optional[int] = None,
                       resolve_model=None, automodel_version: Optional[str] = None) -> list[Finding]:
    """Every finding on an AutoModel recipe, their fixes that cost a search left in ``deferred``
    (``service.validate.document`` sorts, caps and completes them as for any config); ``automodel_version``: the
    AutoModel release or checkout date whose schema to judge by, over the recipe's ``metadata.automodel_version``."""

    cluster = ci_cluster(doc.data) if gpu_type is None and gpus is None and nodes is None else None
    hardware, hardware_error = _resolve_hardware(gpu_type or (cluster.name if cluster else DEFAULT_GPU_TYPE))
    world = stated_world(text, doc.data, gpus, nodes, hardware.gpus_per_node if hardware else 8)
    if world.source.endswith("ci.nodes"):
        doc = _with_ci_overrides(doc)
    model, model_error, unknown = _resolve_model(model_name(doc.data), resolve_model or default_resolver())
    if model_error and not hub_allowed():
        model_error = model_error.replace(_OFFLINE_WORDS, _CACHE_ONLY_WORDS)
    facts = facts_of(doc.data, world.size, world.gpus_per_node, model, hardware)
    view = RecipeView(data=doc.data, world=world, sizes=sizes_of(doc.data), facts=facts, model=model,
                      hardware=hardware, judged=_judged(doc, automodel_version))
    config_view = ConfigView(doc=doc, facts=facts, model_error=model_error, model_unknown=unknown,
                             hardware_error=hardware_error)
    findings: list[Finding] = []
    for rule in AUTOMODEL_RULES:
        findings.extend(_emit(rule, rule.check(view), doc, deferred))
    for rule in CONFIG_RULES:
        if rule.code in SHARED_CONFIG_CODES:
            findings.extend(_emit(rule, rule.check(config_view), doc, deferred))
    if view.dp is not None:  # a layout the world does not hold is RA-A004's; the shared rules assume one
        for rule in LAYOUT_RULES:
            if rule.code in SHARED_LAYOUT_CODES:
                findings.extend(_emit(rule, rule.check(facts), doc, deferred))
    return findings
