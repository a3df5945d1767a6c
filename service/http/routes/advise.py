"""POST /v1/plan, /v1/recommend and /v1/diff: the core's plan, recommend and diff over HTTP.

Each body becomes one AdviceRequest (``service.request``), the model resolved as the service may
resolve it (``service.lookups``) and the overrides typed once. Plan and recommend are pure functions
of the request and the bundled index, so their encoded answers are cached per process
(``service.http.cache``), keyed by the request with names normalised (``Meta-Llama-3-8B`` and
``llama3-8b`` share an entry). A miss runs in the thread pool; a hit is a dict lookup.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Optional

from fastapi import APIRouter
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from service.configs.changes import diff, load_diff_input, summary, verdict
from service.configs.yamlio import OverrideError, YamlError, override_pairs
from service.http import schemas as m
from service.http.cache import Answer, ResponseCache, cached_answer
from service.http.errors import ERRORS, JSON, client_error, encode, unusable_yaml_is_400
from service.http.limits import StrictRequestRoute
from service.lookups import lookup_hardware, lookup_model
from service.plan.planner import plan
from service.plan.report import plan_json, shown_dict
from service.plan.shown import shown_rows
from service.plan.types import Plan, PlanError
from service.recommend.contract import plan_request
from service.recommend.recommendation import Recommendation, recommend_for
from service.request import AdviceRequest
from service.runs.advice import reading_store, store_version, with_runs

router = APIRouter(tags=["advise"], route_class=StrictRequestRoute)

CACHE_SIZE = 1024
responses = ResponseCache(CACHE_SIZE)
CANNOT_PLAN = {
    400: {"model": m.ErrorResponse, "description": "A request no layout can serve (the detail says what would), "
                                                   "or a JSON body that writes a key twice."}
}
PLAN_ERRORS = {**CANNOT_PLAN, 404: ERRORS[404], 413: ERRORS[413], 415: ERRORS[415]}


def body_request(body: m.PlanBody) -> AdviceRequest:
    """The request a body asks, the model and GPU type looked up (unknown ones raise 404) and, for
    /v1/recommend, the overrides typed (400 naming ``overrides`` when one cannot be)."""
    model = lookup_model(body.model)
    gpu_type = lookup_hardware(body.gpu_type).name
    overrides = body.overrides if isinstance(body, m.RecommendBody) else {}
    pair = nested_override(overrides)
    if pair is not None:
        outer, inner = pair
        raise client_error(400, f"overrides set both {outer!r} and {inner!r}, which lies inside it: a JSON object's "
                                "key order is not kept by every client, so which one wins would be left to chance; "
                                f"give {inner!r} inside the {outer!r} value (a YAML mapping in a string), or only "
                                "one of the two", "overrides")
    try:
        pairs = tuple(override_pairs(overrides))
    except OverrideError as err:
        raise _override_error(err) from None
    return AdviceRequest(model, body.gpus, gpu_type, nodes=body.nodes, goal=body.goal, seq_length=body.seq_length,
                         global_batch_size=body.global_batch_size, precision=body.precision,
                         grad_reduce_dtype=body.grad_reduce_dtype, engine=body.engine, top=body.top,
                         overrides=pairs)


def request_key(body: m.PlanBody, request: AdviceRequest, exclude: tuple[str, ...] = ()) -> tuple:
    """A hashable key of the body with the model and GPU names as ``request`` resolved them."""
    values = body.model_dump(exclude=set(exclude))
    values["model"], values["gpu_type"] = request.model.id, request.gpu_type
    if "overrides" in values:
        # JSON text, not the value: True == 1 == 1.0 in Python, and they emit different YAML. In the
        # order the client wrote them: they apply in that order, as the CLI's flags do in theirs
        # (`lr_scheduler` then `lr_scheduler.min_lr` keeps the key; the reverse replaces the section).
        values["overrides"] = tuple((k, json.dumps(v)) for k, v in values["overrides"].items())
    return tuple(sorted(values.items()))


def nested_override(keys) -> Optional[tuple[str, str]]:
    """Two override keys one of which lies inside the other (``dataset`` and ``dataset.seq_length``),
    or None. A JSON object's key order is not part of JSON, and some clients reorder keys; so which
    of the two would win cannot be left to it (the CLI applies its arguments in order)."""
    given = set(keys)
    for inner in sorted(given):
        parts = inner.split(".")
        for outer in (".".join(parts[:i]) for i in range(1, len(parts))):
            if outer in given:
                return outer, inner
    return None


def _override_error(err: OverrideError):
    message = str(err)  # the shared override parser already says "override --key: ..."
    return client_error(400, message if message.startswith("override") else f"override {message}", "overrides")


async def answer(key: tuple, compute: Callable[[], bytes]) -> Response:
    status, content = await answer_for(key, compute)
    return Response(content, status_code=status, media_type=JSON)


async def answer_for(key: tuple, compute: Callable[[], bytes]) -> Answer:
    """The cached answer, or compute it: a body, or a PlanError as its 400 (cached alike)."""

    def status_and_body() -> Answer:
        try:
            return 200, compute()
        except PlanError as err:
            error = m.ErrorResponse(detail=str(err), field=err.field, suggestions=err.suggestions)
            return 400, encode(error)

    return await cached_answer(responses, key, status_and_body)


# ------------------------------------------------------------------ plan


@dataclass(frozen=True)
class Keyed:
    """A request that hashes and compares by its cache key alone (a request holds unhashable values)."""

    key: tuple
    request: AdviceRequest = field(compare=False)


@lru_cache(maxsize=CACHE_SIZE)
def cached_plan(keyed: Keyed) -> Plan:
    """The full ranking; `top` only cuts it when encoding, so every `top` shares one entry."""
    return plan(plan_request(keyed.request))


@router.post(
    "/v1/plan",
    response_model=m.PlanResponse,
    summary="Rank the parallel layouts of a model on your hardware",
    description=(
        "The same as `recipe-advisor plan --format json`: layouts that fit first, fastest first. "
        "Sequence length, global batch and precision default to the recipe `recommend` would start from."
    ),
    responses=PLAN_ERRORS,
)
async def plan_route(body: m.PlanBody) -> Response:
    request = body_request(body)
    key = request_key(body, request, exclude=("top",))

    def compute() -> bytes:
        planned = with_runs(cached_plan(Keyed(key, request)), reading_store())
        return encode(m.PlanResponse.model_validate(plan_json(planned, request.top)))

    return await answer(("plan", key, body.top, store_version()), compute)


# ------------------------------------------------------------------ recommend


def why_chosen(rec: Recommendation) -> list[str]:
    """The recommender's choice of base recipe, in words (the decision tree, step by step)."""
    entry, req = rec.recipe, rec.plan.request
    if entry is None:
        return ["no recipe in the index fits this model and engine: the config starts from the schema defaults"]
    reasons = []
    if entry.model == rec.model.id:
        reasons.append(f"{rec.model.id}'s own {entry.mode} recipe ({entry.kind})")
    else:
        reasons.append(f"the closest recipe in the index: {entry.model} ({entry.mode}, {entry.kind})")
    if entry.num_gpus and entry.hardware:
        same = entry.num_gpus == req.world_size and entry.hardware == req.hardware.name
        reasons.append(
            f"sized for {entry.num_gpus} x {entry.hardware}"
            + ("" if same else f"; layout re-planned for {req.world_size} x {req.hardware.name}")
        )
    if entry.seq_length:
        reasons.append(f"sequence length {entry.seq_length} in the recipe, {req.seq_length} in this config")
    reasons.append(
        "its convergence contract (global batch, schedule, sequence length, precision, data) is kept "
        "unless you set it; the changes below list every difference with its layer"
    )
    return reasons


def recommendation_response(rec: Recommendation, top: int) -> m.RecommendResponse:
    data = rec.to_dict()
    others = [shown_dict(rec.plan, shown) for shown in shown_rows(rec.plan, top + 1) if shown.row is not rec.best][:top]
    return m.RecommendResponse.model_validate({**data, "why": why_chosen(rec), "other_layouts": others})


def run_recommend(request: AdviceRequest, config_path: str = "config.yaml", emit: str = "recipe-advisor"
                  ) -> Recommendation:
    """The recommendation, or the 400 of overrides that cannot make a config or of a config with errors."""
    try:
        rec = recommend_for(request, config_path, emit)
    except OverrideError as err:
        raise _override_error(err) from None
    except YamlError as err:  # the written YAML is re-read under the file limits (e.g. an override nested too deep)
        raise client_error(400, f"the advised config would not read back as a config: {err}; an override is beyond "
                                "what a config holds: give a smaller or flatter one", "overrides") from None
    if rec.errors:  # overrides, or a defect: the advised config itself should validate with 0 errors
        found = "; ".join(f"{f.code} at {f.key or 'the config'}: {f.message}" + (f" (fix: {f.fix})" if f.fix else "")
                          for f in rec.findings if f.severity == "error")
        cause = "the overrides make the config invalid" if request.overrides else "the advised config does not validate"
        raise client_error(400, f"{cause} ({rec.errors} error(s)): {found}", "overrides" if request.overrides else None)
    return rec


@router.post(
    "/v1/recommend",
    response_model=m.RecommendResponse,
    summary="A ready config, its layout, estimates, findings and launch commands",
    description=(
        "The same as `recipe-advisor recommend --format json`, plus `why` and the runner-up layouts. "
        "The base recipe's convergence contract is kept unless a field here sets it."
    ),
    responses=PLAN_ERRORS,
)
async def recommend_route(body: m.RecommendBody) -> Response:
    status, content = await recommend_answer(body, body_request(body))
    return Response(content, status_code=status, media_type=JSON)


async def recommend_answer(body: m.RecommendBody, request: AdviceRequest, config_path: str = "config.yaml") -> Answer:
    """(status, JSON) of the recommendation ``body`` asks (``request``: its AdviceRequest); the web page
    shares the cache with the API."""
    key = request_key(body, request)

    def compute() -> bytes:
        return encode(recommendation_response(run_recommend(request, config_path, body.emit), request.top))

    return await answer_for(("recommend", key, config_path, store_version()), compute)


# ------------------------------------------------------------------ diff


def _load(text: str, field: str) -> dict:
    with unusable_yaml_is_400(field):
        return load_diff_input(text, f"<{field}>")


def diff_response(base_text: str, new_text: str) -> m.DiffResponse:
    changes = diff(_load(base_text, "base"), _load(new_text, "new"))
    return m.DiffResponse.model_validate(
        {"changes": [c.to_dict() for c in changes], "summary": summary(changes), "verdict": verdict(changes)}
    )


@router.post(
    "/v1/diff",
    response_model=m.DiffResponse,
    summary="Classify every changed key between two configs",
    description="The same as `recipe-advisor diff BASE NEW --format json`, with a one-line verdict.",
    responses={400: ERRORS[400], 413: ERRORS[413], 415: ERRORS[415]},
)
async def diff_route(body: m.DiffBody) -> Response:
    result = await run_in_threadpool(diff_response, body.base, body.new)
    return Response(encode(result), media_type=JSON)
