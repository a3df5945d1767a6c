"""REST routes under /v1. Thin: each parses the request, calls the function the CLI calls, and shapes the answer.

CPU-bound work (rules, planner) runs in the thread pool so one slow request
never stalls the event loop for the others.
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import lru_cache
from typing import Annotated, Iterator, Optional

from fastapi import APIRouter, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool

import recipe_index as index
from recipe_index.errors import UnknownHardwareError
from service import api_models as m
from service.accept import media_ranges, quality
from service.http_limits import StrictRequestRoute, client_error
from service.lookups import lookup_hardware, lookup_model
from service.validate import validate_text
from service.yamlio import YamlError, decode

router = APIRouter(route_class=StrictRequestRoute)  # unknown or repeated query parameters are a 422

ERRORS = {
    400: {"model": m.ErrorResponse, "description": "The YAML cannot be read as a config (syntax, alias bomb, depth, binary)."},
    404: {"model": m.ErrorResponse, "description": "Unknown model, GPU type or recipe; `suggestions` lists the closest."},
    413: {"model": m.ErrorResponse, "description": "Request body over 1 MiB."},
    415: {"model": m.ErrorResponse, "description": "Body sent under a content type this endpoint does not read."},
}
YAML_MEDIA_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml", "text/plain")


def _pick(*status: int) -> dict:
    return {code: ERRORS[code] for code in status}


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


_YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")


def _wants_yaml(request: Request) -> bool:
    """YAML where the client ranks a YAML type above JSON, or as high while naming it exactly (``*/*`` or
    ``application/*`` alone is JSON, the default; ``application/yaml;q=0`` refuses YAML)."""
    ranges = media_ranges(request.headers.get("accept", ""))
    yaml_q, specificity = max(quality(ranges, t) for t in _YAML_TYPES)
    json_q, _ = quality(ranges, "application/json")
    return yaml_q > json_q or (yaml_q == json_q > 0 and specificity == 2)


@contextmanager
def unusable_yaml_is_400(field: str = "yaml") -> Iterator[None]:
    """Answer a YamlError raised inside with a 400 naming ``field`` and the line and column.

    A document other than /v1/validate's ``yaml`` (diff's ``base``, ``new``) is named in the detail too.
    """
    try:
        yield
    except YamlError as err:
        where = f" at line {err.line}, column {err.column or 1}" if err.line else ""
        fix = f"; fix: {err.fix}" if err.fix else ""
        named = "" if field == "yaml" else f"{field}: "
        raise client_error(400, f"{named}unusable YAML{where}: {err.reason}{fix}", field,
                           line=err.line, column=err.column) from None


# ------------------------------------------------------------------ service


JSON = "application/json"


def encode(model: BaseModel) -> bytes:
    return model.model_dump_json(by_alias=True).encode()


@lru_cache(maxsize=1)
def _health() -> bytes:
    from service.app import version

    return encode(
        m.HealthResponse(
            status="ok",
            version=version(),
            recipes=len(index.list_recipes()),
            models=len(index.list_models()),
            hardware=len(index.list_hardware()),
        )
    )


async def healthz() -> Response:
    return Response(_health(), media_type=JSON)


# A plain route: load balancers and uptime checkers add cache-busting query strings, which a
# liveness probe must not answer with a 422 (the /v1 routes stay strict).
router.add_api_route("/healthz", healthz, methods=["GET"], response_model=m.HealthResponse, tags=["service"],
                     summary="Liveness and index size", route_class_override=APIRoute)


# ------------------------------------------------------------------ validate

VALIDATE_EXAMPLE = "distributed:\n  tp_size: 3\nhardware:\n  gpu_type: h100\n  gpus_per_node: 8\n"
VALIDATE_BODY = {
    "requestBody": {
        "required": True,
        "description": "The config: raw YAML (`text/plain` or `application/yaml`), or JSON with the YAML in `yaml`.",
        "content": {
            "application/json": {"schema": m.ValidateRequest.model_json_schema()},
            "text/plain": {"schema": {"type": "string", "maxLength": 1 << 20}, "example": VALIDATE_EXAMPLE},
            "application/yaml": {"schema": {"type": "string", "maxLength": 1 << 20}, "example": VALIDATE_EXAMPLE},
        },
    }
}


@router.post(
    "/v1/validate",
    response_model=m.ValidateResponse,
    tags=["advise"],
    summary="Check a config with every rule",
    description=(
        "The same rules as `recipe-advisor validate`. A clean config and a config with findings are both 200: "
        "read `summary.errors`. Query parameters apply to a raw YAML body; a JSON body carries them as fields."
    ),
    responses=_pick(400, 404, 413, 415),
    openapi_extra=VALIDATE_BODY,
)
async def validate(
    request: Request,
    gpus: Annotated[Optional[int], Query(ge=1, le=m.MAX_GPUS, description="GPUs per node (raw YAML body).")] = None,
    gpu_type: Annotated[Optional[str], Query(min_length=1, max_length=m.MAX_NAME, description="GPU type (raw YAML body).")] = None,
    nodes: Annotated[Optional[int], Query(ge=1, le=m.MAX_NODES, description="Nodes (raw YAML body).")] = None,
) -> m.ValidateResponse:
    body = await request.body()
    media_type = _media_type(request)
    if media_type == "application/json":
        try:
            req = m.ValidateRequest.model_validate_json(body)
        except ValidationError as exc:
            raise RequestValidationError(
                [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False, include_input=False)]
            ) from None
        for name, in_body, in_query in (("gpus", req.gpus, gpus), ("gpu_type", req.gpu_type, gpu_type),
                                        ("nodes", req.nodes, nodes)):
            if in_body is not None and in_query is not None and in_body != in_query:  # which one would be judged?
                raise client_error(400, f"{name} is {in_body!r} in the JSON body and {in_query!r} in the query: "
                                        "give it once (a JSON body carries it as a field)", name)
        text, gpus, gpu_type, nodes = req.yaml, req.gpus or gpus, req.gpu_type or gpu_type, req.nodes or nodes
    elif media_type in YAML_MEDIA_TYPES or not media_type:
        with unusable_yaml_is_400():
            text = decode(body, "<request>", max_bytes=1 << 20)
    else:
        raise client_error(  # `field` as /v1/plan's 415 (http_limits.StrictRequestRoute)
            415,
            f"content type {media_type!r} is not accepted: send the YAML as text/plain or application/yaml "
            "(curl --data-binary needs -H 'Content-Type: application/yaml'), "
            'or JSON {"yaml": "..."} as application/json',
            "content-type",
        )
    if gpu_type is not None:
        lookup_hardware(gpu_type)  # unknown -> 404 with the known names, as the CLI's exit 2
    with unusable_yaml_is_400():
        report = await run_in_threadpool(validate_text, text, "<request>", gpus, gpu_type, nodes, lookup_model)
    return m.ValidateResponse(
        files=[m.FileFindings(path=report.path, findings=[f.to_dict() for f in report.findings])],
        summary=m.ValidateSummary(files=1, errors=report.errors, warnings=report.warnings),
    )


# ------------------------------------------------------------------ index


@router.get("/v1/recipes", response_model=list[m.RecipeSummary], tags=["index"], summary="List bundled recipes",
            responses=_pick(404))
def list_recipes(
    family: Annotated[Optional[str], Query(max_length=m.MAX_NAME, description="Model family, e.g. `llama`.")] = None,
    mode: Annotated[Optional[m.GOAL], Query(description="pretrain, sft or peft.")] = None,
    hardware: Annotated[Optional[str], Query(max_length=m.MAX_NAME, description="GPU type, e.g. `h100`.")] = None,
    num_gpus: Annotated[Optional[int], Query(ge=1, le=m.MAX_GPUS, description="GPU count the recipe is sized for.")] = None,
    kind: Annotated[Optional[m.RECIPE_KIND], Query(description="library, benchmark or bundled.")] = None,
) -> list[m.RecipeSummary]:
    if hardware is not None:
        try:
            hardware = lookup_hardware(hardware).name  # aliases read as elsewhere
        except UnknownHardwareError as err:  # as the CLI's `recipes --hardware`, not an empty list
            raise client_error(404, str(err), "hardware", suggestions=list(err.suggestions or err.known)) from None
    entries = index.list_recipes(family=family, mode=mode, hardware=hardware, num_gpus=num_gpus, kind=kind)
    return [m.RecipeSummary.from_entry(e) for e in entries]


@router.get(
    "/v1/recipes/{name}",
    response_model=m.RecipeDetail,
    tags=["index"],
    summary="One recipe: metadata and YAML",
    description="JSON by default; with `Accept: application/yaml` the recipe file itself.",
    responses={**_pick(404), 200: {"content": {"application/yaml": {"schema": {"type": "string"}}}}},
)
def get_recipe(
    request: Request, response: Response,
    name: Annotated[str, Path(max_length=m.MAX_NAME, description="Recipe name from GET /v1/recipes.")],
):
    entry = index.get_recipe(name)
    text = index.load_recipe_text(entry.name)
    vary = {"Vary": "Accept"}  # one URL, two bodies: a cache in front must key on Accept
    if _wants_yaml(request):
        return PlainTextResponse(text, media_type="application/yaml", headers=vary)
    response.headers.update(vary)
    return m.RecipeDetail(**m.RecipeSummary.from_entry(entry).model_dump(), yaml=text)


@router.get("/v1/models", response_model=list[m.ModelSummary], tags=["index"], summary="List bundled model cards")
def list_models(
    family: Annotated[Optional[str], Query(max_length=m.MAX_NAME, description=(
        "Model family, as /v1/recipes filters it: the card's (`Llama 3`) or its recipes' (`llama`)."))] = None,
) -> list[m.ModelSummary]:
    return [m.ModelSummary.from_card(card) for card in index.list_models(family=family)]


@router.get(
    "/v1/models/{model_id:path}",
    response_model=m.ModelDetail,
    tags=["index"],
    summary="One model card",
    description="By bundled id, alias or Hugging Face id (`meta-llama/Meta-Llama-3-8B` works as is).",
    responses=_pick(404),
)
def get_model(
    model_id: Annotated[str, Path(max_length=m.MAX_NAME, description="Bundled id, alias or HF id.")]
) -> m.ModelDetail:
    return m.ModelDetail.from_card(lookup_model(model_id))


@router.get("/v1/hardware", response_model=list[m.HardwareOut], tags=["index"], summary="List hardware cards")
def list_hardware() -> list[m.HardwareOut]:
    return [m.HardwareOut.model_validate(card.model_dump()) for card in index.list_hardware()]
