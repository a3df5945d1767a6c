"""GET /v1/recipes, /v1/models and /v1/hardware: the bundled index, as `recipe-advisor recipes|models|hardware`
lists it."""

from __future__ import annotations

from typing import Annotated, Optional

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import PlainTextResponse, Response

import recipe_index as index
from recipe_index.errors import UnknownHardwareError
from service.catalog import hardware_rows, model_rows
from service.http import schemas as m
from service.http.accept import media_ranges, quality
from service.http.errors import client_error, pick
from service.http.limits import StrictRequestRoute
from service.lookups import lookup_hardware, lookup_model

router = APIRouter(route_class=StrictRequestRoute)  # unknown or repeated query parameters are a 422

_YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")


def _wants_yaml(request: Request) -> bool:
    """YAML where the client ranks a YAML type above JSON, or as high while naming it exactly (``*/*`` or
    ``application/*`` alone is JSON, the default; ``application/yaml;q=0`` refuses YAML)."""
    ranges = media_ranges(request.headers.get("accept", ""))
    yaml_q, specificity = max(quality(ranges, t) for t in _YAML_TYPES)
    json_q, _ = quality(ranges, "application/json")
    return yaml_q > json_q or (yaml_q == json_q > 0 and specificity == 2)


@router.get("/v1/recipes", response_model=list[m.RecipeSummary], tags=["index"], summary="List bundled recipes",
            responses=pick(404))
def list_recipes(
    family: Annotated[Optional[str], Query(max_length=m.MAX_NAME, description="Model family, e.g. `llama`.")] = None,
    mode: Annotated[Optional[m.GOAL], Query(description="pretrain, sft or peft.")] = None,
    hardware: Annotated[Optional[str], Query(max_length=m.MAX_NAME, description="GPU type, e.g. `h100`.")] = None,
    num_gpus: Annotated[Optional[int],
                        Query(ge=1, le=m.MAX_GPUS, description="GPU count the recipe is sized for.")] = None,
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
    responses={**pick(404), 200: {"content": {"application/yaml": {"schema": {"type": "string"}}}}},
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
    return [m.ModelSummary.model_validate(row) for row in model_rows(family)]


@router.get(
    "/v1/models/{model_id:path}",
    response_model=m.ModelDetail,
    tags=["index"],
    summary="One model card",
    description="By bundled id, alias or Hugging Face id (`meta-llama/Meta-Llama-3-8B` works as is).",
    responses=pick(404),
)
def get_model(
    model_id: Annotated[str, Path(max_length=m.MAX_NAME, description="Bundled id, alias or HF id.")]
) -> m.ModelDetail:
    return m.ModelDetail.from_card(lookup_model(model_id))


@router.get("/v1/hardware", response_model=list[m.HardwareOut], tags=["index"], summary="List hardware cards")
def list_hardware() -> list[m.HardwareOut]:
    return [m.HardwareOut.model_validate(row) for row in hardware_rows()]
