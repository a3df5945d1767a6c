"""POST /v1/validate: check a config with every rule, as `recipe-advisor validate` does.

The rules run in the thread pool, so one large config never stalls the event loop for the others.
"""

from __future__ import annotations

from typing import Annotated, Optional

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from service.configs.yamlio import decode
from service.http import schemas as m
from service.http.errors import client_error, pick, unusable_yaml_is_400
from service.http.limits import StrictRequestRoute
from service.lookups import lookup_hardware, lookup_model
from service.validate.document import validate_text

router = APIRouter(route_class=StrictRequestRoute)  # unknown or repeated query parameters are a 422

YAML_MEDIA_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml", "text/plain")


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


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
    responses=pick(400, 404, 413, 415),
    openapi_extra=VALIDATE_BODY,
)
async def validate(
    request: Request,
    gpus: Annotated[Optional[int], Query(ge=1, le=m.MAX_GPUS, description="GPUs per node (raw YAML body).")] = None,
    gpu_type: Annotated[Optional[str],
                        Query(min_length=1, max_length=m.MAX_NAME, description="GPU type (raw YAML body).")] = None,
    nodes: Annotated[Optional[int], Query(ge=1, le=m.MAX_NODES, description="Nodes (raw YAML body).")] = None,
    dialect: Annotated[m.DIALECT, Query(description="auto, recipe-advisor, automodel, megatron-bridge or "
                                                    "megatron-lm (raw body).")] = "auto",
    automodel_version: Annotated[Optional[str], Query(min_length=1, max_length=m.MAX_NAME,
                                                      description="AutoModel release or date (raw YAML body).")
                                 ] = None,
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
        dialect = req.dialect if req.dialect != "auto" else dialect
        automodel_version = req.automodel_version or automodel_version
    elif media_type in YAML_MEDIA_TYPES or not media_type:
        with unusable_yaml_is_400():
            text = decode(body, "<request>", max_bytes=1 << 20)
    else:
        raise client_error(  # `field` as /v1/plan's 415 (service.http.limits.StrictRequestRoute)
            415,
            f"content type {media_type!r} is not accepted: send the YAML as text/plain or application/yaml "
            "(curl --data-binary needs -H 'Content-Type: application/yaml'), "
            'or JSON {"yaml": "..."} as application/json',
            "content-type",
        )
    if automodel_version is not None:
        from service.validate.automodel.versions import schema

        try:
            schema().judged(automodel_version)
        except ValueError as err:
            raise client_error(400, str(err), "automodel_version") from None
    if gpu_type is not None:
        lookup_hardware(gpu_type)  # unknown -> 404 with the known names, as the CLI's exit 2
    with unusable_yaml_is_400():
        report = await run_in_threadpool(validate_text, text, "<request>", gpus, gpu_type, nodes, lookup_model,
                                         dialect, automodel_version=automodel_version)
    return m.ValidateResponse(
        files=[m.FileFindings(path=report.path, findings=[f.to_dict() for f in report.findings])],
        summary=m.ValidateSummary(files=1, errors=report.errors, warnings=report.warnings),
    )
